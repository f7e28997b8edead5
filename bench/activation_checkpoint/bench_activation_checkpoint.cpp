// Activation checkpointing side by side in one process: for each model
// (torchtitan's debugmodel and a wider one) and each AC mode (none; full;
// selective every 2nd block; selective every block, which must equal full)
// it measures one training step's (forward + backward, no optimizer)
//
//   held   bytes of live tensors right after the forward (what the step
//          keeps for backward: activations, logits, loss graph)
//   peak   the most tensor bytes held at once during forward + backward,
//          above what was held before the forward
//   time   median forward and forward + backward wall time, as ratios to
//          no AC
//
// and prints next to the measured step-time ratio what the recompute should
// cost in FLOPs (torchtitan's counting, models/llama3/flops.hpp):
//
//   F        forward FLOPs per token = flops_per_token / 3
//   F_block  one block's forward FLOPs per token (2 · its parameters +
//            4 · H · Q · T for QKᵀ and scores·V)
//   expected = (3F + k · F_block) / 3F   with k blocks checkpointed
//            (per-op mode keeps the matmuls, so only the 4 · H · Q · T of
//            attention counts in its F_block)
//
// since a checkpointed block runs its forward once more in backward. The
// embedding lookup, norms, softmax and the loss are not FLOPs in this count
// but cost time, so the measured ratio can sit on either side of it.
//
// One model per flavor serves every mode (the wrapper is set and cleared
// per mode, so the weights and batch are identical); rounds alternate the
// modes so that machine noise hits them alike. The first round also checks
// that every mode gives the same loss and gradients as no AC, bit for bit.
//
//   bench/activation_checkpoint/run.sh
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "titan/util/measure.hpp"
#include "titan/launch/options.hpp"
#include "titan/launch/program.hpp"
#include "titan/metrics/tensor_memory.hpp"
#include "titan/models/llama3/flops.hpp"
#include "titan/models/llama3/model_args.hpp"
#include "titan/parallel/activation_checkpoint/checkpoint.hpp"
#include "titan/ops/cross_entropy.hpp"
#include "titan/util/error.hpp"
#include "titan/verify/reference_run.hpp"

using namespace titan;
namespace llama3 = titan::models::llama3;

