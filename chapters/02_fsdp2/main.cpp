// Chapter 02 — FSDP2: fully sharded data parallelism.
//
// DDP (chapter 01) keeps a full copy of the parameters, gradients and
// optimizer state on every rank. FSDP keeps only 1/N of each: every
// parameter is cut along its first dimension into N shards (a DTensor with
// placement Shard(0)), and the optimizer only ever sees this rank's shard.
// To compute, a unit (one transformer block, or the root: embeddings, final
// norm, output) briefly gathers its full parameters:
//
//   forward   all-gather the unit's shards → compute → free the full copy
//   backward  all-gather again → compute gradients → reduce-scatter them,
//             so each rank receives the (averaged) gradient of its shard only
//
// and the all-gather of the next unit is issued before the current unit
// computes, so communication hides behind compute (prefetch).
//
// This program proves that this is still exactly data parallelism: it trains
// a small Llama 3 with FSDP and, on the same seed and global batch, a
// single-process reference, and compares them step by step. Then it shows
// what FSDP saves (memory per rank ≈ 1/N) and what it costs (communication:
// per unit an all-gather in forward, another in backward, a reduce-scatter —
// each (n−1)/n · S bytes per rank).
//
//   ./build/bin/ch02_fsdp2 --nproc 4
//   ./build/bin/ch02_fsdp2 --nproc 4 --dtype bf16 --reshard-after-forward off
//   ./build/bin/ch02_fsdp2 --nproc 4 --hsdp 2 --offload
//
// Exit status 0 means FSDP matched the reference within the stated tolerance.
#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "titan/dist/comm_log.hpp"
#include "titan/dist/device_mesh.hpp"
#include "titan/dist/world.hpp"
#include "titan/launch/program.hpp"
#include "titan/models/llama3/transformer.hpp"
#include "titan/parallel/fsdp/fully_shard.hpp"
#include "titan/train/loss.hpp"
#include "titan/util/error.hpp"

using namespace titan;
using models::llama3::ModelArgs;
using models::llama3::Transformer;

namespace {

// ----------------------------------------------------------------- options

struct Options {
  std::string dtype = "fp32";
  bool reshard_after_forward = true;
  bool offload = false;
  int64_t hsdp = 1;  // replicate degree; 1 = plain FSDP
  int64_t steps = 5;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      TITAN_CHECK(i + 1 < argc, a, " needs a value");
      return argv[++i];
    };
    auto integer = [&](const std::string& v) {
      char* end = nullptr;
      long long x = std::strtoll(v.c_str(), &end, 10);
      TITAN_CHECK(end && *end == '\0' && !v.empty() && x > 0, a, ": '", v, "' is not a positive integer");
      return static_cast<int64_t>(x);
    };
    if (a == "--dtype") o.dtype = value();
    else if (a == "--reshard-after-forward") {
      std::string v = value();
      TITAN_CHECK(v == "on" || v == "off", "--reshard-after-forward takes on or off, got '", v, "'");
      o.reshard_after_forward = v == "on";
    } else if (a == "--offload") o.offload = true;
    else if (a == "--hsdp") o.hsdp = integer(value());
    else if (a == "--steps") o.steps = integer(value());
    else if (a == "--help" || a == "-h") {
      std::printf("usage: ch02_fsdp2 [--nproc N] [--dtype fp32|bf16] [--reshard-after-forward on|off]\n"
                  "                  [--offload] [--hsdp R] [--steps N]\n");
      std::exit(0);
    } else
      throw Error("unknown option '" + a + "' (try --help)");
  }
  TITAN_CHECK(o.dtype == "fp32" || o.dtype == "bf16", "--dtype takes fp32 or bf16, got '", o.dtype, "'");
  return o;
}

// ------------------------------------------------------------ model & data

