// Lab 01 checker: trains the tiny Llama 3 with your BucketedDDP (ddp.cpp)
// and compares it with the single-process reference on the same seed and
// global batch (titan/verify/reference_run.hpp, the harness the chapter
// and the tests use). Prints every check as PASS or FAIL with the numbers it
// saw; exits 1 when any fails.
//
//   labs/check.sh 01           (builds lab01_check from starter/ and runs it)
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <cstdio>
#include <functional>
#include <string>

#include "ddp.hpp"
#include "lab_check.hpp"
#include "titan/dist/comm_log.hpp"
#include "titan/dist/world.hpp"
#include "titan/launch/program.hpp"
#include "titan/ops/cross_entropy.hpp"
#include "titan/util/error.hpp"
#include "titan/verify/reference_run.hpp"

using namespace titan;
using namespace titan::verify;

namespace {

// fp32: DDP differs from the reference only in the rounding of the
// gradient sums (per rank, then across ranks): ~1e-7 relative.
const Tolerance kTol{1e-5, 1e-6};
constexpr int64_t kCapBytes = 48 * 1024;  // splits the tiny model into several buckets

using lab::report;

// True on every rank iff `ok` on every rank.
bool all_ranks(bool ok) {
  at::Tensor t = at::full({1}, ok ? 0.0 : 1.0, at::TensorOptions().dtype(at::kDouble));
  dist::world().group()->all_reduce(t, dist::ReduceOp::Max);
  return t.item<double>() == 0.0;
}

Technique lab_technique(lab01::BucketedDDP& ddp) {
  Technique t;
  t.backward = [&ddp](int64_t micro, int64_t count, const std::function<void()>& backward) {
    ddp.set_sync(micro + 1 == count);  // all but the last micro-batch: no_sync
    backward();
    ddp.set_sync(true);
  };
  t.before_step = [&ddp] { ddp.finish(); };
  t.global_losses = average_over(ddp.group());
  return t;
}

std::string fmt(const char* f, double a, double b = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b);
  return buf;
}

// Trains `spec` with the learner's DDP and checks it against the reference.
void check_training(const RunSpec& spec, const std::string& label) {
  const auto& w = dist::world();
  dist::CommLog::instance().clear();  // step numbers restart with every run
  Trajectory ref = train_reference(spec);
  auto model = build_model(spec, spec.model_seed);
  lab01::BucketedDDP ddp(*model, w.group(), kCapBytes);
  auto optimizer = build_optimizer(spec, model->parameters());
  Trajectory got = run_steps(spec, model, *optimizer, w.rank(), w.size(), lab_technique(ddp));
  auto diffs = compare(ref, got, kTol, adam_param_tolerance(spec.optimizer.lr));

  int64_t reduces = 0;
  for (const auto& r : dist::CommLog::instance().records_of_step(1))
    reduces += r.op == dist::CommOp::AllReduce;
  report(all_ranks(reduces == static_cast<int64_t>(ddp.num_buckets())), label + ": one all-reduce per bucket per step",
         fmt("step 1 ran %.0f all-reduces for %.0f buckets", double(reduces), double(ddp.num_buckets())));
  for (size_t i = 0; i < diffs.size(); ++i) {
    const auto& d = diffs[i];
    std::string step = label + ": step " + std::to_string(i + 1);
    report(all_ranks(d.loss_ok), step + " loss matches the reference",
           fmt("loss %.7f vs reference %.7f", d.got_loss, d.ref_loss) + fmt(" (|dloss| %.3g)", d.loss));
    report(all_ranks(d.grads.ok()), step + " gradients are averaged over ranks",
           fmt("max |dgrad| %.3g (tolerance %.0e relative", d.grads.max_abs, kTol.rtol) + fmt(" + %.0e), worst ", kTol.atol) +
               d.grads.worst_excess_name);
    report(all_ranks(d.params.ok()), step + " parameters match after the optimizer step",
           fmt("max |dparam| %.3g", d.params.max_abs) + ", worst " + d.params.worst_excess_name);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int, char**) {
    const auto& w = dist::init_distributed({.device = "cpu"});
    TITAN_CHECK(w.size() >= 2, "lab01_check needs at least 2 ranks (run it with --nproc 2, or labs/check.sh 01)");
    auto& log = dist::CommLog::instance();
    RunSpec spec;

    // 1. Broadcast (given code): ranks seeded differently start equal.
    {
      auto model = build_model(spec, spec.model_seed + 1000 * w.rank());
      lab01::BucketedDDP ddp(*model, w.group(), kCapBytes);
      auto ref = build_model(spec, spec.model_seed);
      double d = compare(snapshot_params(*ref), snapshot_params(*model), {0, 0}).max_abs;
      report(all_ranks(d == 0.0), "broadcast from rank 0", fmt("max |param - rank 0's| %.3g after construction", d));
      report(all_ranks(ddp.num_buckets() >= 3), "several buckets", fmt("%.0f buckets of at most %.0f bytes",
                                                                       double(ddp.num_buckets()), double(kCapBytes)));
    }

    // 2. Overlap: the first bucket's all-reduce must start while backward is
    //    still computing, i.e. before the embedding's gradient (the last one
    //    backward computes) exists.
    {
      auto model = build_model(spec, spec.model_seed);
      lab01::BucketedDDP ddp(*model, w.group(), kCapBytes);
      double embedding_us = -1;
      auto h = model->tok_embeddings->weight.register_hook([&](const at::Tensor&) { embedding_us = log.now_us(); });
      const int64_t step = 777;
      log.begin_step(step);
      auto batch = local_micro_batches(spec, 1, w.rank(), w.size());
      ops::cross_entropy(model->forward(batch[0].inputs), batch[0].labels).backward();
      double first_start = -1;
      int launched = 0;
      try {
        ddp.finish();
      } catch (const Error& e) {
        report(false, "finish() after backward", e.what());
      }
      log.begin_step(kBookkeepingStep);
      model->tok_embeddings->weight.remove_hook(h);
      for (const auto& r : log.records_of_step(step)) {
        if (r.op != dist::CommOp::AllReduce) continue;
        ++launched;
        if (first_start < 0 || r.start_us < first_start) first_start = r.start_us;
      }
      bool ok = launched > 0 && first_start < embedding_us;
      report(all_ranks(ok), "first bucket's all-reduce overlaps backward",
             launched == 0 ? std::string("no all-reduce ran during backward (is on_grad_ready launching buckets?)")
                           : fmt("started %.0f us before the last gradient was computed", embedding_us - first_start));
    }

    // 3. Equivalence with the single-process reference, then with gradient
    //    accumulation (set_sync(false) for all but the last micro-batch).
    check_training(spec, "fp32");
    RunSpec accum = spec;
    accum.grad_accum = 2;
    check_training(accum, "grad-accum 2");

    return lab::finish();
  });
}