namespace {

struct Options {
  int64_t steps = 3;    // timed steps per (model, mode) and round
  int64_t warmup = 1;   // untimed steps first, in the first round only
  int64_t rounds = 3;   // the modes alternate within each round
  int64_t batch = 8;    // sequences per step
  int64_t seq = 256;    // tokens per sequence
  int64_t dim = 512;    // the wide model's width
  int64_t layers = 8;   // the wide model's depth
  int64_t heads = 8;    // the wide model's heads
  int64_t threads = 0;  // intra-op threads; 0 = LibTorch's default
  std::string models = "debugmodel,wide";
  std::string modes = "none,full,selective:2,selective:op";
};

struct Mode {
  std::string mode, option;  // ac::AcPolicy::from_config's arguments
  std::string label() const { return mode == "selective" ? "selective " + option : mode; }
};

Mode parse_mode(const std::string& s) {
  const size_t colon = s.find(':');
  Mode m{s.substr(0, colon), colon == std::string::npos ? "1" : s.substr(colon + 1)};
  return m;
}

struct Row {
  Mode mode;
  int64_t wrapped = 0;
  int64_t held = 0, peak = 0;  // bytes, from the last timed step
  std::vector<double> fwd_ms, step_ms;
  double loss = 0, grad_sq = 0;  // first round's last step, for the equality check
  bool checked = false;
};

struct Model {
  std::string name;
  verify::RunSpec spec;
  llama3::Transformer model{nullptr};
  std::vector<Row> rows;
  double expected_per_block = 0;     // F_block / 3F
  double expected_per_block_op = 0;  // per-op mode recomputes attention's products only: 4·H·Q·T / 3F
};

// One round of one mode: set the checkpoint wrappers, run (in the first
// round) warm-up and then timed steps on the same batch, record times and the memory of the last one.
void run_mode(Model& m, Row& row, const Options& o, bool first_round) {
  const int64_t n = m.spec.model.n_layers;
  const ac::AcPolicy policy = ac::AcPolicy::from_config(row.mode.mode, row.mode.option);
  const std::vector<bool> which = policy.blocks(n);
  row.wrapped = 0;
  for (auto& b : m.model->blocks()) {
    if (which[static_cast<size_t>(b->layer_id)]) {
      // Per-op mode adds matmul-caching hooks to the Linears; they stay,
      // and do nothing outside an op-checkpointed forward.
      if (policy.per_op()) ac::checkpoint_module_selective_op(*b);
      else ac::checkpoint_module(*b);
      ++row.wrapped;
    } else {
      b->set_forward_wrapper({});
    }
  }
  const verify::MicroBatch mb = verify::local_micro_batches(m.spec, 1, 0, 1).front();
  const c10::Device dev = m.spec.device;
  const std::vector<at::Tensor> params = m.model->parameters();
  const int64_t warmup = first_round ? o.warmup : 0;
  for (int64_t step = 0; step < warmup + o.steps; ++step) {
    for (const at::Tensor& p : params)
      if (p.grad().defined()) p.mutable_grad().zero_();
    metrics::reset_tensor_memory_peak(dev);
    const int64_t start = metrics::tensor_memory(dev).current_bytes;
    const double t0 = now_ms();
    at::Tensor loss = ops::cross_entropy(m.model->forward(mb.inputs), mb.labels);
    const double t1 = now_ms();
    const int64_t held = metrics::tensor_memory(dev).current_bytes - start;
    loss.backward();
    const double t2 = now_ms();
    const int64_t peak = metrics::tensor_memory(dev).peak_bytes - start;
    if (step < warmup) continue;
    row.fwd_ms.push_back(t1 - t0);
    row.step_ms.push_back(t2 - t0);
    row.held = held, row.peak = peak;
    if (first_round && step + 1 == warmup + o.steps) {
      row.loss = loss.item<double>();
      double sq = 0;
      for (const at::Tensor& p : params)
        if (p.grad().defined()) sq += p.grad().to(at::kDouble).pow(2).sum().item<double>();
      row.grad_sq = sq;
      row.checked = true;
    }
  }
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    Options o;
    OptionParser p("bench_activation_checkpoint",
                   "activation checkpointing modes side by side: activation memory, step time, recompute vs FLOPs");
    p.add("--steps", &o.steps, "timed steps per model, mode and round");
    p.add("--warmup", &o.warmup, "untimed steps before them, in the first round (later rounds find the model warm)");
    p.add("--rounds", &o.rounds, "rounds (every mode runs once per round, so machine noise hits them alike)");
    p.add("--batch", &o.batch, "sequences per step");
    p.add("--seq", &o.seq, "tokens per sequence");
    p.add("--dim", &o.dim, "the wide model's dim (debugmodel: 256)");
    p.add("--layers", &o.layers, "the wide model's layers (debugmodel: 6)");
    p.add("--heads", &o.heads, "the wide model's heads (debugmodel: 16)");
    p.add("--threads", &o.threads, "intra-op threads (0: LibTorch's default)");
    p.add("--models", &o.models, "comma-separated: debugmodel, wide");
    p.add("--modes", &o.modes, "comma-separated: none, full, selective:N, selective:op");
    p.parse(argc, argv);
    TITAN_CHECK(o.steps > 0 && o.warmup >= 0 && o.rounds > 0, "--steps and --rounds must be > 0, --warmup >= 0");
    if (o.threads > 0) at::set_num_threads(static_cast<int>(o.threads));
    metrics::track_cpu_tensor_memory();  // before any model exists, so all of a step is counted

    std::vector<Mode> modes;
    for (const std::string& s : split_commas(o.modes)) modes.push_back(parse_mode(s));
    TITAN_CHECK(!modes.empty() && modes.front().mode == "none", "--modes must start with none (the baseline)");

    std::vector<Model> models;
    for (const std::string& name : split_commas(o.models)) {
      Model m;
      m.name = name;
      m.spec.model = llama3::flavor_args("debugmodel");
      if (name == "wide") {
        m.spec.model.dim = o.dim, m.spec.model.n_layers = o.layers, m.spec.model.n_heads = o.heads;
      } else {
        TITAN_CHECK(name == "debugmodel", "--models: '", name, "' is not debugmodel or wide");
      }
      m.spec.model.max_seq_len = o.seq;
      m.spec.global_batch = o.batch;
      m.spec.seq_len = o.seq;
      m.model = verify::build_model(m.spec, m.spec.model_seed);
      for (const Mode& md : modes) {
        Row r;
        r.mode = md;
        m.rows.push_back(r);
      }
      // Expected recompute cost per checkpointed block: one block's forward
      // FLOPs over a whole step's (3 forwards).
      const llama3::ModelArgs& a = m.spec.model;
      llama3::ModelArgs no_blocks = a;
      no_blocks.n_layers = 0;
      const double block_params =
          static_cast<double>(llama3::count_parameters(a) - llama3::count_parameters(no_blocks)) /
          static_cast<double>(a.n_layers);
      const double f_block = 2.0 * block_params + 4.0 * a.n_heads * a.head_dim() * o.seq;
      const double f_fwd = llama3::flops_per_token(a, o.seq) / 3.0;
      m.expected_per_block = f_block / (3.0 * f_fwd);
      m.expected_per_block_op = 4.0 * a.n_heads * a.head_dim() * o.seq / (3.0 * f_fwd);
      models.push_back(std::move(m));
    }

    for (int64_t round = 0; round < o.rounds; ++round)
      for (Model& m : models)
        for (Row& r : m.rows) run_mode(m, r, o, round == 0);

    std::printf("activation checkpointing, 1 process, %d intra-op thread(s), batch %lld x %lld tokens, %lld rounds x "
                "%lld timed steps after %lld warm-up, medians; step = forward + backward (no optimizer)\n",
                at::get_num_threads(), static_cast<long long>(o.batch), static_cast<long long>(o.seq),
                static_cast<long long>(o.rounds), static_cast<long long>(o.steps), static_cast<long long>(o.warmup));
    bool all_equal = true;
    for (const Model& m : models) {
      const llama3::ModelArgs& a = m.spec.model;
      std::printf("\n%s: dim %lld, %lld layers, %lld heads, vocab %lld, %.1fM parameters; one block = %.1f%% of the "
                  "forward FLOPs, blocks together %.1f%%\n",
                  m.name.c_str(), static_cast<long long>(a.dim), static_cast<long long>(a.n_layers),
                  static_cast<long long>(a.n_heads), static_cast<long long>(a.vocab_size),
                  static_cast<double>(llama3::count_parameters(a)) / 1e6, 300.0 * m.expected_per_block,
                  300.0 * m.expected_per_block * static_cast<double>(a.n_layers));
      std::printf("%-13s %7s %10s %8s %10s %8s %8s %8s %9s %8s %9s %6s\n", "mode", "blocks", "held MiB", "x none",
                  "peak MiB", "x none", "fwd ms", "x none", "step ms", "x none", "expected", "equal");
      const Row& base = m.rows.front();
      for (const Row& r : m.rows) {
        const double per_block = r.mode.option == "op" ? m.expected_per_block_op : m.expected_per_block;
        const double expected = 1.0 + per_block * static_cast<double>(r.wrapped);
        const bool equal = r.loss == base.loss && r.grad_sq == base.grad_sq;
        all_equal = all_equal && equal;
        char blocks[32];
        std::snprintf(blocks, sizeof blocks, "%lld/%lld", static_cast<long long>(r.wrapped),
                      static_cast<long long>(a.n_layers));
        std::printf("%-13s %7s %10.1f %8.2f %10.1f %8.2f %8.1f %8.2f %9.1f %8.2f %9.3f %6s\n", r.mode.label().c_str(),
                    blocks, mib(r.held), static_cast<double>(r.held) / static_cast<double>(base.held), mib(r.peak),
                    static_cast<double>(r.peak) / static_cast<double>(base.peak), median(r.fwd_ms),
                    median(r.fwd_ms) / median(base.fwd_ms), median(r.step_ms),
                    median(r.step_ms) / median(base.step_ms), expected, equal ? "yes" : "NO");
      }
    }
    std::printf("\n");
    for (const Model& m : models) {
      const Row& base = m.rows.front();
      for (const Row& r : m.rows)
        std::printf("RESULT model=%s mode=%s option=%s blocks=%lld held_bytes=%lld peak_bytes=%lld fwd_ms=%.2f "
                    "step_ms=%.2f step_ratio=%.4f expected_ratio=%.4f equal=%d\n",
                    m.name.c_str(), r.mode.mode.c_str(), r.mode.mode == "selective" ? r.mode.option.c_str() : "-",
                    static_cast<long long>(r.wrapped), static_cast<long long>(r.held),
                    static_cast<long long>(r.peak), median(r.fwd_ms), median(r.step_ms),
                    median(r.step_ms) / median(base.step_ms),
                    1.0 + (r.mode.option == "op" ? m.expected_per_block_op : m.expected_per_block) *
                              static_cast<double>(r.wrapped),
                    r.loss == base.loss && r.grad_sq == base.grad_sq ? 1 : 0);
    }
    TITAN_CHECK(all_equal, "a checkpointed mode gave another loss or other gradients than no AC");
    return 0;
  });
}
