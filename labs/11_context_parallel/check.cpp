// Lab 11 checker: your merge and ring step (ring_step_lab.cpp) against
// causal attention computed on one process: every rank builds the whole
// q, k, v from fixed seeds and runs fp64 math_attention over the whole
// sequence (no communication, no library ring code). Then what crossed the
// network (the CommLog), whether each transfer was in flight during a
// block, and whether the masked blocks were skipped. One line per check,
// [PASS] or [FAIL] with what was measured; exit 1 while any fails.
//
//   labs/check.sh 11           (builds lab11_check from starter/ and runs it)
//   build/bin/lab11_check --nproc 4
//
// Tolerance 1e-5 relative to the largest reference value (fp32 blocks
// merged in fp32, against fp64). Measured with the solution on 2 and 4
// ranks: merge <= 5.1e-7, ring <= 3.0e-7.
#include <ATen/ATen.h>

#include <cmath>
#include <string>

#include "lab_check.hpp"
#include "ring_step_lab.hpp"
#include "titan/dist/comm_log.hpp"
#include "titan/dist/world.hpp"
#include "titan/launch/program.hpp"
#include "titan/ops/attention/math_attention.hpp"
#include "titan/util/error.hpp"

using namespace titan;

namespace {

using lab::fmt;
using lab::global_max;
using lab::rel_diff;
using lab::report;
using lab::seeded;

constexpr double kTol = 1e-5;
constexpr int64_t kBatch = 1, kHeads = 2, kChunk = 16, kDim = 8;  // s = n · kChunk

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int, char**) -> int {
    const auto& world = dist::init_distributed({.device = "cpu"});
    const auto& group = *world.group();
    const int64_t n = world.size(), r = world.rank();
    TITAN_CHECK(n >= 2, "lab11_check needs at least 2 ranks (run it with --nproc 2, or labs/check.sh 11)");
    at::NoGradGuard no_grad;  // forward only
    const int64_t s = n * kChunk;
    const at::Tensor q = seeded(1, {kBatch, kHeads, s, kDim}), k = seeded(2, {kBatch, kHeads, s, kDim}),
                     v = seeded(3, {kBatch, kHeads, s, kDim});

    // 1. merge alone: attention over the keys' two halves, merged, against
    //    attention over all of them (no mask), on one process.
    {
      const at::Tensor ref = ops::math_attention(q.to(at::kDouble), k.to(at::kDouble), v.to(at::kDouble), false).to(at::kFloat);
      const int64_t h = s / 2;
      lab11::Partial acc = lab11::block_attention(q, k.narrow(2, 0, h).contiguous(), v.narrow(2, 0, h).contiguous(), false);
      lab11::merge(acc, lab11::block_attention(q, k.narrow(2, h, h).contiguous(), v.narrow(2, h, h).contiguous(), false));
      const double d = global_max(rel_diff(acc.out, ref));
      report(d <= kTol, "merge: two key blocks merged equal attention over both",
             std::isinf(d) ? std::string("wrong shape") : fmt("max |dout| / max |out| = %.3g (tolerance %.0e)", d, kTol));
    }

    // 2. The ring: n steps from an empty result, this rank's rows of causal
    //    attention over the whole sequence.
    auto mine = [&](const at::Tensor& t) { return t.narrow(2, r * kChunk, kChunk).contiguous(); };
    const at::Tensor ref =
        mine(ops::math_attention(q.to(at::kDouble), k.to(at::kDouble), v.to(at::kDouble), true)).to(at::kFloat);
    lab11::Partial acc{at::zeros({kBatch, kHeads, kChunk, kDim}), at::full({kBatch, kHeads, kChunk}, -INFINITY)};
    at::Tensor kr = mine(k), vr = mine(v);
    const at::Tensor qr = mine(q);
    auto& log = dist::CommLog::instance();
    group.barrier();
    log.clear();
    lab11::block_spans().clear();
    for (int t = 0; t < n; ++t) lab11::ring_step(t, qr, kr, vr, acc, group);
    const auto records = log.records();
    const auto spans = lab11::block_spans();
    const double d = global_max(rel_diff(acc.out, ref));
    report(d <= kTol, "ring: n steps give this rank's rows of causal attention",
           std::isinf(d) ? std::string("wrong shape") : fmt("max |dout| / max |out| = %.3g (tolerance %.0e)", d, kTol));

    // 3. Traffic: K and V sent n−1 times each, nothing else.
    const int64_t piece = kBatch * kHeads * kChunk * kDim * static_cast<int64_t>(sizeof(float));
    int64_t sends = 0, recvs = 0, wrong = 0, other = 0;
    for (const auto& rec : records) {
      if (rec.op == dist::CommOp::Send || rec.op == dist::CommOp::Recv) {
        (rec.op == dist::CommOp::Send ? sends : recvs) += 1;
        wrong += rec.payload_bytes != piece;
      } else {
        ++other;
      }
    }
    const bool traffic_ok = sends == 2 * (n - 1) && recvs == 2 * (n - 1) && wrong == 0 && other == 0;
    report(global_max(traffic_ok ? 0 : 1) == 0, "K and V passed n-1 times round the ring, no collective",
           fmt("rank 0: %.0f sends, %.0f receives (want %.0f each", double(sends), double(recvs), double(2 * (n - 1))) +
               fmt(" of %.0f bytes), %.0f collective(s)", double(piece), double(other)));

    // 4. Masked blocks skipped: rank r computes blocks of ranks 0..r only.
    const bool skipped = static_cast<int64_t>(spans.size()) == r + 1;
    report(global_max(skipped ? 0 : 1) == 0, "fully masked blocks are skipped",
           fmt("rank %.0f computed %.0f block(s) (want %.0f: keys of ranks 0..r)", double(r), double(spans.size()),
               double(r + 1)));

    // 5. Overlap: every block of a step with a transfer ran while a send was
    //    in flight (posted before it started, waited after it ended).
    int64_t overlapped = 0;
    for (const auto& sp : spans)
      for (const auto& rec : records)
        if (rec.op == dist::CommOp::Send && rec.start_us <= sp.start_us && rec.end_us >= sp.end_us) {
          ++overlapped;
          break;
        }
    const int64_t want = std::min(r, n - 2) + 1;
    report(global_max(overlapped >= want ? 0 : 1) == 0, "each block runs under the next transfer",
           fmt("rank %.0f: %.0f of its blocks ran while a send was in flight (want %.0f)", double(r), double(overlapped),
               double(want)));
    return lab::finish();
  });
}