// Small enough to train in milliseconds, shaped to make sharding honest:
// the vocabulary (131) divides by no world size, so tok_embeddings and
// output are sharded unevenly (the last rank holds fewer rows).
ModelArgs tiny_args() {
  ModelArgs a;
  a.dim = 64;
  a.n_layers = 4;
  a.n_heads = 4;
  a.n_kv_heads = 2;
  a.vocab_size = 131;
  a.multiple_of = 32;
  a.max_seq_len = 16;
  return a;
}
constexpr int64_t kSeq = 16;
constexpr int64_t kGlobalBatch = 8;
constexpr uint64_t kSeed = 1234;

Transformer build_model() {
  torch::manual_seed(kSeed);  // both copies start from the same weights
  Transformer m(tiny_args(), at::TensorOptions().device(dist::world().device()));
  m->init_weights();
  return m;
}

// The global batch of a step, identical on every rank (own generator, so it
// does not depend on torch's global RNG).
std::pair<at::Tensor, at::Tensor> global_batch(int64_t step) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(4321 + step);
  at::Tensor t = at::randint(tiny_args().vocab_size, {kGlobalBatch, kSeq + 1}, gen, at::TensorOptions().dtype(at::kLong));
  t = t.to(dist::world().device());
  return {t.narrow(1, 0, kSeq), t.narrow(1, 1, kSeq)};
}

