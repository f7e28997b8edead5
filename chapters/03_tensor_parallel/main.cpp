// Chapter 03 — Tensor parallelism (TP).
//
// Data parallelism (chapters 01, 02) splits the batch: every rank still
// computes the whole model, on its own rows. Tensor parallelism splits the
// layers: every weight matrix is cut over the TP ranks, every rank computes
// with its piece on the same (whole) batch, and a collective puts the
// pieces together where the math needs the whole.
//
//   column split   y = x·W,  W = [W_0 | W_1 | … | W_{n-1}]
//                  y = [x·W_0 | x·W_1 | …]   rank r computes x·W_r — no communication
//   row split      z = y·V,  V = [V_0; V_1; …] and y = [y_0 | y_1 | …]
//                  z = Σ_r y_r·V_r           each rank a partial sum; one all-reduce
//
// Megatron-LM pairs them: the FFN's up projection is column-split, the
// elementwise activation stays local, the down projection is row-split, so
// the pair costs one all-reduce in forward (of its output) and one in
// backward (of its input's gradient). Attention is the same pair with the
// heads as the split: wq/wk/wv column-split (whole heads per rank), wo
// row-split.
//
// The program, in three steps:
//   1. an 8B-sized 4096 → 16384 FFN linear cut by columns over the ranks (built
//      on the meta device: shapes, no memory), then the same cut at a size
//      that runs here, its output checked against the unsharded linear;
//   2. the FFN pair with its single all-reduce: output and every gradient
//      against the unsharded pair, the all-reduce's bytes per rank as
//      measured next to the ring formula 2(n−1)/n·S;
//   3. a tiny Llama 3 with torchtitan's TP plan (sequence parallelism off:
//      that is chapter 04) trained a few AdamW steps against a
//      single-process reference: losses, gradients, parameters, memory and
//      communication per step.
//
//   ./build/bin/ch03_tensor_parallel --nproc 4
//   ./build/bin/ch03_tensor_parallel --nproc 2 --dtype bf16 --steps 3
//
// Exit status 0 means every TP result matched its unsharded reference.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "titan/dist/comm_log.hpp"
#include "titan/dist/device_mesh.hpp"
#include "titan/dist/world.hpp"
#include "titan/dtensor/placement.hpp"
#include "titan/launch/options.hpp"
#include "titan/launch/program.hpp"
#include "titan/metrics/format.hpp"
#include "titan/models/llama3/tp_plan.hpp"
#include "titan/ops/linear.hpp"
#include "titan/parallel/tensor_parallel/parallelize_module.hpp"
#include "titan/util/strprintf.hpp"
#include "titan/verify/reference_run.hpp"
#include "titan/verify/tp_technique.hpp"

using namespace titan;
using namespace titan::verify;

namespace {

struct Options {
  int64_t steps = 5;
  std::string dtype = "fp32";
  std::string device = "cpu";
  // The 8B-sized layer is d_model 4096 → d_ff 16384 (256 MiB in fp32); parts
  // 1 and 2 run it at 1/8 of each side (1/64 of the bytes), which CPU
  // processes sharing two cores compute in milliseconds. Raise them on GPUs.
  int64_t d_model = 512;
  int64_t d_ff = 2048;
};

// The 8B-sized picture, always shown at its real size (on the meta device).
constexpr int64_t kSeedDModel = 4096;
constexpr int64_t kSeedDFf = 16384;
// Parts 1 and 2 feed a [2, 64, d_model] activation: 128 tokens.
constexpr int64_t kBatch = 2;
constexpr int64_t kTokens = 64;
// CommLog step numbers of part 2 (part 3's training uses 1..steps).
constexpr int64_t kFfnForward = 1001;
constexpr int64_t kFfnBackward = 1002;

// N(0, 1)·scale draws from their own generator: the same on every rank, and
// independent of anything else that used torch's global RNG.
at::Tensor seeded(uint64_t seed, std::vector<int64_t> shape, double scale, const at::TensorOptions& to) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return (at::randn(shape, gen, at::TensorOptions().dtype(at::kDouble)) * scale).to(to);
}

