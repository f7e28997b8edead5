// Lab 07 checker: your ring all-gather → matmul (ring_lab.cpp) against
// all-gather-then-matmul computed on one process: every rank builds the
// whole input from fixed seeds and multiplies it whole (no communication,
// no library TP code). Then what crossed the network (the CommLog) and
// whether each transfer was in flight during a matmul. One line per
// check, [PASS] or [FAIL] with what was measured; exit 1 while any fails.
//
//   labs/check.sh 07           (builds lab07_check from starter/ and runs it)
//   build/bin/lab07_check --nproc 4
//
// Tolerance 1e-6 relative to the largest reference value (fp32): each
// chunk's product is the same dot products as the whole matmul's, only
// possibly blocked differently. Measured: 0 on 2 and 4 ranks.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "ring_lab.hpp"
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
constexpr int64_t kBatch = 2, kChunk = 3, kDim = 8, kOut = 6;  // s = n · kChunk

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int, char**) -> int {
    const auto& world = dist::init_distributed({.device = "cpu"});
    const auto& group = *world.group();
    const int64_t n = world.size(), r = world.rank();
    TITAN_CHECK(n >= 2, "lab07_check needs at least 2 ranks (run it with --nproc 2, or labs/check.sh 07)");
    at::NoGradGuard no_grad;  // forward only

    // The whole input and the reference, on one process: x_full · Wᵀ is what
    // all-gather-then-matmul computes.
    at::Tensor x_full = seeded(1, {kBatch, n * kChunk, kDim}), w = seeded(2, {kOut, kDim});
    at::Tensor ref = at::matmul(x_full, w.t());
    at::Tensor x_shard = x_full.narrow(1, r * kChunk, kChunk).contiguous();

    auto& log = dist::CommLog::instance();
    log.clear();
    lab07::matmul_spans().clear();
    at::Tensor y = lab07::all_gather_matmul(x_shard, w, group);
    const auto records = log.records();
    const auto spans = lab07::matmul_spans();

    // 1. The result.
    const double d_y = global_max(rel_diff(y, ref));
    report(d_y <= kTol, "the ring's output equals all-gather then matmul",
           std::isinf(d_y) ? std::string("wrong shape") : fmt("max |dy| / max |y| = %.3g (tolerance %.0e)", d_y, kTol));

    // 2. What crossed the network: n−1 chunks sent and received, nothing else.
    const int64_t chunk_bytes = kBatch * kChunk * kDim * static_cast<int64_t>(sizeof(float));
    int64_t sends = 0, recvs = 0, wrong_size = 0, collectives = 0;
    for (const auto& rec : records) {
      if (rec.op == dist::CommOp::Send || rec.op == dist::CommOp::Recv) {
        (rec.op == dist::CommOp::Send ? sends : recvs) += 1;
        wrong_size += rec.payload_bytes != chunk_bytes;
      } else {
        ++collectives;
      }
    }
    const bool traffic_ok = sends == n - 1 && recvs == n - 1 && wrong_size == 0 && collectives == 0;
    report(global_max(traffic_ok ? 0 : 1) == 0, "n-1 chunks sent and received around the ring, no collective",
           fmt("rank 0: %.0f sends, %.0f receives", double(sends), double(recvs)) +
               fmt(" (want %.0f each, of %.0f bytes), %.0f collective(s)", double(n - 1), double(chunk_bytes),
                   double(collectives)));

    // 3. Overlap: n chunk products, and each of the first n−1 ran while a
    //    send was in flight (issued before it started, waited after it ended).
    int64_t overlapped = 0;
    bool chunked = spans.size() == static_cast<size_t>(n);
    for (size_t k = 0; k < spans.size(); ++k) {
      chunked = chunked && spans[k].rows == kChunk;
      for (const auto& rec : records)
        if (rec.op == dist::CommOp::Send && rec.start_us <= spans[k].start_us && rec.end_us >= spans[k].end_us) {
          ++overlapped;
          break;
        }
    }
    const bool overlap_ok = chunked && overlapped >= n - 1;
    report(global_max(overlap_ok ? 0 : 1) == 0, "every transfer runs under a chunk's matmul",
           fmt("rank 0: %.0f chunk_matmul calls of %.0f rows", double(spans.size()),
               spans.empty() ? 0.0 : double(spans[0].rows)) +
               fmt(" (want %.0f of %.0f), %.0f ran while a send was in flight", double(n), double(kChunk),
                   double(overlapped)) +
               fmt(" (want %.0f)", double(n - 1)));

    return lab::finish();
  });
}
