// Lab 03 checker: your hand-written tensor-parallel FFN (tp_ffn.cpp)
// against the same FFN computed whole, on one process, by every rank
// (no library TP code on either side). One line per check, [PASS] or
// [FAIL] with what was measured; exit 1 while any check fails.
//
//   labs/check.sh 03           (builds lab03_check from starter/ and runs it)
//   build/bin/lab03_check --nproc 4
//
// Tolerance 1e-6 relative to the largest reference value (fp32): the
// sharded side adds the same products in another order (per-rank partial
// sums, then the all-reduce). Measured: output 5.7e-8, dx 1.2e-7, dW 0 on
// 2 ranks; output 4.6e-7, dx 1.8e-7, dW 3.5e-7 on 4.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "lab_check.hpp"
#include "titan/dist/comm_log.hpp"
#include "titan/dist/world.hpp"
#include "titan/launch/program.hpp"
#include "titan/util/error.hpp"
#include "tp_ffn.hpp"

using namespace titan;

namespace {

using lab::fmt;
using lab::global_max;
using lab::rel_diff;
using lab::report;
using lab::seeded;

constexpr double kTol = 1e-6;
constexpr int64_t kBatch = 2, kSeq = 5, kDim = 8, kHidden = 24;  // hidden divides by 1, 2, 3, 4, 6, 8

std::string shape(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

struct Ops {
  int64_t all_reduces = 0, other = 0, bytes = 0;
};
// What ran since the last clear (read before the checker's own collectives).
Ops ops_since_clear() {
  Ops o;
  for (const auto& r : dist::CommLog::instance().records()) {
    if (r.op == dist::CommOp::AllReduce) {
      ++o.all_reduces;
      o.bytes = r.payload_bytes;
    } else {
      ++o.other;
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int, char**) -> int {
    const auto& world = dist::init_distributed({.device = "cpu"});
    const auto& group = *world.group();
    const int64_t n = world.size(), r = world.rank();
    TITAN_CHECK(kHidden % n == 0, "lab03_check: hidden ", kHidden, " does not divide by ", n, " ranks");
    const int64_t rows = kHidden / n;
    const int64_t act_bytes = kBatch * kSeq * kDim * static_cast<int64_t>(sizeof(float));
    auto& log = dist::CommLog::instance();

    // The whole FFN, identical on every rank.
    at::Tensor w1 = seeded(1, {kHidden, kDim}, 0.35), w3 = seeded(2, {kHidden, kDim}, 0.35);
    at::Tensor w2 = seeded(3, {kDim, kHidden}, 0.2);
    at::Tensor x_full = seeded(4, {kBatch, kSeq, kDim}), gy = seeded(5, {kBatch, kSeq, kDim});

    // Reference: one process, whole weights; loss L = Σ y ∗ gy, so dL/dy = gy.
    at::Tensor w1r = w1.clone().requires_grad_(true), w3r = w3.clone().requires_grad_(true);
    at::Tensor w2r = w2.clone().requires_grad_(true), xr = x_full.clone().requires_grad_(true);
    at::Tensor yr = at::matmul(at::silu(at::matmul(xr, w1r.t())) * at::matmul(xr, w3r.t()), w2r.t());
    (yr * gy).sum().backward();

    // 1. The cut: rank r owns hidden units [r·rows, (r+1)·rows).
    lab03::FfnShard shard = lab03::shard_ffn(w1, w3, w2, group);
    const at::Tensor e1 = w1.narrow(0, r * rows, rows), e3 = w3.narrow(0, r * rows, rows);
    const at::Tensor e2 = w2.narrow(1, r * rows, rows);
    const bool leaves = shard.w1.defined() && shard.w3.defined() && shard.w2.defined() && shard.w1.is_leaf() &&
                        shard.w3.is_leaf() && shard.w2.is_leaf() && shard.w1.requires_grad() &&
                        shard.w3.requires_grad() && shard.w2.requires_grad();
    const double d_cut = std::max({rel_diff(shard.w1, e1), rel_diff(shard.w3, e3), rel_diff(shard.w2, e2)});
    report(global_max(leaves && d_cut == 0 ? 0 : 1) == 0, "shard_ffn: w1/w3 hold this rank's rows, w2 its columns",
           "rank 0 holds w1 " + (shard.w1.defined() ? shape(shard.w1) : "undefined") + ", w2 " +
               (shard.w2.defined() ? shape(shard.w2) : "undefined") + " (want [" + std::to_string(rows) + ", " +
               std::to_string(kDim) + "] and [" + std::to_string(kDim) + ", " + std::to_string(rows) +
               "], leaves that require grad, values equal to the full weights' slices)");

    // 2. Forward: exactly one all-reduce, of the output, and y equals the whole FFN's.
    at::Tensor x = x_full.clone().requires_grad_(true);
    log.clear();
    at::Tensor y = lab03::ffn_forward(x, shard, group);
    const Ops fwd = ops_since_clear();
    const bool fwd_ops = n == 1 || (fwd.all_reduces == 1 && fwd.other == 0 && fwd.bytes == act_bytes);
    report(global_max(fwd_ops ? 0 : 1) == 0, "forward: one all-reduce (g) of the output",
           fmt("%.0f all-reduce(s)", double(fwd.all_reduces)) + fmt(", %.0f other collective(s)", double(fwd.other)) +
               fmt(", last payload %.0f bytes (want 1 all-reduce of %.0f bytes)", double(fwd.bytes), double(act_bytes)));
    const double d_y = global_max(rel_diff(y, yr));
    report(d_y <= kTol, "forward: output equals the unsharded FFN's",
           fmt("max |dy| / max |y| = %.3g (tolerance %.0e)", d_y, kTol));

    // 3. Backward: exactly one all-reduce, of the input gradient, and every gradient right.
    log.clear();
    bool threw = false;
    try {
      (y * gy).sum().backward();
    } catch (const c10::Error& e) {
      threw = true;
      if (r == 0) std::printf("backward failed: %s\n", e.what_without_backtrace());
    }
    const Ops bwd = ops_since_clear();
    const bool bwd_ops = !threw && (n == 1 || (bwd.all_reduces == 1 && bwd.other == 0 && bwd.bytes == act_bytes));
    report(global_max(bwd_ops ? 0 : 1) == 0, "backward: one all-reduce (f) of the input gradient",
           fmt("%.0f all-reduce(s)", double(bwd.all_reduces)) + fmt(", %.0f other collective(s)", double(bwd.other)) +
               fmt(", last payload %.0f bytes (want 1 all-reduce of %.0f bytes)", double(bwd.bytes), double(act_bytes)));
    const double d_x = global_max(rel_diff(x.grad(), xr.grad()));
    report(d_x <= kTol, "backward: input gradient equals the unsharded FFN's",
           fmt("max |dx| / max |ref| = %.3g (tolerance %.0e)", d_x, kTol));
    const double d_w1 = global_max(rel_diff(shard.w1.grad(), w1r.grad().narrow(0, r * rows, rows)));
    const double d_w3 = global_max(rel_diff(shard.w3.grad(), w3r.grad().narrow(0, r * rows, rows)));
    const double d_w2 = global_max(rel_diff(shard.w2.grad(), w2r.grad().narrow(1, r * rows, rows)));
    const double d_w = std::max({d_w1, d_w3, d_w2});
    report(d_w <= kTol, "backward: w1/w3/w2 shard gradients equal the reference's slices",
           fmt("max relative |dgrad| w1 %.3g, w3 %.3g", d_w1, d_w3) + fmt(", w2 %.3g (tolerance %.0e)", d_w2, kTol));

    return lab::finish();
  });
}