torch::optim::AdamW make_optimizer(const std::vector<at::Tensor>& params) {
  return torch::optim::AdamW(params, torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
}

// ------------------------------------------------------------- accounting

int64_t bytes_of(const at::Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; }

struct Memory {
  int64_t params = 0, grads = 0, optim = 0;
};

Memory memory_of(torch::nn::Module& model, torch::optim::AdamW& opt) {
  Memory m;
  for (const auto& p : model.parameters()) {
    m.params += bytes_of(p);
    m.grads += bytes_of(p.grad());
  }
  for (const auto& [key, state] : opt.state()) {
    auto& s = static_cast<torch::optim::AdamWParamState&>(*state);
    m.optim += bytes_of(s.exp_avg()) + bytes_of(s.exp_avg_sq()) + bytes_of(s.max_exp_avg_sq());
  }
  return m;
}

std::string mib(int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f MiB", double(b) / (1 << 20));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) -> int {
    const Options o = parse(argc, argv);
    const dist::World& world = dist::init_distributed();
    const int64_t n = world.size();
    const bool rank0 = world.rank() == 0;
    TITAN_CHECK(n % o.hsdp == 0, "--hsdp ", o.hsdp, " does not divide the world size ", n);
    TITAN_CHECK(kGlobalBatch % n == 0, "the global batch (", kGlobalBatch, ") does not divide by ", n, " ranks");

    // 1. The mesh. Plain FSDP shards over every rank. HSDP (--hsdp R) lays
    //    the ranks out as R replicas × n/R shards: parameters are sharded
    //    within a replica, and the replicas average their gradient shards.
    const int64_t shard = n / o.hsdp;
    dist::DeviceMesh mesh = o.hsdp == 1 ? dist::DeviceMesh(world, {n}, {"dp_shard"})
                                        : dist::DeviceMesh(world, {o.hsdp, shard}, {"dp_replicate", "dp_shard"});

    // 2. Two copies of the same model: the reference trains alone on the
    //    whole global batch; the other is sharded. (Only this lesson builds
    //    the full model on every rank — to have a reference to compare with.
    //    fully_shard itself also accepts a model built on the meta device.)
    Transformer reference = build_model();
    Transformer model = build_model();

    // 3. fully_shard, as torchtitan applies it: each block is a unit, then
    //    the root takes what is left (embeddings, final norm, output).
    fsdp::FullyShardOptions fs;
    if (o.dtype == "bf16") fs.mp_policy = {at::kBFloat16, at::kFloat};  // compute bf16, reduce fp32
    if (o.offload) fs.offload_policy = fsdp::CPUOffloadPolicy{true};
    fs.reshard_after_forward = o.reshard_after_forward;
    for (auto& block : model->blocks()) fsdp::fully_shard(*block, mesh, fs);
    fsdp::fully_shard(*model, mesh, fs);

    // 4. The optimizer sees the shards: model->parameters() yields them.
    auto ref_opt = make_optimizer(reference->parameters());
    auto opt = make_optimizer(model->parameters());

    // Tolerances. fp32: both sides add the same numbers in a different order
    // (per-rank sums, then a mean over ranks), so they differ by rounding:
    // ~1e-7 relative per op, grown over a few AdamW steps → 2e-5 (we see
    // ~2e-6). bf16: the sharded side computes with 8-bit-mantissa weights
    // against an fp32 reference → loss 1e-2, gradients 5e-3, parameters
    // 1e-2 (AdamW moves each parameter by ~lr = 1e-3 per step whatever the
    // gradient, so in bf16 the loss and gradient bounds are the sharp ones).
    const bool bf16 = o.dtype == "bf16";
    const double tol_loss = bf16 ? 1e-2 : 2e-5, tol_grad = bf16 ? 5e-3 : 2e-5, tol_param = bf16 ? 1e-2 : 2e-5;

    if (rank0) {
      std::printf("FSDP2 on %lld ranks (%s), dtype %s, reshard_after_forward %s%s\n", (long long)n,
                  mesh.describe().c_str(), o.dtype.c_str(), o.reshard_after_forward ? "on" : "off",
                  o.offload ? ", CPU offload" : "");
      std::printf("\n%-5s %-12s %-12s %-10s %-10s %-10s\n", "step", "loss ref", "loss fsdp", "|dloss|", "|dgrad|",
                  "|dparam|");
    }
    bool ok = true;
    const int64_t dp_rank = world.rank(), b = kGlobalBatch / n;
    for (int64_t step = 1; step <= o.steps; ++step) {
      dist::CommLog::instance().begin_step(step);
      fsdp::reset_unsharded_peak();  // step's peak of gathered (full) weights
      auto [tokens, labels] = global_batch(step);

      // 5a. Reference: one process, the whole batch.
      ref_opt.zero_grad();
      at::Tensor ref_loss = train::cross_entropy(reference->forward(tokens), labels);
      ref_loss.backward();

      // 5b. FSDP: this rank's rows of the batch. Forward gathers each unit's
      //     parameters just in time; backward reduce-scatters the gradients
      //     into shard.grad (the mean over ranks, i.e. the whole batch's).
      opt.zero_grad();
      at::Tensor loss = train::cross_entropy(model->forward(tokens.narrow(0, dp_rank * b, b)),
                                             labels.narrow(0, dp_rank * b, b));
      loss.backward();

      // 5c. Compare before the update: each shard's gradient against the
      //     rows of the reference gradient it covers.
      auto ref_params = reference->named_parameters(true);
      double dgrad = 0;
      for (auto& [name, dt] : fsdp::sharded_parameters(*model)) {
        const int64_t off = dt.local_offset()[0], rows = dt.local().size(0);
        if (rows == 0) continue;
        at::Tensor want = ref_params[name].grad().narrow(0, off, rows);
        dgrad = std::max(dgrad, (dt.local().grad().to(want.device()) - want).abs().max().item<double>());
      }
      ref_opt.step();
      opt.step();
      double dparam = 0;
      for (auto& [name, dt] : fsdp::sharded_parameters(*model)) {
        const int64_t off = dt.local_offset()[0], rows = dt.local().size(0);
        if (rows == 0) continue;
        at::Tensor want = ref_params[name].detach().narrow(0, off, rows);
        dparam = std::max(dparam, (dt.local().detach().to(want.device()) - want).abs().max().item<double>());
      }
      // The job's loss is the mean of the ranks' (equal batch slices), and
      // the worst differences are the worst over ranks.
      at::Tensor stats = at::tensor({loss.item<double>(), dgrad, dparam}, at::kDouble).to(world.device());
      at::Tensor mean_loss = stats.narrow(0, 0, 1).clone();
      // The comparison's own collectives are bookkeeping, not FSDP traffic:
      // file them under another step number so step's volume stays FSDP's.
      dist::CommLog::instance().begin_step(-step);
      world.group()->all_reduce(mean_loss, dist::ReduceOp::Avg);
      world.group()->all_reduce(stats, dist::ReduceOp::Max);
      const double fl = mean_loss.item<double>(), rl = ref_loss.item<double>();
      const double dl = std::abs(fl - rl), dg = stats[1].item<double>(), dp = stats[2].item<double>();
      const bool step_ok = dl <= tol_loss && dg <= tol_grad && dp <= tol_param;
      ok = ok && step_ok;
      if (rank0)
        std::printf("%-5lld %-12.6f %-12.6f %-10.2e %-10.2e %-10.2e%s\n", (long long)step, rl, fl, dl, dg, dp,
                    step_ok ? "" : "  <-- over tolerance");
    }
    if (rank0)
      std::printf("tolerance: |dloss| <= %.0e, |dgrad| <= %.0e, |dparam| <= %.0e  → %s\n", tol_loss, tol_grad,
                  tol_param, ok ? "equivalent" : "NOT EQUIVALENT");

    // 6. Memory per rank: FSDP holds ≈ 1/shard of each (a little more on the
    //    ranks that hold the extra rows of uneven parameters).
    Memory ref_mem = memory_of(*reference, ref_opt), mem = memory_of(*model, opt);
    at::Tensor mem_all = world.group()->all_gather(
        at::tensor({mem.params, mem.grads, mem.optim}, at::kLong).to(world.device()), 0).cpu();
    if (rank0) {
      std::printf("\nmemory per rank (fp32 state)     params          grads           optimizer       ratio\n");
      std::printf("reference (1 process)           %-15s %-15s %-15s 1\n", mib(ref_mem.params).c_str(),
                  mib(ref_mem.grads).c_str(), mib(ref_mem.optim).c_str());
      for (int64_t r = 0; r < n; ++r) {
        int64_t p = mem_all[3 * r].item<int64_t>(), g = mem_all[3 * r + 1].item<int64_t>(),
                s = mem_all[3 * r + 2].item<int64_t>();
        std::printf("fsdp rank %-21lld %-15s %-15s %-15s 1/%.2f\n", (long long)r, mib(p).c_str(), mib(g).c_str(),
                    mib(s).c_str(), double(ref_mem.params + ref_mem.grads + ref_mem.optim) / double(p + g + s));
      }
    }

    // 6b. The price of computing with full weights: how many units' worth
    //     of gathered parameters were alive at once during the last step.
    //     With reshard_after_forward each block is freed after its forward
    //     and re-gathered in backward, so only the root and about one block
    //     are alive at a time; without it every block stays gathered from
    //     its forward to its backward.
    {
      const int64_t pb = o.dtype == "bf16" ? 2 : 4;
      int64_t root_elems = 0, block_elems = 0;
      for (const auto& item : reference->named_parameters(true)) {
        if (item.key().rfind("layers.0.", 0) == 0) block_elems += item.value().numel();
        if (item.key().rfind("layers.", 0) != 0) root_elems += item.value().numel();
      }
      const int64_t peak = fsdp::unsharded_bytes_peak();
      const double blocks = double(peak - root_elems * pb) / double(block_elems * pb);
      if (rank0)
        std::printf("\npeak gathered (full) parameters in step %lld: %s = root + %.1f blocks (model: root + %lld blocks)\n",
                    (long long)o.steps, mib(peak).c_str(), blocks, (long long)tiny_args().n_layers);
    }

    // 7. Communication of the last step, measured by the CommLog, next to the
    //    formula. Per unit with S = (its parameters, each padded to a
    //    multiple of `shard` rows) × bytes per element:
    //      all-gather      (n−1)/n · S_param_dtype, once in forward and, when
    //                      the unit was freed after forward, again in backward
    //      reduce-scatter  (n−1)/n · S_reduce_dtype, once per backward
    //      HSDP all-reduce 2(R−1)/R · S_reduce_dtype / shard, across replicas
    const int64_t pbytes = bf16 ? 2 : 4, rbytes = 4;
    auto padded = [&](const std::string& prefix, bool want_prefix) {
      int64_t elems = 0;
      for (const auto& item : reference->named_parameters(true)) {
        bool in_block = item.key().rfind("layers.", 0) == 0;
        if (want_prefix ? item.key().rfind(prefix + ".", 0) != 0 : in_block) continue;
        const at::Tensor& t = item.value();
        elems += (t.size(0) + shard - 1) / shard * shard * (t.numel() / t.size(0));
      }
      return elems;
    };
    double ag = 0, rs = 0, ar = 0;
    int64_t n_ag = 0, n_rs = 0, n_ar = 0;
    const double f = double(shard - 1) / double(shard);
    for (int64_t i = 0; i < tiny_args().n_layers; ++i) {
      int64_t e = padded("layers." + std::to_string(i), true);
      int times = o.reshard_after_forward ? 2 : 1;
      ag += times * f * double(e * pbytes);
      n_ag += times;
      rs += f * double(e * rbytes);
      ++n_rs;
      if (o.hsdp > 1) ar += 2.0 * double(o.hsdp - 1) / double(o.hsdp) * double(e / shard * rbytes), ++n_ar;
    }
    int64_t e_root = padded("", false);
    ag += f * double(e_root * pbytes);  // the root is not freed after forward
    ++n_ag;
    rs += f * double(e_root * rbytes);
    ++n_rs;
    if (o.hsdp > 1) ar += 2.0 * double(o.hsdp - 1) / double(o.hsdp) * double(e_root / shard * rbytes), ++n_ar;

    double m_ag = 0, m_rs = 0, m_ar = 0;
    int64_t c_ag = 0, c_rs = 0, c_ar = 0;
    for (const auto& r : dist::CommLog::instance().records_of_step(o.steps)) {
      if (r.op == dist::CommOp::AllGather) m_ag += double(r.wire_bytes), ++c_ag;
      if (r.op == dist::CommOp::ReduceScatter) m_rs += double(r.wire_bytes), ++c_rs;
      if (r.op == dist::CommOp::AllReduce) m_ar += double(r.wire_bytes), ++c_ar;
    }
    if (rank0) {
      std::printf("\ncommunication per rank, step %-4lld   measured (count)     analytic (count)\n",
                  (long long)o.steps);
      auto row = [](const char* what, double m, int64_t cm, double a, int64_t ca) {
        std::printf("%-32s %10.0f B (%2lld)     %10.0f B (%2lld)\n", what, m, (long long)cm, a, (long long)ca);
      };
      row(bf16 ? "all-gather (bf16)" : "all-gather (fp32)", m_ag, c_ag, ag, n_ag);
      row("reduce-scatter (fp32)", m_rs, c_rs, rs, n_rs);
      if (o.hsdp > 1) row("all-reduce across replicas", m_ar, c_ar, ar, n_ar);
    }
    // Records hold whole bytes: allow one byte of rounding per collective.
    const bool comm_ok = std::abs(m_ag - ag) <= double(c_ag) && std::abs(m_rs - rs) <= double(c_rs) &&
                         std::abs(m_ar - ar) <= double(c_ar) && c_ag == n_ag && c_rs == n_rs && c_ar == n_ar;
    if (rank0 && !comm_ok) std::printf("communication differs from the formula\n");
    return ok && comm_ok ? 0 : 1;
  });
}
