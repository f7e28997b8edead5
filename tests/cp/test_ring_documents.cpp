// Ring attention with block-causal (document) masking on 2 and 4 ranks
// against single-process attention: both rotate methods, both sequence
// layouts, windows packed with documents that straddle chunk boundaries,
// are shorter than a chunk (down to one token) and longer than several.
//
// Every rank draws the same full q, k, v, upstream gradient and document
// lengths, and computes the reference itself: fp64 math_attention with the
// window's block_causal_mask (the explicit S × S softmax; checked against
// attention run on each document alone in tests/attention's DocumentMask
// tests). The cp side shards q, k, v and doc_start alike (doc_start keeps
// its values: window positions), runs ring attention, backpropagates and
// gathers out / dq / dk / dv back into sequence order.
//
// Tolerance: fp32 against fp64, relative to the reference's largest value.
// Measured (printed; 2 and 4 ranks, every method and layout, GQA):
// out <= 1.5e-7, dq <= 4.9e-7, dk <= 5.6e-7, dv <= 3.1e-7; short
// documents only: <= 4.4e-7. Bound 2e-6 (about 4x the floor); a leak
// across one document boundary is O(0.1).

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "support/dist_test.hpp"
#include "titan/dist/process_group.hpp"
#include "titan/ops/attention/document_mask.hpp"
#include "titan/ops/attention/math_attention.hpp"
#include "titan/parallel/context_parallel/ring_attention.hpp"
#include "titan/parallel/context_parallel/sharding.hpp"
#include "titan/util/error.hpp"

