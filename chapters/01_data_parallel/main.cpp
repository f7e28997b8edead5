// Chapter 01 — Data parallelism (DDP).
//
// Every rank holds the whole model and trains on its own slice of the global
// batch. After backward each rank has the gradient of *its* slice; averaging
// those over the ranks gives exactly the gradient of the whole batch, so
// every rank takes the same optimizer step and the replicas stay identical.
//
// This program proves it: it trains a small Llama 3 with DDP and, on the
// same seed and global batch, a single-process reference, and compares the
// two step by step. Then it shows what DDP costs: memory per rank (a full
// copy of everything, plus the bucket buffers) and communication per step
// (one ring all-reduce of all gradients: 2(n−1)/n · S bytes per rank).
//
//   ./build/bin/ch01_data_parallel --nproc 4
//   ./build/bin/ch01_data_parallel --nproc 2 --dtype bf16 --bucket-mb 25 --grad-accum 2
//
// Exit status 0 means DDP matched the reference within the stated tolerance.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "titan/dist/comm_log.hpp"
#include "titan/dist/world.hpp"
#include "titan/launch/options.hpp"
#include "titan/launch/program.hpp"
#include "titan/metrics/format.hpp"
#include "titan/parallel/data_parallel.hpp"
#include "titan/util/error.hpp"
#include "titan/util/strprintf.hpp"
#include "titan/verify/data_parallel_technique.hpp"
#include "titan/verify/reference_run.hpp"

using namespace titan;
using namespace titan::parallel;
using namespace titan::verify;

