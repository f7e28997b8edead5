// Tensor parallelism on the debug model, three ways side by side in one run:
// TP (replicated activations, all-reduces), SP + TP (all-gathers and
// reduce-scatters) and async SP + TP (the same as ring passes under the
// matmuls). Rounds alternate the modes so that machine noise hits all of
// them alike; per mode it prints the median step time, the median time a
// rank is blocked on TP communication (exposed), and the bytes each rank
// sends per step, measured (CommLog) against the formula from the model's
// shapes:
//
//   S = batch · seq · dim · 4 bytes (one fp32 activation of the stream)
//   TP:     per block 4 all-reduces (2 fwd, 2 bwd), plus the embeddings'
//           all-reduce and the head's input-gradient all-reduce:
//           (4L + 2) · 2(n−1)/n · S, plus the logits' all-gather (n−1)/n · V/dim · S
//   SP+TP:  per block 4 all-gathers + 4 reduce-scatters, plus the
//           embeddings' reduce-scatter (fwd) and all-gather (bwd, for the
//           embedding gradient) and the head's all-gather (fwd) and
//           reduce-scatter (bwd): (8L + 4) · (n−1)/n · S, plus the logits'
//           all-gather and the all-reduce of the 2L + 1 norm weights'
//           gradients (each 2(n−1)/n · dim · 4 bytes)
//   async:  the same bytes as SP+TP, moved as (n−1) ring sends per site.
//
//   bench/tensor_parallel/run.sh      (2 and 4 ranks)
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "titan/util/measure.hpp"
#include "titan/dist/comm_log.hpp"
#include "titan/dist/device_mesh.hpp"
#include "titan/dist/world.hpp"
#include "titan/launch/options.hpp"
#include "titan/launch/program.hpp"
#include "titan/models/llama3/model_args.hpp"
#include "titan/models/llama3/tp_plan.hpp"
#include "titan/optim/optimizer.hpp"
#include "titan/parallel/tensor_parallel/async_tp.hpp"
#include "titan/ops/cross_entropy.hpp"

using namespace titan;

namespace {

struct Options {
  int64_t steps = 4;
  int64_t rounds = 3;
  int64_t batch = 2;
  int64_t seq = 256;
};

struct Sample {
  std::vector<double> step_ms, exposed_ms;
  double bytes_per_step = 0;
};

void run_mode(const std::string& mode, const Options& o, const dist::DeviceMesh& mesh, Sample& out) {
  models::llama3::ModelArgs args = models::llama3::flavor_args("debugmodel");
  args.max_seq_len = o.seq;
  torch::manual_seed(0);
  models::llama3::Transformer model(args, at::TensorOptions().device(dist::world().device()));
  model->init_weights();
  models::llama3::TpOptions tpo;
  tpo.sequence_parallel = mode != "tp";
  tpo.async_tp = mode == "async";
  models::llama3::apply_tp(model, mesh, tpo);
  optim::OptimizerOptions oo;
  auto opt = optim::build_optimizer(model->parameters(), oo);
  auto& log = dist::CommLog::instance();
  for (int64_t step = 0; step <= o.steps; ++step) {  // step 0 warms up
    auto gen = at::make_generator<at::CPUGeneratorImpl>(step);
    at::Tensor t = at::randint(args.vocab_size, {o.batch, o.seq + 1}, gen, at::TensorOptions().dtype(at::kLong));
    log.clear();
    tp::clear_async_tp_events();
    const double t0 = log.now_us();
    opt->zero_grad();
    ops::cross_entropy(model->forward(t.narrow(1, 0, o.seq)), t.narrow(1, 1, o.seq)).backward();
    opt->step();
    const double t1 = log.now_us();
    double exposed = tp::async_tp_exposed_us(), bytes = 0;
    for (const auto& r : log.records()) {
      bytes += static_cast<double>(r.wire_bytes);
      if (r.op != dist::CommOp::Send && r.op != dist::CommOp::Recv) exposed += r.end_us - r.start_us;
      if (r.op == dist::CommOp::Recv) bytes -= static_cast<double>(r.wire_bytes);  // count what leaves the rank
    }
    if (step == 0) continue;
    out.step_ms.push_back((t1 - t0) / 1e3);
    out.exposed_ms.push_back(exposed / 1e3);
    out.bytes_per_step = bytes;
  }
}

double analytic_bytes(const std::string& mode, const Options& o, int n) {
  const auto args = models::llama3::flavor_args("debugmodel");
  const double S = static_cast<double>(o.batch * o.seq * args.dim) * 4.0;
  const double logits = static_cast<double>(o.batch * o.seq * args.vocab_size) * 4.0;
  const double L = static_cast<double>(args.n_layers), f = (n - 1.0) / n;
  if (mode == "tp") return (4 * L + 2) * 2 * f * S + f * logits;
  const double norms = (2 * L + 1) * 2 * f * static_cast<double>(args.dim) * 4.0;
  return (8 * L + 4) * f * S + f * logits + norms;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    Options o;
    OptionParser p("bench_tensor_parallel", "TP vs SP+TP vs async TP on the debug model, side by side");
    p.add("--steps", &o.steps, "timed steps per mode and round");
    p.add("--rounds", &o.rounds, "rounds (modes alternate within each)");
    p.add("--batch", &o.batch, "sequences per step");
    p.add("--seq", &o.seq, "tokens per sequence");
    p.parse(argc, argv);
    const dist::World& world = dist::init_distributed({});
    dist::DeviceMesh mesh(world, {world.size()}, {"tp"});
    std::map<std::string, Sample> samples;
    const std::vector<std::string> modes = {"tp", "sp", "async"};
    for (int64_t r = 0; r < o.rounds; ++r)
      for (const auto& m : modes) run_mode(m, o, mesh, samples[m]);
    if (world.rank() == 0) {
      std::printf("debugmodel, %d rank(s), batch %lld x %lld tokens, %lld rounds x %lld steps (rank 0; medians)\n",
                  world.size(), static_cast<long long>(o.batch), static_cast<long long>(o.seq),
                  static_cast<long long>(o.rounds), static_cast<long long>(o.steps));
      std::printf("%-6s %10s %8s %12s %10s %14s %14s\n", "mode", "step ms", "x tp", "exposed ms", "exposed %",
                  "MiB/step meas", "MiB analytic");
      const double base = median(samples["tp"].step_ms);
      for (const auto& m : modes) {
        const Sample& s = samples[m];
        const double st = median(s.step_ms), ex = median(s.exposed_ms);
        std::printf("%-6s %10.1f %8.2f %12.1f %9.1f%% %14.3f %14.3f\n", m.c_str(), st, st / base, ex,
                    100.0 * ex / st, s.bytes_per_step / (1 << 20), analytic_bytes(m, o, world.size()) / (1 << 20));
        std::printf("RESULT mode=%s ranks=%d step_ms=%.2f exposed_ms=%.2f bytes=%.0f analytic=%.0f\n", m.c_str(),
                    world.size(), st, ex, s.bytes_per_step, analytic_bytes(m, o, world.size()));
      }
    }
    return 0;
  });
}