namespace ring_documents_test {

namespace {

using titan::testing::max_abs_diff;
using titan::testing::seeded;
using titan::testing::world;
namespace cp = titan::cp;

constexpr double kTol = 2e-6;

const titan::dist::ProcessGroup& cp_group() { return *world().group(); }

double rel(const at::Tensor& a, const at::Tensor& ref) {
  return max_abs_diff(a, ref) / std::max(1e-30, ref.abs().max().item<double>());
}

at::Tensor gather_seq(const at::Tensor& local, int64_t dim, const cp::SequenceLayout& l) {
  return cp::unshard_sequence(cp_group().all_gather(local.contiguous(), dim), dim, l);
}

// doc_start [rows, s] from document lengths repeated along each row until
// the window is full (the last document cut at the window's end).
at::Tensor starts_from_pattern(const std::vector<std::vector<int64_t>>& patterns, int64_t s) {
  std::vector<int64_t> flat;
  for (const auto& lengths : patterns) {
    int64_t pos = 0;
    for (size_t k = 0; pos < s; ++k) {
      const int64_t len = std::min(lengths[k % lengths.size()], s - pos);
      flat.insert(flat.end(), static_cast<size_t>(len), pos);
      pos += len;
    }
  }
  return at::tensor(flat, at::kLong).view({static_cast<int64_t>(patterns.size()), s});
}

struct Diffs {
  double out = 0, dq = 0, dk = 0, dv = 0;
  double worst() const { return std::max({out, dq, dk, dv}); }
};

// Ring attention of the full q/k/v/doc_start sharded by `l`, against the
// fp64 reference (out_ref and the grads of qr/kr/vr).
Diffs ring_vs_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dout,
                        const at::Tensor& doc_start, const cp::SequenceLayout& l, cp::RotateMethod rotate,
                        const at::Tensor& ring_doc_start) {
  at::Tensor qr = q.to(at::kDouble).requires_grad_(), kr = k.to(at::kDouble).requires_grad_(),
             vr = v.to(at::kDouble).requires_grad_();
  const at::Tensor out_ref = titan::ops::math_attention(qr, kr, vr, /*causal=*/true, std::nullopt, doc_start);
  out_ref.backward(dout.to(at::kDouble));

  const int64_t r = world().rank();
  cp::RingAttentionOptions o;
  o.layout = l, o.rotate = rotate;
  auto piece = [&](const at::Tensor& t) { return cp::shard_sequence(t, 2, l, r).contiguous(); };
  at::Tensor ql = piece(q).requires_grad_(), kl = piece(k).requires_grad_(), vl = piece(v).requires_grad_();
  const at::Tensor local_starts =
      ring_doc_start.defined() ? cp::shard_sequence(ring_doc_start, 1, l, r).contiguous() : at::Tensor();
  const at::Tensor out = cp::ring_attention(ql, kl, vl, cp_group(), o, local_starts);
  out.backward(piece(dout));
  return {rel(gather_seq(out.detach(), 2, l), out_ref.detach()), rel(gather_seq(ql.grad(), 2, l), qr.grad()),
          rel(gather_seq(kl.grad(), 2, l), kr.grad()), rel(gather_seq(vl.grad(), 2, l), vr.grad())};
}

// The windows (48 tokens per rank: chunks of 24 under head-tail, 48
// contiguous). Row 0 mixes one-token documents, short ones and ones that
// straddle chunk boundaries; row 1 opens with a document longer than two
// chunks; row 2 is one document (plain causal).
std::vector<std::vector<int64_t>> patterns(int64_t s) { return {{5, 31, 1, 9, 1, 17}, {s / 2 + 7, 3, 11}, {s}}; }

TEST(RingAttentionDocuments, MatchesSingleProcessBlockCausalAttention) {
  const int64_t n = world().size();
  const int64_t b = 3, hq = 4, hkv = 2, d = 16, s = 48 * n;
  const at::Tensor q = seeded(11, {b, hq, s, d}), k = seeded(12, {b, hkv, s, d}), v = seeded(13, {b, hkv, s, d});
  const at::Tensor dout = seeded(14, {b, hq, s, d});
  const at::Tensor doc_start = starts_from_pattern(patterns(s), s);
  Diffs worst;
  for (auto rotate : {cp::RotateMethod::allgather, cp::RotateMethod::alltoall})
    for (auto balance : {cp::LoadBalance::contiguous, cp::LoadBalance::head_tail}) {
      const cp::SequenceLayout l{n, balance};
      const Diffs e = ring_vs_reference(q, k, v, dout, doc_start, l, rotate, doc_start);
      if (world().rank() == 0)
        std::printf("[measured] cp=%lld %-9s %-10s block_causal fp32: out %.3g  dq %.3g  dk %.3g  dv %.3g\n",
                    static_cast<long long>(n), cp::to_string(rotate).c_str(), cp::to_string(balance).c_str(), e.out,
                    e.dq, e.dk, e.dv);
      EXPECT_LE(e.out, kTol);
      EXPECT_LE(e.dq, kTol);
      EXPECT_LE(e.dk, kTol);
      EXPECT_LE(e.dv, kTol);
    }
  // The mask matters: the same ring without doc_start (plain causal) is
  // far from the block-causal reference.
  const Diffs plain = ring_vs_reference(q, k, v, dout, doc_start, {n, cp::LoadBalance::head_tail},
                                        cp::RotateMethod::alltoall, at::Tensor());
  EXPECT_GT(plain.out, 0.05);
}

// A window of documents shorter than a chunk each: most blocks off the
// diagonal are skipped outright, the rest partly visible.
TEST(RingAttentionDocuments, ShortDocumentsOnly) {
  const int64_t n = world().size();
  const int64_t b = 1, hq = 2, hkv = 1, d = 8, s = 32 * n;
  const at::Tensor q = seeded(21, {b, hq, s, d}), k = seeded(22, {b, hkv, s, d}), v = seeded(23, {b, hkv, s, d});
  const at::Tensor dout = seeded(24, {b, hq, s, d});
  const at::Tensor doc_start = starts_from_pattern({{3, 7, 2, 5}}, s);
  for (auto rotate : {cp::RotateMethod::allgather, cp::RotateMethod::alltoall})
    for (auto balance : {cp::LoadBalance::contiguous, cp::LoadBalance::head_tail}) {
      const Diffs e = ring_vs_reference(q, k, v, dout, doc_start, {n, balance}, rotate, doc_start);
      if (world().rank() == 0)
        std::printf("[measured] cp=%lld %-9s %-10s short documents fp32: worst %.3g\n", static_cast<long long>(n),
                    cp::to_string(rotate).c_str(), cp::to_string(balance).c_str(), e.worst());
      EXPECT_LE(e.worst(), kTol);
    }
}

// cp::document_pairs: one document is the causal count; documents cut
// the triangles, and the shares add up to the window's pairs.
TEST(RingAttentionDocuments, DocumentPairsCountVisibleKeys) {
  const int64_t n = world().size(), s = 16 * n;
  const at::Tensor starts = starts_from_pattern({{5, 1, 12}}, s)[0];
  for (auto balance : {cp::LoadBalance::contiguous, cp::LoadBalance::head_tail}) {
    const cp::SequenceLayout l{n, balance};
    int64_t total = 0;
    for (int64_t r = 0; r < n; ++r) {
      EXPECT_EQ(cp::document_pairs(at::zeros({s}, at::kLong), l, r), cp::causal_pairs(s, l, r));
      total += cp::document_pairs(starts, l, r);
    }
    EXPECT_EQ(total, titan::ops::block_causal_mask(starts.view({1, s})).sum().item<int64_t>());
  }
}

TEST(RingAttentionDocuments, BadStartsAreClearErrors) {
  const int64_t n = world().size(), s = 8 * n;
  const cp::SequenceLayout l{n, cp::LoadBalance::head_tail};
  cp::RingAttentionOptions o;
  o.layout = l;
  const at::Tensor t = at::zeros({1, 1, s / n, 8});
  // Starts that are shard positions instead of window positions would
  // point past the query on some rank; a start after its own token is bad
  // everywhere.
  const at::Tensor ahead = cp::shard_positions(s, l, world().rank()).view({1, -1}) + 1;
  EXPECT_THROW(cp::ring_attention_forward(t, t, t, cp_group(), o, ahead), titan::Error);
  EXPECT_THROW(cp::ring_attention_forward(t, t, t, cp_group(), o, at::zeros({1, s / n}, at::kInt)), titan::Error);
  o.causal = false;
  EXPECT_THROW(cp::ring_attention_forward(t, t, t, cp_group(), o, at::zeros({1, s / n}, at::kLong)), titan::Error);
}

}  // namespace

}  // namespace ring_documents_test