// Every rank's values, on every rank (rank r's row r). The chapter's own
// bookkeeping: callers file it under a step of its own.
std::vector<std::vector<int64_t>> gather_from_ranks(const dist::ProcessGroup& g, const std::vector<int64_t>& mine,
                                                    c10::Device device) {
  at::Tensor t = at::tensor(mine, at::TensorOptions().dtype(at::kLong)).to(device);
  at::Tensor all = g.all_gather(t, 0).cpu().reshape({g.size(), static_cast<int64_t>(mine.size())});
  std::vector<std::vector<int64_t>> out(g.size());
  for (int r = 0; r < g.size(); ++r)
    for (int64_t i = 0; i < all.size(1); ++i) out[r].push_back(all[r][i].item<int64_t>());
  return out;
}

double max_over_ranks(const dist::ProcessGroup& g, double v, c10::Device device) {
  at::Tensor t = at::full({1}, v, at::TensorOptions().dtype(at::kDouble)).to(device);
  g.all_reduce(t, dist::ReduceOp::Max);
  return t.cpu().item<double>();
}

// max |got − ref| / max |ref|: the weights here are N(0, 1)-scaled, so
// absolute rounding grows with the values and a relative measure is fair.
double rel_diff(const at::Tensor& got, const at::Tensor& ref) {
  at::Tensor r = ref.detach().to(at::kCPU, at::kDouble), g = got.detach().to(at::kCPU, at::kDouble);
  return (g - r).abs().max().item<double>() / std::max(1e-30, r.abs().max().item<double>());
}

// "  <-- outside tolerance: param output.weight" — which checks of a step failed.
std::string failed_checks(const StepDiff& d, bool loss_ok) {
  std::string s = "  <-- outside tolerance:";
  if (!loss_ok) s += " loss";
  if (!d.grads.ok()) s += " grad " + d.grads.worst_excess_name;
  if (!d.params.ok()) s += " param " + d.params.worst_excess_name;
  if (loss_ok && d.grads.ok() && d.params.ok()) s += " on another rank";
  return s;
}

std::string mib(double bytes) { return titan::strprintf("%.3f MiB", bytes / (1 << 20)); }
std::string kib(double bytes) { return titan::strprintf("%.1f KiB", bytes / 1024.0); }

std::shared_ptr<tp::ParallelStyle> colwise() { return std::make_shared<tp::ColwiseParallel>(); }
std::shared_ptr<tp::ParallelStyle> rowwise() { return std::make_shared<tp::RowwiseParallel>(); }

