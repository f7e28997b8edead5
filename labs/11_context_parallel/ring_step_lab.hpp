#pragma once
/// @file
/// @brief Lab 11: one step of ring attention and its log-sum-exp merge.
///
/// Context parallelism cuts the sequence between the ranks of a cp group;
/// here contiguously: rank r holds positions [r·c, (r+1)·c). Each rank
/// keeps its queries q_r; the keys/values travel round the ring:
///
///     step t = 0 .. n−1 on rank r, holding K/V of rank j = (r − t) mod n:
///       start: send K/V to rank r+1, receive the next from rank r−1
///       causal mask by chunks: j < r  all keys visible  (block, causal=false)
///                              j == r its own chunk     (block, causal=true)
///                              j > r  all masked        (skip: no compute)
///       merge the block's (out, lse) into the running (out, lse)
///       wait for the transfers; the received K/V are the ones for step t+1
///
/// The merge is exact: over key sets A and B, with L = log Σ exp(scores),
///     L = log(e^{L_A} + e^{L_B}),   O = e^{L_A − L} O_A + e^{L_B − L} O_B.
/// lib/titan/parallel/context_parallel/ring_attention.cpp is the library's
/// version (load-balanced head-tail split, backward, both rotate methods).

#include <ATen/ATen.h>

#include <vector>

#include "titan/dist/comm_log.hpp"
#include "titan/dist/process_group.hpp"
#include "titan/ops/attention/lse_attention.hpp"

namespace lab11 {

/// @brief A (partial) attention result: out fp32 [B, H, S, D] and its
/// log-sum-exp fp32 [B, H, S] (−inf for a row that has seen no key yet).
struct Partial {
  at::Tensor out, lse;
};

/// @brief When one block_attention ran (CommLog clock, microseconds).
struct BlockSpan {
  double start_us = 0, end_us = 0;
};

/// @brief Every block_attention since the checker last cleared it.
inline std::vector<BlockSpan>& block_spans() {
  static std::vector<BlockSpan> spans;
  return spans;
}

/// @brief Given: softmax(q kᵀ/√D [causal]) v over these keys only, with
/// its log-sum-exp (the CPU flash kernel). Use it for every block: it
/// records when it ran, so the checker can see the transfers overlap it.
inline Partial block_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal) {
  auto& log = titan::dist::CommLog::instance();
  const double t0 = log.now_us();
  titan::ops::FlashForward f = titan::ops::attention_forward_lse(q, k, v, causal);
  block_spans().push_back({t0, log.now_us()});
  return {f.out.to(at::kFloat).contiguous(), f.lse};
}

/// @brief TODO(lab): fold `b` into `acc` (both over disjoint key sets of
/// the same queries) so that acc becomes the attention over the union.
/// acc.lse may be −inf (no key yet); b.lse is finite.
void merge(Partial& acc, const Partial& b);

/// @brief TODO(lab): ring step `t` on this rank. `k`/`v` [B, H, c, D]
/// (contiguous) are the keys/values in hand, of rank (r − t) mod n; on
/// return they are the ones for step t + 1 (unchanged after the last
/// step). `q` [B, H, c, D] are this rank's queries, `acc` the running
/// result. Post the transfer before computing (send_async / recv_async).
void ring_step(int t, const at::Tensor& q, at::Tensor& k, at::Tensor& v, Partial& acc,
               const titan::dist::ProcessGroup& group);

}  // namespace lab11
