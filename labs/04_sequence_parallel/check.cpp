// Lab 04 checker: your sequence-parallel transitions (sp_lab.cpp) inside
// the given SP block half, x + FFN(norm(x)), against the same block computed
// whole on one process by every rank from fixed seeds (no library TP/SP
// code on either side). Each rank feeds its slice of the sequence and owns
// the loss of its slice (the job's loss is the sum over ranks). One line
// per check, [PASS] or [FAIL] with what was measured; exit 1 while any fails.
//
//   labs/check.sh 04           (builds lab04_check from starter/ and runs it)
//   build/bin/lab04_check --nproc 4
//
// Tolerance 1e-6 relative to the largest reference value (fp32): only the
// order of the partial sums differs. Measured: output 4.2e-8, dx 1.3e-7,
// dW 3.1e-8 on 2 ranks; output 9.0e-8, dx 1.8e-7, dW 4.3e-7 on 4.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "sp_lab.hpp"
#include "lab_check.hpp"
#include "titan/dist/comm_log.hpp"
#include "titan/dist/world.hpp"
#include "titan/launch/program.hpp"
#include "titan/util/error.hpp"

using namespace titan;

namespace {

using lab::fmt;
using lab::global_max;
using lab::rel_diff;
using lab::report;
using lab::seeded;

constexpr double kTol = 1e-6;
constexpr int64_t kBatch = 2, kChunk = 3, kDim = 8, kHidden = 24;  // s = n · kChunk; hidden divides by 1..4, 6, 8

// The collectives since the last clear, by kind, and whether every one had
// the expected payload (the whole sequence's activation).
struct Ops {
  std::map<dist::CommOp, int64_t> count;
  int64_t wrong_size = 0;
  bool exactly_one_each(int64_t n) const {
    if (n == 1) return true;
    int64_t total = 0;
    for (const auto& [op, c] : count) total += c;
    return total == 2 && count.count(dist::CommOp::AllGather) && count.at(dist::CommOp::AllGather) == 1 &&
           count.count(dist::CommOp::ReduceScatter) && count.at(dist::CommOp::ReduceScatter) == 1 && wrong_size == 0;
  }
  std::string describe() const {
    auto get = [&](dist::CommOp op) { return double(count.count(op) ? count.at(op) : 0); };
    int64_t total = 0;
    for (const auto& [op, c] : count) total += c;
    return fmt("%.0f all-gather(s), %.0f reduce-scatter(s)", get(dist::CommOp::AllGather),
               get(dist::CommOp::ReduceScatter)) +
           fmt(", %.0f other(s), %.0f of the wrong size", double(total) - get(dist::CommOp::AllGather) -
                                                              get(dist::CommOp::ReduceScatter),
               double(wrong_size));
  }
};
Ops ops_since_clear(int64_t whole_bytes) {
  Ops o;
  for (const auto& r : dist::CommLog::instance().records()) {
    ++o.count[r.op];
    o.wrong_size += r.payload_bytes != whole_bytes;
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int, char**) -> int {
    const auto& world = dist::init_distributed({.device = "cpu"});
    const auto& group = *world.group();
    const int64_t n = world.size(), r = world.rank(), s = n * kChunk, rows = kHidden / n;
    TITAN_CHECK(kHidden % n == 0, "lab04_check: hidden ", kHidden, " does not divide by ", n, " ranks");
    const int64_t whole_bytes = kBatch * s * kDim * static_cast<int64_t>(sizeof(float));
    auto& log = dist::CommLog::instance();

    at::Tensor w1 = seeded(1, {kHidden, kDim}, 0.35), w3 = seeded(2, {kHidden, kDim}, 0.35);
    at::Tensor w2 = seeded(3, {kDim, kHidden}, 0.2);
    at::Tensor x_full = seeded(4, {kBatch, s, kDim}), gy = seeded(5, {kBatch, s, kDim});

    // Reference: the whole block on one process; L = Σ out ∗ gy.
    at::Tensor w1r = w1.clone().requires_grad_(true), w3r = w3.clone().requires_grad_(true);
    at::Tensor w2r = w2.clone().requires_grad_(true), xr = x_full.clone().requires_grad_(true);
    at::Tensor nr = xr * at::rsqrt(xr.pow(2).mean(-1, true) + 1e-6);
    at::Tensor yr = xr + at::matmul(at::silu(at::matmul(nr, w1r.t())) * at::matmul(nr, w3r.t()), w2r.t());
    (yr * gy).sum().backward();

    // This rank: its sequence slice, its hidden units (cut here, as lab 03 does).
    auto slice = [&](const at::Tensor& t) { return t.narrow(1, r * kChunk, kChunk); };
    auto leaf = [](const at::Tensor& t) { return t.contiguous().clone().requires_grad_(true); };
    lab04::FfnShard w{leaf(w1.narrow(0, r * rows, rows)), leaf(w3.narrow(0, r * rows, rows)),
                      leaf(w2.narrow(1, r * rows, rows))};
    at::Tensor x = leaf(slice(x_full));

    // 1. Shard(1) → Replicate on its own.
    {
      at::NoGradGuard no_grad;
      at::Tensor whole = lab04::gather_sequence(x, group);
      const double d = global_max(rel_diff(whole, x_full));
      report(d == 0, "Shard(1) -> Replicate: gather_sequence returns the whole sequence",
             std::isinf(d) ? std::string("wrong shape") : fmt("max |d| %.3g (want exactly 0)", d));
    }

    // 2. Forward through the block: one all-gather, one reduce-scatter.
    log.clear();
    at::Tensor y = lab04::sp_block(x, w, group);
    const Ops fwd = ops_since_clear(whole_bytes);
    report(global_max(fwd.exactly_one_each(n) ? 0 : 1) == 0, "forward: one all-gather and one reduce-scatter",
           fwd.describe() + fmt(" (want 1 each, of %.0f bytes)", double(whole_bytes)));
    const double d_y = global_max(rel_diff(y, slice(yr)));
    report(d_y <= kTol, "Partial -> Shard(1): the block's output is my slice of the unsharded block's",
           std::isinf(d_y) ? std::string("wrong shape")
                           : fmt("max |dy| / max |y| = %.3g (tolerance %.0e)", d_y, kTol));

    // 3. Backward: the mirror image, and every gradient right.
    log.clear();
    (y * slice(gy)).sum().backward();
    const Ops bwd = ops_since_clear(whole_bytes);
    report(global_max(bwd.exactly_one_each(n) ? 0 : 1) == 0,
           "backward: one all-gather (of dy) and one reduce-scatter (of dx)",
           bwd.describe() + fmt(" (want 1 each, of %.0f bytes)", double(whole_bytes)));
    const double d_x = global_max(rel_diff(x.grad(), slice(xr.grad())));
    report(d_x <= kTol, "backward: input gradient is my slice of the unsharded block's",
           fmt("max |dx| / max |ref| = %.3g (tolerance %.0e)", d_x, kTol));
    const double d_w = global_max(std::max({rel_diff(w.w1.grad(), w1r.grad().narrow(0, r * rows, rows)),
                                            rel_diff(w.w3.grad(), w3r.grad().narrow(0, r * rows, rows)),
                                            rel_diff(w.w2.grad(), w2r.grad().narrow(1, r * rows, rows))}));
    report(d_w <= kTol, "backward: w1/w3/w2 shard gradients equal the reference's slices",
           fmt("max relative |dgrad| %.3g (tolerance %.0e)", d_w, kTol));

    return lab::finish();
  });
}