// The collectives of one CommLog step, by op.
struct OpCount {
  int64_t count = 0;
  double wire = 0;  // bytes this rank sent under the ring algorithms
};
std::map<dist::CommOp, OpCount> ops_of_step(int64_t step) {
  std::map<dist::CommOp, OpCount> out;
  for (const auto& r : dist::CommLog::instance().records_of_step(step)) {
    out[r.op].count += 1;
    out[r.op].wire += double(r.wire_bytes);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    Options opt;
    OptionParser parser("ch03_tensor_parallel",
                        "tensor parallelism (Colwise/Rowwise, the Llama 3 plan) against unsharded references");
    parser.add("--steps", &opt.steps, "AdamW steps of the tiny Llama 3 (part 3)");
    parser.add("--dtype", &opt.dtype, "parameter, activation and collective dtype", {"fp32", "bf16"});
    parser.add("--device", &opt.device, "cuda: one GPU per rank, NCCL", {"cpu", "cuda"});
    parser.add("--d-model", &opt.d_model, "input width of the linear of parts 1 and 2 (at 8B size: 4096)");
    parser.add("--d-ff", &opt.d_ff, "output width of that linear (at 8B size: 16384)");
    parser.parse(argc, argv);
    TITAN_CHECK(opt.steps >= 1, "--steps must be at least 1, got ", opt.steps);
    TITAN_CHECK(opt.d_model >= 1 && opt.d_ff >= 1, "--d-model and --d-ff must be positive");

    const dist::World& world = dist::init_distributed({.device = opt.device});
    const c10::Device device = world.device();
    const int rank = world.rank(), n = world.size();
    const bool chatty = rank == 0;  // rank 0 prints; every rank runs every check
    auto& log = dist::CommLog::instance();
    const at::ScalarType dtype = parse_dtype(opt.dtype);
    const bool bf16 = dtype == at::kBFloat16;
    const int64_t elt = static_cast<int64_t>(c10::elementSize(dtype));
    const at::TensorOptions to = at::TensorOptions().dtype(dtype).device(device);
    TITAN_CHECK(opt.d_ff >= n, "--d-ff ", opt.d_ff, " leaves some of the ", n, " ranks without a column");

    // Part 3's model, checked now so that a world it cannot split (e.g.
    // --nproc 8: 4 key-value heads) fails at once, with one line. 8 query /
    // 4 key-value heads so that 2 and 4 ranks each hold whole heads (TP cuts
    // attention by heads).
    RunSpec spec;
    spec.model.n_heads = 8;
    spec.model.n_kv_heads = 4;
    spec.dtype = dtype;
    spec.device = device;
    spec.steps = opt.steps;
    models::llama3::check_tp_divisibility(spec.model, n);

    // The whole world is one TP group: a 1-D mesh named "tp".
    dist::DeviceMesh mesh(world, {n}, {"tp"});
    const dist::ProcessGroup& tp_group = *mesh.group(0);

    // Tolerances, relative to the reference's largest value. fp32: TP sums
    // the same products in another order (per-rank partial sums, added by
    // the all-reduce), so results differ by fp32 rounding — measured here
    // <= 3.3e-7 on 2 and 4 ranks; we allow 1e-6. A column-split forward
    // does no sum across ranks at all and is exact, as are the weight
    // gradients (each rank computes its own rows whole). bf16 (8 mantissa
    // bits, and the partial sums are rounded to bf16 before the all-reduce
    // adds them): measured <= 6.1e-3, allowed 3e-2.
    const double style_tol = bf16 ? 3e-2 : 1e-6;
    bool ok = true;

    if (chatty)
      std::printf("Chapter 03: tensor parallelism on %d rank(s) (one TP group: %s), %s, device %s\n\n", n,
                  mesh.describe().c_str(), opt.dtype.c_str(), device.str().c_str());

    // ======================================================== 1. column split
    // 1a. The 8B-sized picture: a d_model 4096 → d_ff 16384 linear over n
    //     ranks. titan's Linear stores W like nn.Linear, as [out, in] =
    //     [16384, 4096], so the columns of y = x·Wᵀ are the *rows* of the
    //     stored weight: ColwiseParallel cuts weight dim 0. Built on the meta
    //     device, the weight has a shape and no memory; parallelize_module
    //     cuts shapes the same way it cuts values.
    {
      ops::Linear seed_linear(kSeedDModel, kSeedDFf, at::TensorOptions().device(at::kMeta).dtype(dtype));
      tp::parallelize_module(*seed_linear, mesh, {{"", colwise()}});
      const auto [len, off] = shard_size_and_offset(kSeedDFf, n, rank);
      const int64_t local_rows = seed_linear->weight.size(0);
      log.begin_step(kBookkeepingStep);
      auto rows = gather_from_ranks(tp_group, {off, local_rows, seed_linear->weight.numel() * elt}, device);
      if (chatty) {
        std::printf("1a. an 8B-sized linear, %lld -> %lld, ColwiseParallel over %d rank(s) (meta device: shapes only)\n",
                    (long long)kSeedDModel, (long long)kSeedDFf, n);
        std::printf("    full weight [%lld x %lld] = %s (%s)\n", (long long)kSeedDFf, (long long)kSeedDModel,
                    mib(double(kSeedDFf) * kSeedDModel * elt).c_str(), opt.dtype.c_str());
        for (int r = 0; r < n; ++r)
          std::printf("    rank %d: columns %5lld..%5lld of %lld  weight [%lld x %lld] = %s\n", r,
                      (long long)rows[r][0], (long long)(rows[r][0] + rows[r][1] - 1), (long long)kSeedDFf,
                      (long long)rows[r][1], (long long)kSeedDModel, mib(double(rows[r][2])).c_str());
        std::printf("\n");
      }
      ok = ok && len == local_rows;
    }

    // 1b. The same cut at --d-model x --d-ff, for real: every rank builds the
    //     same full weight, one copy stays whole (the reference), the other
    //     keeps only this rank's columns. The sharded output is this rank's
    //     slice of the full output — computed without any communication.
    double linear_diff = 0;
    {
      const at::Tensor w = seeded(11, {opt.d_ff, opt.d_model}, 1.0 / std::sqrt(double(opt.d_model)), to);
      ops::Linear full(opt.d_model, opt.d_ff, to), lin(opt.d_model, opt.d_ff, to);
      {
        at::NoGradGuard no_grad;
        full->weight.copy_(w);
        lin->weight.copy_(w);
      }
      tp::parallelize_module(*lin, mesh, {{"", colwise()}});
      const auto [len, off] = shard_size_and_offset(opt.d_ff, n, rank);
      const at::Tensor x = seeded(12, {kBatch, kTokens, opt.d_model}, 1.0, to);
      log.clear();
      log.begin_step(kFfnForward);
      at::Tensor y = lin(x);  // [2, 64, d_ff/n]: this rank's columns
      const int64_t forward_collectives = static_cast<int64_t>(log.records_of_step(kFfnForward).size());
      const at::Tensor y_ref = full(x).narrow(-1, off, len);
      linear_diff = rel_diff(y, y_ref);
      log.begin_step(kBookkeepingStep);
      auto rows = gather_from_ranks(tp_group, {off, len, lin->weight.numel() * elt, forward_collectives}, device);
      const double worst = max_over_ranks(tp_group, linear_diff, device);
      const bool part_ok = worst <= style_tol && y.size(-1) == len && forward_collectives == 0;
      ok = ok && part_ok;
      if (chatty) {
        std::printf("1b. the same cut at d_model %lld -> d_ff %lld (the 8B size / %g), y = x W^T for x [%lld, %lld, %lld]\n",
                    (long long)opt.d_model, (long long)opt.d_ff, double(kSeedDModel) / double(opt.d_model),
                    (long long)kBatch, (long long)kTokens, (long long)opt.d_model);
        std::printf("    %-6s %-18s %12s %12s\n", "rank", "columns of y", "weight", "collectives");
        for (int r = 0; r < n; ++r)
          std::printf("    %-6d %6lld..%-10lld %12s %12lld\n", r, (long long)rows[r][0],
                      (long long)(rows[r][0] + rows[r][1] - 1), mib(double(rows[r][2])).c_str(), (long long)rows[r][3]);
        std::printf("    max|y - y_ref[:, :, columns]| / max|y_ref|, worst rank: %.3g (tolerance %.0e): %s\n", worst, style_tol,
                    part_ok ? "every rank holds exactly its slice of y" : "MISMATCH");
        std::printf("    the output stays sharded on its last dim: nothing was communicated\n\n");
      }
    }

    // ============================================ 2. the FFN pair, col -> row
    // up (d_model → d_ff) ColwiseParallel, silu, down (d_ff → d_model)
    // RowwiseParallel. Rank r holds up's columns r and the matching rows of
    // down, so silu(x·up_r) · down_r is rank r's share of the output: one
    // all-reduce (sum) makes the whole of it on every rank.
    //
    // Backward mirrors it. The input x was used by every rank's columns, so
    // each rank's dx is only its share: ColwiseParallel declares the
    // replicated input's gradient Partial, and the backward all-reduces it.
    // (Megatron's f and g: f = identity forward / all-reduce backward in
    // front of the column split, g = all-reduce forward / identity backward
    // after the row split.)
    {
      const at::Tensor w_up = seeded(21, {opt.d_ff, opt.d_model}, 1.0 / std::sqrt(double(opt.d_model)), to);
      const at::Tensor w_down = seeded(22, {opt.d_model, opt.d_ff}, 1.0 / std::sqrt(double(opt.d_ff)), to);
      ops::Linear up(opt.d_model, opt.d_ff, to), down(opt.d_ff, opt.d_model, to);
      ops::Linear up_ref(opt.d_model, opt.d_ff, to), down_ref(opt.d_ff, opt.d_model, to);
      {
        at::NoGradGuard no_grad;
        up->weight.copy_(w_up);
        up_ref->weight.copy_(w_up);
        down->weight.copy_(w_down);
        down_ref->weight.copy_(w_down);
      }
      // A parent module, so that one plan names both (as a model's plan does).
      auto ffn = std::make_shared<torch::nn::Module>();
      ffn->register_module("up", up);
      ffn->register_module("down", down);
      tp::parallelize_module(*ffn, mesh, {{"up", colwise()}, {"down", rowwise()}});

      at::Tensor x = seeded(23, {kBatch, kTokens, opt.d_model}, 1.0, to).requires_grad_(true);
      at::Tensor x_ref = x.detach().clone().requires_grad_(true);
      const at::Tensor dy = seeded(24, {kBatch, kTokens, opt.d_model}, 1.0, to);  // an arbitrary upstream gradient

      log.clear();
      log.begin_step(kFfnForward);
      at::Tensor y = down(at::silu(up(x)));
      log.begin_step(kFfnBackward);
      (y * dy).sum().backward();
      log.begin_step(kBookkeepingStep);
      at::Tensor y_ref = down_ref(at::silu(up_ref(x_ref)));
      (y_ref * dy).sum().backward();

      const auto [len, off] = shard_size_and_offset(opt.d_ff, n, rank);
      const double d_y = rel_diff(y, y_ref), d_x = rel_diff(x.grad(), x_ref.grad());
      const double d_up = rel_diff(up->weight.grad(), up_ref->weight.grad().narrow(0, off, len));
      const double d_down = rel_diff(down->weight.grad(), down_ref->weight.grad().narrow(1, off, len));
      double worst[4] = {d_y, d_x, d_up, d_down};
      for (double& v : worst) v = max_over_ranks(tp_group, v, device);

      // Analytic: S = the [2, 64, d_model] activation; a ring all-reduce
      // sends 2(n−1)/n·S per rank, once forward (y) and once backward (dx).
      const double S = double(kBatch * kTokens * opt.d_model * elt);
      const double per_ar = dist::ring_all_reduce_bytes(S, n);
      auto fwd = ops_of_step(kFfnForward), bwd = ops_of_step(kFfnBackward);
      const int64_t fwd_total = static_cast<int64_t>(log.records_of_step(kFfnForward).size());
      const int64_t bwd_total = static_cast<int64_t>(log.records_of_step(kFfnBackward).size());
      const auto& far = fwd[dist::CommOp::AllReduce];
      const auto& bar = bwd[dist::CommOp::AllReduce];
      // One byte of rounding per record (records hold whole bytes).
      const bool comm_ok = fwd_total == 1 && bwd_total == 1 && far.count == 1 && bar.count == 1 &&
                           std::abs(far.wire - per_ar) <= 1 && std::abs(bar.wire - per_ar) <= 1;
      bool part_ok = comm_ok;
      for (double v : worst) part_ok = part_ok && v <= style_tol;
      ok = ok && part_ok;
      if (chatty) {
        std::printf("2. FFN pair: up %lld -> %lld ColwiseParallel, silu, down %lld -> %lld RowwiseParallel\n",
                    (long long)opt.d_model, (long long)opt.d_ff, (long long)opt.d_ff, (long long)opt.d_model);
        std::printf("   each rank holds %lld of the %lld hidden units: up.weight [%lld x %lld] (rows = columns of the\n"
                    "   hidden activation) and down.weight [%lld x %lld] (the matching columns); rank 0: units %lld..%lld\n",
                    (long long)len, (long long)opt.d_ff, (long long)up->weight.size(0), (long long)up->weight.size(1),
                    (long long)down->weight.size(0), (long long)down->weight.size(1), (long long)off,
                    (long long)(off + len - 1));
        std::printf("   %-34s %s\n", "vs the unsharded pair", "max|diff|/max|ref| (worst rank)");
        std::printf("   %-34s %.3g\n", "output y (replicated)", worst[0]);
        std::printf("   %-34s %.3g\n", "input gradient dx", worst[1]);
        std::printf("   %-34s %.3g\n", "up.weight.grad (its rows)", worst[2]);
        std::printf("   %-34s %.3g\n", "down.weight.grad (its columns)", worst[3]);
        std::printf("   tolerance %.0e\n", style_tol);
        std::printf("   communication per rank, S = %lld x %lld x %lld x %lld B = %.0f B\n", (long long)kBatch,
                    (long long)kTokens, (long long)opt.d_model, (long long)elt, S);
        std::printf("   %-10s %12s %16s %20s\n", "pass", "collectives", "all-reduce B", "analytic 2(n-1)/n*S");
        std::printf("   %-10s %12lld %16.0f %20.0f\n", "forward", (long long)fwd_total, far.wire, per_ar);
        std::printf("   %-10s %12lld %16.0f %20.0f\n", "backward", (long long)bwd_total, bar.wire, per_ar);
        std::printf("   %s\n\n", part_ok ? "OK: one all-reduce each way, and the same numbers as one process"
                                         : "MISMATCH");
      }
    }

    // ================================================= 3. Llama 3 with TP
    // The tiny Llama of the harness (spec, above).
    const int64_t L = spec.model.n_layers;

    // 3a. The reference: one process, the whole global batch, no TP. Every
    //     rank trains it on its own, without communication.
    models::llama3::Transformer ref_model = build_model(spec, spec.model_seed);
    auto ref_opt = build_optimizer(spec, ref_model->parameters());
    Trajectory ref = run_steps(spec, ref_model, *ref_opt, /*rank=*/0, /*world=*/1);

    // 3b. The same model (same seed, so the same full weights on every
    //     rank) with torchtitan's plan. TP does not split the batch: every
    //     rank trains on all of it, so the harness runs it as rank 0 of a
    //     data-parallel world of one.
    models::llama3::Transformer model = build_model(spec, spec.model_seed);
    models::llama3::TpOptions tp_options;
    tp_options.sequence_parallel = false;  // the residual stream stays replicated
    tp_options.loss_parallel = false;      // the logits are gathered for the loss
    const std::string how = models::llama3::apply_tp(model, mesh, tp_options);
    const auto placed = tp::tp_parameters(*model);
    if (chatty) {
      std::printf("3. tiny Llama 3 (dim %lld, %lld layers, %lld heads / %lld kv heads, FFN %lld, vocab %lld), %s\n",
                  (long long)spec.model.dim, (long long)L, (long long)spec.model.n_heads,
                  (long long)spec.model.kv_heads(), (long long)spec.model.ffn_hidden_dim(),
                  (long long)spec.model.vocab_size, how.c_str());
      std::printf("   the plan (torchtitan's apply_tp, sequence parallel off):\n");
      for (const auto& [path, style] : models::llama3::llama3_tp_plan(tp_options))
        std::printf("     %-28s %s\n", path.c_str(), style->describe().c_str());
      std::printf("   the parameters of rank %d (layers.1 as layers.0; norms are not in the plan: replicated):\n", rank);
      for (const auto& item : model->named_parameters()) {
        const std::string& name = item.key();
        if (name.rfind("layers.", 0) == 0 && name.rfind("layers.0.", 0) != 0) continue;
        auto it = placed.find(name);
        const at::Tensor& p = item.value();
        std::string global = it == placed.end() ? "" : titan::strprintf(" of [%lld x %lld]",
                             (long long)it->second.global_shape[0],
                             (long long)(it->second.global_shape.size() > 1 ? it->second.global_shape[1] : 1));
        std::printf("     %-38s %-11s [%lld%s]%s\n", name.c_str(),
                    it == placed.end() ? "Replicate()" : it->second.placement.str().c_str(), (long long)p.size(0),
                    p.dim() > 1 ? titan::strprintf(" x %lld", (long long)p.size(1)).c_str() : "", global.c_str());
      }
      std::printf("\n");
    }
    auto optimizer = build_optimizer(spec, model->parameters());  // AdamW sees this rank's pieces
    Trajectory got = run_steps(spec, model, *optimizer, /*rank=*/0, /*world=*/1, tp_technique(*model, device));

    // 3c. Step by step against the reference (the gathered full gradients
    //     and parameters). fp32: the per-rank partial sums make the TP
    //     gradients differ by rounding — measured |dgrad| <= 5.1e-8 and
    //     |dloss| <= 4.8e-7 on 2 and 4 ranks, against the harness's 1e-5
    //     relative + 1e-6 absolute. Parameters after AdamW differ more
    //     (measured 7.5e-6): Adam divides by sqrt(v), so where a gradient is
    //     ~0 its rounding moves the parameter by a visible part of lr; hence
    //     1e-5 + lr/100 (adam_param_tolerance, as chapter 01).
    //     bf16: loss 1e-2 relative and gradients 1e-3 + 5e-2|ref| (measured
    //     2.8e-4 and 2.4e-4 on 4 ranks). Parameters 5·lr + 2e-2|ref|: Adam's
    //     first updates are ±lr whatever the gradient's size, so an element
    //     whose gradient is at bf16's rounding level and flips sign moves
    //     2·lr the other way per step (measured 3.9·lr after 5 steps on 4
    //     ranks, one layers.1.feed_forward.w3 element; 2.7·lr on 2). The
    //     gradients are the sharp test in bf16.
    const Tolerance grad_tol = bf16 ? Tolerance{5e-2, 1e-3} : Tolerance{1e-5, 1e-6};
    const Tolerance param_tol = bf16 ? Tolerance{2e-2, 5 * spec.optimizer.lr} : adam_param_tolerance(spec.optimizer.lr);
    const double loss_rtol = bf16 ? 1e-2 : 1e-5;
    auto diffs = compare(ref, got, grad_tol, param_tol);
    log.begin_step(kBookkeepingStep);
    if (chatty)
      std::printf("   %4s %12s %12s %10s %12s %12s\n", "step", "loss ref", "loss tp", "|dloss|", "max|dgrad|",
                  "max|dparam|");
    for (size_t i = 0; i < diffs.size(); ++i) {
      const StepDiff& d = diffs[i];
      const bool loss_ok = d.loss <= loss_rtol * std::abs(d.ref_loss) + 1e-6;
      bool step_ok = loss_ok && d.grads.ok() && d.params.ok();
      step_ok = max_over_ranks(tp_group, step_ok ? 0.0 : 1.0, device) == 0.0;
      ok = ok && step_ok;
      if (chatty)
        std::printf("   %4zu %12.7f %12.7f %10.3g %12.3g %12.3g%s\n", i + 1, d.ref_loss, d.got_loss, d.loss,
                    d.grads.max_abs, d.params.max_abs, step_ok ? "" : failed_checks(d, loss_ok).c_str());
    }
    if (chatty)
      std::printf("   tolerance (%s): loss %g relative; grads |d| <= %g + %g|ref|; params |d| <= %g + %g|ref|\n\n",
                  opt.dtype.c_str(), loss_rtol, grad_tol.atol, grad_tol.rtol, param_tol.atol, param_tol.rtol);

    // 3d. Memory per rank. Every sharded matrix is 1/n (the 131-row
    //     vocabulary tables unevenly: 33/33/33/32 rows on 4 ranks); the
    //     norms' weights are replicated. Gradients and AdamW's moments
    //     follow their parameters.
    {
      const int64_t p_b = tensor_bytes(snapshot_params(*model)), g_b = tensor_bytes(snapshot_grads(*model));
      const int64_t o_b = optimizer_state_bytes(*optimizer);
      const int64_t rp = tensor_bytes(snapshot_params(*ref_model)), rg = tensor_bytes(snapshot_grads(*ref_model));
      const int64_t ro = optimizer_state_bytes(*ref_opt);
      auto rows = gather_from_ranks(tp_group, {p_b, g_b, o_b}, device);
      if (chatty) {
        std::printf("   memory per rank        %12s %12s %12s %8s\n", "parameters", "gradients", "optimizer", "ratio");
        std::printf("   %-22s %12s %12s %12s %8s\n", "reference (1 process)", kib(rp).c_str(), kib(rg).c_str(),
                    kib(ro).c_str(), "1");
        for (int r = 0; r < n; ++r)
          std::printf("   tp rank %-14d %12s %12s %12s   1/%.2f\n", r, kib(rows[r][0]).c_str(), kib(rows[r][1]).c_str(),
                      kib(rows[r][2]).c_str(), double(rp + rg + ro) / double(rows[r][0] + rows[r][1] + rows[r][2]));
        std::printf("\n");
      }
    }

    // 3e. Communication per step. TP moves activations, not gradients. With
    //     A = one [batch, seq, dim] activation (S = A bytes):
    //       forward   the embedding's Partial output → Replicate    1 all-reduce
    //                 per block: wo's and w2's Partial outputs       2 all-reduces
    //                 the logits Shard(-1) → Replicate               1 all-gather
    //       backward  per block: the gradient of the attention's and
    //                 the FFN's replicated input (Partial)           2 all-reduces
    //                 the output projection's input gradient         1 all-reduce
    //     so 4L + 2 all-reduces of A (2(n−1)/n·A each) and one all-gather
    //     of the logits, padded to a multiple of n vocabulary columns
    //     ((n−1)/n of them). The optimizer step communicates nothing.
    {
      const int64_t B = spec.global_batch, T = spec.seq_len, D = spec.model.dim, V = spec.model.vocab_size;
      const int64_t v_pad = (V + n - 1) / n * n;
      const double A = double(B * T * D * elt), logits = double(B * T * v_pad * elt);
      const int64_t n_ar = 4 * L + 2, n_ag = 1;
      const double ar = n_ar * dist::ring_all_reduce_bytes(A, n), ag = dist::all_gather_bytes(logits, n);
      // What data parallelism would send instead: all gradients, all-reduced.
      int64_t numel = 0;
      for (const auto& [name, t] : ref.initial_params) numel += t.numel();
      const double ddp = dist::ring_all_reduce_bytes(double(numel * elt), n);
      if (chatty) {
        std::printf("   communication per rank and step: A = [%lld x %lld x %lld] x %lld B = %.0f B, "
                    "logits [%lld x %lld x %lld (vocab %lld padded)] x %lld B\n",
                    (long long)B, (long long)T, (long long)D, (long long)elt, A, (long long)B, (long long)T,
                    (long long)v_pad, (long long)V, (long long)elt);
        std::printf("   %4s %9s %14s %14s %9s %14s %14s\n", "step", "all-red.", "sent B", "analytic B", "all-gath.",
                    "sent B", "analytic B");
      }
      bool comm_ok = true;
      for (int64_t s = 1; s <= spec.steps; ++s) {
        auto m = ops_of_step(s);
        const int64_t others = static_cast<int64_t>(log.records_of_step(s).size()) - m[dist::CommOp::AllReduce].count -
                               m[dist::CommOp::AllGather].count;
        const OpCount& mar = m[dist::CommOp::AllReduce];
        const OpCount& mag = m[dist::CommOp::AllGather];
        const bool step_ok = mar.count == n_ar && mag.count == n_ag && others == 0 &&
                             std::abs(mar.wire - ar) <= double(n_ar) && std::abs(mag.wire - ag) <= 1;
        comm_ok = comm_ok && step_ok;
        if (chatty)
          std::printf("   %4lld %4lld/%-4lld %14.0f %14.0f %4lld/%-4lld %14.0f %14.0f%s\n", (long long)s,
                      (long long)mar.count, (long long)n_ar, mar.wire, ar, (long long)mag.count, (long long)n_ag,
                      mag.wire, ag, step_ok ? "" : "  <-- differs from the formula");
      }
      ok = ok && comm_ok;
      if (chatty) {
        std::printf("   (count measured/analytic; sent = the ring formula on each recorded payload, summed)\n");
        std::printf("   data parallelism would all-reduce the gradients instead: 2(n-1)/n x %lld params x %lld B = "
                    "%.0f B/rank; TP's volume grows with batch x seq x dim x layers, not with the parameters\n\n",
                    (long long)numel, (long long)elt, ddp);
      }
    }

    if (chatty)
      std::printf("%s\n", ok ? "OK: tensor parallelism matches the unsharded references"
                             : "FAIL: tensor parallelism does not match the unsharded references");
    return ok ? 0 : 1;
  });
}