namespace {

struct Options {
  std::string dtype = "fp32";
  std::string device = "cpu";
  // The tiny model is ~0.46 MB: PyTorch's default cap (25 MiB) would put it
  // all in one bucket, and there would be nothing to overlap. 0.1 MiB gives
  // a handful of buckets; try --bucket-mb 25 to see the difference.
  double bucket_mb = 0.1;
  int64_t steps = 5;
  int64_t grad_accum = 1;
  int64_t global_batch = 8;
};

Options parse(int argc, char** argv) {
  Options o;
  OptionParser p("ch01_data_parallel", "DDP against a single-process reference on a tiny Llama 3");
  p.add("--dtype", &o.dtype, "parameter dtype: fp32|bf16");
  p.add("--device", &o.device, "cpu|cuda");
  p.add("--bucket-mb", &o.bucket_mb, "gradient bucket cap in MiB");
  p.add("--steps", &o.steps, "optimizer steps");
  p.add("--grad-accum", &o.grad_accum, "micro-batches per rank and step");
  p.add("--batch", &o.global_batch, "global batch (sequences per step, over all ranks)");
  p.parse(argc, argv);
  TITAN_CHECK(o.bucket_mb > 0, "--bucket-mb must be positive, got ", o.bucket_mb);
  return o;
}

// The largest value any rank saw, so that rank 0's table speaks for all.
double max_over_ranks(const dist::ProcessGroup& g, double v) {
  at::Tensor t = at::full({1}, v, at::TensorOptions().dtype(at::kDouble));
  if (g.backend()->getBackendName() == "nccl") t = t.to(at::kCUDA);
  g.all_reduce(t, dist::ReduceOp::Max);
  return t.cpu().item<double>();
}

std::string kib(int64_t bytes) { return titan::strprintf("%.1f KiB", bytes / 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    const Options opt = parse(argc, argv);
    const dist::World& world = dist::init_distributed({.device = opt.device});
    const dist::ProcessGroup& group = *world.group();
    const int rank = world.rank(), n = world.size();
    const bool chatty = rank == 0;  // rank 0 prints; the others compute the same checks
    auto& log = dist::CommLog::instance();

    // ---------------------------------------------------------------- setup
    RunSpec spec;
    spec.dtype = parse_dtype(opt.dtype);
    spec.device = world.device();
    spec.steps = opt.steps;
    spec.grad_accum = opt.grad_accum;
    spec.global_batch = opt.global_batch;
    spec.validate(n);  // e.g. a batch of 6 on 4 ranks is a one-line error
    const bool bf16 = spec.dtype == at::kBFloat16;

    // fp32: DDP and the reference differ only in where gradients are summed
    // (inside one matmul over the whole batch, or per rank and then in the
    // all-reduce), i.e. in rounding: ~1e-7 relative. We allow 1e-5 relative
    // + 1e-6 absolute. bf16 keeps 8 mantissa bits, and every partial sum and
    // the all-reduce round to it: loss 1e-2 relative, gradients 5e-2
    // relative + 1e-3 absolute, parameters 2e-2 relative + 3·lr absolute
    // (Adam turns a sign flip of a near-zero gradient into a whole lr step).
    const Tolerance grad_tol = bf16 ? Tolerance{5e-2, 1e-3} : Tolerance{1e-5, 1e-6};
    const Tolerance param_tol = bf16 ? Tolerance{2e-2, 3 * spec.optimizer.lr} : adam_param_tolerance(spec.optimizer.lr);
    const double loss_rtol = bf16 ? 1e-2 : 1e-5;

    if (chatty) {
      std::printf("Chapter 01: data parallelism (DDP) on %d rank(s), %s, device %s\n", n, opt.dtype.c_str(),
                  spec.device.str().c_str());
      std::printf("model: tiny Llama 3 (dim %lld, %lld layers, vocab %lld); global batch %lld x %lld tokens, "
                  "%lld micro-batch(es) per rank; AdamW lr %g; %lld steps\n\n",
                  (long long)spec.model.dim, (long long)spec.model.n_layers, (long long)spec.model.vocab_size,
                  (long long)spec.global_batch, (long long)spec.seq_len, (long long)spec.grad_accum,
                  spec.optimizer.lr, (long long)spec.steps);
    }

    // ------------------------------------------------- 1. the reference run
    // Every rank trains the reference itself, on the whole global batch, with
    // no communication at all: that is what DDP must reproduce.
    Trajectory ref = train_reference(spec);

    // --------------------------------------------- 2. replicate the model
    // Each rank initialises from a *different* seed, as independent
    // processes easily would; replicate() broadcasts rank 0's parameters so
    // that all replicas start equal.
    models::llama3::Transformer model = build_model(spec, spec.model_seed + 1000 * rank);
    double before = compare(ref.initial_params, snapshot_params(*model), {0, 0}).max_abs;
    auto ddp = replicate(*model, world.group(), {.bucket_cap_mb = opt.bucket_mb});
    double after = compare(ref.initial_params, snapshot_params(*model), {0, 0}).max_abs;
    before = max_over_ranks(group, before);
    after = max_over_ranks(group, after);
    const auto buckets = ddp->buckets();
    if (chatty) {
      std::printf("replicate(): largest |param - rank 0's| before broadcast %.3g, after %.3g\n\n", before, after);
      std::printf("buckets (cap %.3g MiB), filled in reverse registration order = the order backward makes grads:\n",
                  opt.bucket_mb);
      std::printf("  %-6s %7s %12s  %s\n", "bucket", "params", "bytes", "first .. last parameter");
      for (size_t b = 0; b < buckets.size(); ++b)
        std::printf("  %-6zu %7zu %12lld  %s .. %s\n", b, buckets[b].names.size(), (long long)buckets[b].bytes,
                    buckets[b].names.front().c_str(), buckets[b].names.back().c_str());
      std::printf("\n");
    }

    // ------------------------------------------------------ 3. train with DDP
    // The technique: no_sync for all but the last micro-batch, sync before
    // the optimizer step, global loss = mean over ranks. We also time the
    // last backward of each step: when it started, when the embedding's
    // gradient (the last one backward computes) was ready, when it returned.
    Technique technique = data_parallel_technique(ddp);
    struct Times { double start = 0, compute_end = 0, returned = 0; };
    std::vector<Times> times;
    auto embedding_hook = model->tok_embeddings->weight.register_hook(
        [&](const at::Tensor&) { if (!times.empty()) times.back().compute_end = log.now_us(); });
    auto inner = technique.backward;
    technique.backward = [&](int64_t micro, int64_t count, const std::function<void()>& backward) {
      if (micro + 1 == count) times.push_back({log.now_us(), 0, 0});
      inner(micro, count, backward);
      if (micro + 1 == count) times.back().returned = log.now_us();
    };
    auto optimizer = build_optimizer(spec, model->parameters());
    Trajectory got = run_steps(spec, model, *optimizer, rank, n, technique);
    model->tok_embeddings->weight.remove_hook(embedding_hook);

    // ------------------------------------------------ 4. equivalence per step
    auto grad_diffs = compare(ref, got, grad_tol, param_tol);
    bool ok = before >= 0 && after == 0.0;
    if (chatty)
      std::printf("%4s %12s %12s %10s %12s %12s %9s %9s\n", "step", "loss ref", "loss ddp", "|dloss|", "max|dgrad|",
                  "max|dparam|", "ref ms", "ddp ms");
    for (size_t i = 0; i < grad_diffs.size(); ++i) {
      const auto& d = grad_diffs[i];
      TensorDiff p = compare(ref.steps[i].params, got.steps[i].params, param_tol);
      bool step_ok = d.loss <= loss_rtol * std::abs(d.ref_loss) + 1e-6 && d.grads.ok() && p.ok();
      double dl = max_over_ranks(group, d.loss), dg = max_over_ranks(group, d.grads.max_abs);
      double dp = max_over_ranks(group, p.max_abs);
      step_ok = max_over_ranks(group, step_ok ? 0.0 : 1.0) == 0.0;
      ok = ok && step_ok;
      if (chatty)
        std::printf("%4zu %12.7f %12.7f %10.3g %12.3g %12.3g %9.2f %9.2f %s\n", i + 1, d.ref_loss, d.got_loss, dl, dg, dp,
                    ref.steps[i].seconds * 1e3, got.steps[i].seconds * 1e3, step_ok ? "" : "  <-- outside tolerance");
    }
    if (chatty)
      std::printf("tolerance (%s): loss %g relative; grads |d| <= %g + %g|ref|; params |d| <= %g + %g|ref|\n\n",
                  opt.dtype.c_str(), loss_rtol, grad_tol.atol, grad_tol.rtol, param_tol.atol, param_tol.rtol);

    // --------------------------------------------------- 5. memory per rank
    // DDP replicates everything: each rank holds what the single process
    // holds, plus one flat buffer per bucket (another copy of the grads).
    NamedTensors params = snapshot_params(*model);
    int64_t param_b = tensor_bytes(params), grad_b = tensor_bytes(snapshot_grads(*model));
    int64_t opt_b = optimizer_state_bytes(*optimizer), bucket_b = ddp->bucket_buffer_bytes();
    if (chatty) {
      std::printf("memory per rank     %14s %14s\n", "reference", "DDP rank");
      std::printf("  parameters        %14s %14s\n", kib(param_b).c_str(), kib(param_b).c_str());
      std::printf("  gradients         %14s %14s\n", kib(grad_b).c_str(), kib(grad_b).c_str());
      std::printf("  optimizer state   %14s %14s\n", kib(opt_b).c_str(), kib(opt_b).c_str());
      std::printf("  bucket buffers    %14s %14s\n", kib(0).c_str(), kib(bucket_b).c_str());
      std::printf("  total             %14s %14s   (x%d ranks = %s for the job)\n\n",
                  kib(param_b + grad_b + opt_b).c_str(), kib(param_b + grad_b + opt_b + bucket_b).c_str(), n,
                  kib(n * (param_b + grad_b + opt_b + bucket_b)).c_str());
    }

    // ------------------------------------------ 6. communication per step
    // Measured: what the CommLog recorded in each step. Analytic: one ring
    // all-reduce of every gradient, S = (number of parameters) x (bytes per
    // element), costs 2(n-1)/n · S bytes sent per rank.
    int64_t numel = 0;
    for (const auto& [name, t] : params) numel += t.numel();
    const double S = double(numel) * double(c10::elementSize(spec.dtype));
    const double analytic = dist::ring_all_reduce_bytes(S, n);
    if (chatty) {
      std::printf("communication per step (group of %d): analytic S = %lld params x %zu B = %.0f B, "
                  "2(n-1)/n*S = %.0f B/rank\n",
                  n, (long long)numel, c10::elementSize(spec.dtype), S, analytic);
      std::printf("%4s %11s %14s %16s %16s %10s\n", "step", "all-reduces", "payload B", "sent B/rank", "analytic B/rank",
                  "comm ms");
    }
    bool comm_ok = true;
    for (int64_t s = 1; s <= spec.steps; ++s) {
      auto totals = log.step_totals(s);
      const auto& ar = totals["all_reduce"];
      if (n > 1) comm_ok = comm_ok && ar.count == static_cast<int64_t>(buckets.size()) &&
                           std::abs(double(ar.wire_bytes) - analytic) <= double(buckets.size());
      if (chatty)
        std::printf("%4lld %11lld %14lld %16lld %16.0f %10.2f\n", (long long)s, (long long)ar.count,
                    (long long)ar.payload_bytes, (long long)ar.wire_bytes, analytic, ar.time_us / 1e3);
    }
    ok = ok && comm_ok;
    if (chatty) std::printf("(a world of one all-reduces nothing; comm ms = time from launch to wait, overlapped)\n\n");

    // ------------------------------------------------ 7. overlap, last step
    // Times from the start of the last step's (last) backward. A bucket whose
    // all-reduce starts before "grads done" overlaps backward's compute.
    if (chatty && n > 1 && !times.empty()) {
      const Times& t = times.back();
      std::printf("overlap in step %lld (us from the start of backward): grads done at %.0f, backward returned at %.0f\n",
                  (long long)spec.steps, t.compute_end - t.start, t.returned - t.start);
      int overlapped = 0;
      for (const auto& r : log.records_of_step(spec.steps)) {
        if (r.op != dist::CommOp::AllReduce) continue;
        bool early = r.start_us < t.compute_end;
        overlapped += early;
        std::printf("  all-reduce %8lld B  start %8.0f  end %8.0f  %s\n", (long long)r.payload_bytes,
                    r.start_us - t.start, r.end_us - t.start, early ? "overlaps backward" : "after backward");
      }
      std::printf("%d of %zu bucket all-reduces started while backward was still computing\n\n", overlapped,
                  buckets.size());
    }

    if (chatty) std::printf("%s\n", ok ? "OK: DDP matches the single-process reference"
                                       : "FAIL: DDP does not match the single-process reference");
    return ok ? 0 : 1;
  });
}
