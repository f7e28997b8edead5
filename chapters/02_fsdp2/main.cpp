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

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "titan/dist/comm_log.hpp"
#include "titan/dist/device_mesh.hpp"
#include "titan/dist/world.hpp"
#include "titan/launch/options.hpp"
#include "titan/launch/program.hpp"
#include "titan/parallel/fsdp/fully_shard.hpp"
#include "titan/util/error.hpp"
#include "titan/verify/fsdp_technique.hpp"
#include "titan/verify/reference_run.hpp"

using namespace titan;
using namespace titan::verify;
using models::llama3::Transformer;

namespace {

struct Options {
  std::string dtype = "fp32";
  std::string reshard_after_forward = "on";
  bool offload = false;
  int64_t hsdp = 1;  // replicate degree; 1 = plain FSDP
  int64_t steps = 5;
};

Options parse(int argc, char** argv) {
  Options o;
  OptionParser p("ch02_fsdp2", "FSDP2 (fully_shard) against a single-process reference on a tiny Llama 3");
  p.add("--dtype", &o.dtype, "compute dtype (bf16: MixedPrecisionPolicy, fp32 reduce)", {"fp32", "bf16"});
  p.add("--reshard-after-forward", &o.reshard_after_forward, "free each block's full weights after its forward",
        {"on", "off"});
  p.flag("--offload", &o.offload, "CPUOffloadPolicy: shards, gradients and optimizer state in CPU memory");
  p.add("--hsdp", &o.hsdp, "replicas (HSDP); 1 = plain FSDP");
  p.add("--steps", &o.steps, "optimizer steps");
  p.parse(argc, argv);
  TITAN_CHECK(o.hsdp >= 1, "--hsdp must be at least 1, got ", o.hsdp);
  return o;
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
    const bool bf16 = o.dtype == "bf16";
    const bool reshard_after_forward = o.reshard_after_forward == "on";
    TITAN_CHECK(n % o.hsdp == 0, "--hsdp ", o.hsdp, " does not divide the world size ", n);

    // The harness's tiny Llama 3 (dim 64; its vocabulary, 131, divides by no
    // world size, so tok_embeddings and output are sharded unevenly: the
    // last rank holds fewer rows), with 4 blocks to shard and prefetch.
    // Parameters stay fp32: bf16 is FSDP's compute dtype, not the storage's.
    RunSpec spec;
    spec.model.n_layers = 4;
    spec.steps = o.steps;
    spec.device = world.device();
    spec.validate(static_cast<int>(n));  // e.g. a global batch of 8 on 3 ranks is a one-line error

    // 1. The mesh. Plain FSDP shards over every rank. HSDP (--hsdp R) lays
    //    the ranks out as R replicas × n/R shards: parameters are sharded
    //    within a replica, and the replicas average their gradient shards.
    const int64_t shard = n / o.hsdp;
    dist::DeviceMesh mesh = o.hsdp == 1 ? dist::DeviceMesh(world, {n}, {"dp_shard"})
                                        : dist::DeviceMesh(world, {o.hsdp, shard}, {"dp_replicate", "dp_shard"});

    // 2. The reference: every rank trains it alone on the whole global
    //    batch, without communication. (Only this lesson builds the full
    //    model on every rank — to have a reference to compare with.
    //    fully_shard itself also accepts a model built on the meta device.)
    //    We keep its model and optimizer to weigh their memory below.
    Transformer reference = build_model(spec, spec.model_seed);
    auto ref_opt = build_optimizer(spec, reference->parameters());
    Trajectory ref = run_steps(spec, reference, *ref_opt, /*rank=*/0, /*world=*/1);

    // 3. fully_shard, as torchtitan applies it: each block is a unit, then
    //    the root takes what is left (embeddings, final norm, output).
    Transformer model = build_model(spec, spec.model_seed);
    fsdp::FullyShardOptions fs;
    if (bf16) fs.mp_policy = {at::kBFloat16, at::kFloat};  // compute bf16, reduce fp32
    if (o.offload) fs.offload_policy = fsdp::CPUOffloadPolicy{true};
    fs.reshard_after_forward = reshard_after_forward;
    for (auto& block : model->blocks()) fsdp::fully_shard(*block, mesh, fs);
    fsdp::fully_shard(*model, mesh, fs);

    // 4. Train this rank's rows of each global batch. Forward gathers each
    //    unit's parameters just in time; backward reduce-scatters the
    //    gradients into shard.grad (the mean over ranks, i.e. the whole
    //    batch's). The reduce-scatters run asynchronously under the backward
    //    of the units before; backward() returns once they are all in. The
    //    optimizer sees the shards: model->parameters() yields them. For the
    //    comparison the harness gathers full gradients and parameters from
    //    the shards, outside the step's CommLog records.
    auto opt = build_optimizer(spec, model->parameters());
    Technique technique = fsdp_technique(*model, world.group());
    technique.begin_step = [&](int64_t step) {
      fsdp::reset_unsharded_peak();                         // step's peak of gathered weights
      if (step == spec.steps) fsdp::clear_fsdp_events(*model);    // the last step's timeline, for 5c
    };
    Trajectory got = run_steps(spec, model, *opt, world.rank(), static_cast<int>(n), technique);

    // Tolerances. fp32: both sides add the same numbers in a different order
    // (per-rank sums, then a mean over ranks), so they differ by rounding:
    // ~1e-7 relative per op (gradients: we see ~1e-7), which AdamW turns
    // into up to ~lr/100 on an element whose gradient is within rounding of
    // zero (see adam_param_tolerance; parameters: we see ~8e-6) → 2e-5. bf16: the sharded side computes with 8-bit-mantissa weights
    // against an fp32 reference → loss 1e-2, gradients 5e-3, parameters
    // 1e-2 (AdamW moves each parameter by ~lr = 1e-3 per step whatever the
    // gradient, so in bf16 the loss and gradient bounds are the sharp ones).
    const double tol_loss = bf16 ? 1e-2 : 2e-5, tol_grad = bf16 ? 5e-3 : 2e-5, tol_param = bf16 ? 1e-2 : 2e-5;
    auto diffs = compare(ref, got, Tolerance{0, tol_grad}, Tolerance{0, tol_param});

    if (rank0) {
      std::printf("FSDP2 on %lld ranks (%s), dtype %s, reshard_after_forward %s%s\n", (long long)n,
                  mesh.describe().c_str(), o.dtype.c_str(), o.reshard_after_forward.c_str(),
                  o.offload ? ", CPU offload" : "");
      std::printf("\n%-5s %-12s %-12s %-10s %-10s %-10s\n", "step", "loss ref", "loss fsdp", "|dloss|", "|dgrad|",
                  "|dparam|");
    }
    bool ok = true;
    for (size_t i = 0; i < diffs.size(); ++i) {
      const StepDiff& d = diffs[i];
      // The worst over ranks, so that rank 0's row speaks for every rank.
      const bool local_ok = d.loss <= tol_loss && d.grads.ok() && d.params.ok();
      at::Tensor stats = at::tensor({d.loss, d.grads.max_abs, d.params.max_abs, local_ok ? 0.0 : 1.0}, at::kDouble)
                             .to(world.device());
      world.group()->all_reduce(stats, dist::ReduceOp::Max);
      stats = stats.cpu();
      const bool step_ok = stats[3].item<double>() == 0.0;
      ok = ok && step_ok;
      if (rank0)
        std::printf("%-5zu %-12.6f %-12.6f %-10.2e %-10.2e %-10.2e%s\n", i + 1, d.ref_loss, d.got_loss,
                    stats[0].item<double>(), stats[1].item<double>(), stats[2].item<double>(),
                    step_ok ? "" : "  <-- over tolerance");
    }
    if (rank0) {
      std::printf("tolerance: |dloss| <= %.0e, |dgrad| <= %.0e, |dparam| <= %.0e  → %s\n", tol_loss, tol_grad,
                  tol_param, ok ? "equivalent" : "NOT EQUIVALENT");
      // The harness times each step: zero_grad, forward, backward, optimizer.
      std::vector<double> ms;
      for (const StepResult& r : got.steps) ms.push_back(r.seconds * 1e3);
      std::sort(ms.begin(), ms.end());
      if (!ms.empty())
        std::printf("fsdp step time on rank 0 (forward + backward + optimizer): median %.2f ms over %zu steps\n",
                    ms[ms.size() / 2], ms.size());
    }

    // 5. Memory per rank: FSDP holds ≈ 1/shard of each (a little more on the
    //    ranks that hold the extra rows of uneven parameters).
    const int64_t ref_params = tensor_bytes(snapshot_params(*reference)),
                  ref_grads = tensor_bytes(snapshot_grads(*reference)), ref_optim = optimizer_state_bytes(*ref_opt);
    at::Tensor mem_all =
        world.group()
            ->all_gather(at::tensor({tensor_bytes(snapshot_params(*model)), tensor_bytes(snapshot_grads(*model)),
                                     optimizer_state_bytes(*opt)},
                                    at::kLong)
                             .to(world.device()),
                         0)
            .cpu();
    if (rank0) {
      std::printf("\nmemory per rank (fp32 state)     params          grads           optimizer       ratio\n");
      std::printf("reference (1 process)           %-15s %-15s %-15s 1\n", mib(ref_params).c_str(),
                  mib(ref_grads).c_str(), mib(ref_optim).c_str());
      for (int64_t r = 0; r < n; ++r) {
        int64_t p = mem_all[3 * r].item<int64_t>(), g = mem_all[3 * r + 1].item<int64_t>(),
                s = mem_all[3 * r + 2].item<int64_t>();
        std::printf("fsdp rank %-21lld %-15s %-15s %-15s 1/%.2f\n", (long long)r, mib(p).c_str(), mib(g).c_str(),
                    mib(s).c_str(), double(ref_params + ref_grads + ref_optim) / double(p + g + s));
      }
    }

    // 5b. The price of computing with full weights: how many units' worth
    //     of gathered parameters were alive at once during the last step.
    //     With reshard_after_forward each block is freed after its forward
    //     and re-gathered in backward, so only the root and about one block
    //     are alive at a time; without it every block stays gathered from
    //     its forward to its backward.
    const int64_t pbytes = bf16 ? 2 : 4, rbytes = 4;
    {
      int64_t root_elems = 0, block_elems = 0;
      for (const auto& [name, t] : ref.initial_params) {
        if (name.rfind("layers.0.", 0) == 0) block_elems += t.numel();
        if (name.rfind("layers.", 0) != 0) root_elems += t.numel();
      }
      const int64_t peak = fsdp::unsharded_bytes_peak();
      const double blocks = double(peak - root_elems * pbytes) / double(block_elems * pbytes);
      if (rank0)
        std::printf("\npeak gathered (full) parameters in step %lld: %s = root + %.1f blocks (model: root + %lld blocks)\n",
                    (long long)spec.steps, mib(peak).c_str(), blocks, (long long)spec.model.n_layers);
    }

    // 5c. Overlap in backward, from the last step's event timeline: block
    //     k's reduce-scatter is issued when its backward is done and is
    //     still in flight while block k−1 computes its backward; it is
    //     waited only when block k−1 issues its own (one in flight at a
    //     time), or at the end of backward.
    {
      auto events = fsdp::fsdp_events(*model);
      auto find = [&](const std::string& unit, const std::string& what) {
        for (const auto& e : events)
          if (e.unit == unit && e.what == what) return e;
        return fsdp::FsdpEvent{};
      };
      const int64_t L = spec.model.n_layers;
      int64_t overlapped = 0;
      std::string example;
      for (int64_t k = L - 1; k >= 1; --k) {
        const std::string later = "layers." + std::to_string(k), earlier = "layers." + std::to_string(k - 1);
        auto rs = find(later, "reduce_scatter"), bw = find(earlier, "backward");
        if (rs.end_us == 0 || bw.end_us == 0) continue;
        if (rs.start_us <= bw.start_us && rs.end_us >= bw.end_us) ++overlapped;
        if (example.empty()) {
          char buf[200];
          std::snprintf(buf, sizeof buf, "reduce-scatter(%s) in flight %.0f..%.0f us, %s backward %.0f..%.0f us",
                        later.c_str(), rs.start_us, rs.end_us, earlier.c_str(), bw.start_us, bw.end_us);
          example = buf;
        }
      }
      if (rank0)
        std::printf("\nbackward overlap in step %lld: %lld of %lld block reduce-scatters in flight through the\n"
                    "previous block's backward (rank 0: %s)\n",
                    (long long)spec.steps, (long long)overlapped, (long long)(L - 1), example.c_str());
    }

    // 6. Communication of the last step, measured by the CommLog, next to the
    //    formula. Per unit with S = (its parameters, each padded to a
    //    multiple of `shard` rows) × bytes per element:
    //      all-gather      (n−1)/n · S_param_dtype, once in forward and, when
    //                      the unit was freed after forward, again in backward
    //      reduce-scatter  (n−1)/n · S_reduce_dtype, once per backward
    //      HSDP all-reduce 2(R−1)/R · S_reduce_dtype / shard, across replicas
    auto padded = [&](const std::string& prefix, bool want_prefix) {
      int64_t elems = 0;
      for (const auto& [name, t] : ref.initial_params) {
        bool in_block = name.rfind("layers.", 0) == 0;
        if (want_prefix ? name.rfind(prefix + ".", 0) != 0 : in_block) continue;
        elems += (t.size(0) + shard - 1) / shard * shard * (t.numel() / t.size(0));
      }
      return elems;
    };
    double ag = 0, rs = 0, ar = 0;
    int64_t n_ag = 0, n_rs = 0, n_ar = 0;
    const double f = double(shard - 1) / double(shard);
    auto add_unit = [&](int64_t elems, int gathers) {
      ag += gathers * f * double(elems * pbytes);
      n_ag += gathers;
      rs += f * double(elems * rbytes);
      ++n_rs;
      if (o.hsdp > 1) ar += 2.0 * double(o.hsdp - 1) / double(o.hsdp) * double(elems / shard * rbytes), ++n_ar;
    };
    for (int64_t i = 0; i < spec.model.n_layers; ++i)
      add_unit(padded("layers." + std::to_string(i), true), reshard_after_forward ? 2 : 1);
    add_unit(padded("", false), 1);  // the root is not freed after forward

    double m_ag = 0, m_rs = 0, m_ar = 0;
    int64_t c_ag = 0, c_rs = 0, c_ar = 0;
    for (const auto& r : dist::CommLog::instance().records_of_step(spec.steps)) {
      if (r.op == dist::CommOp::AllGather) m_ag += double(r.wire_bytes), ++c_ag;
      if (r.op == dist::CommOp::ReduceScatter) m_rs += double(r.wire_bytes), ++c_rs;
      if (r.op == dist::CommOp::AllReduce) m_ar += double(r.wire_bytes), ++c_ar;
    }
    if (rank0) {
      std::printf("\ncommunication per rank, step %-4lld   measured (count)     analytic (count)\n",
                  (long long)spec.steps);
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
