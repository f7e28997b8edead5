#pragma once
// The chapter's ladder, as llm.c's attention_forward.cu climbs it: the same
// attention of one head computed four ways, each from the one before,
// each checked against it. Forward only, q/k/v of shape [seq, head_dim].
//
//   1. as written: S = Q Kᵀ/√d and P = softmax(S) whole (seq² numbers each);
//   2. one query row at a time: S never whole, one row of it at a time;
//   3. tiles of queries and keys with the online softmax (a running max m,
//      normaliser l and output accumulator, rescaled as m grows):
//      FlashAttention-2's loop in plain tensor operations;
//   4. the same loop as titan's CPU kernel (lib/titan/ops/attention/
//      flash_cpu.hpp): vectorised, threaded, tile scratch reused.
#include <ATen/ATen.h>

namespace ch06 {

/// Rung 1: softmax(Q Kᵀ / √d) V as written; key j > query i masked when causal.
at::Tensor attention_as_written(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal);

/// Rung 2: the same, one query row at a time (only one row of S exists).
at::Tensor attention_by_rows(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal);

/// Rung 3: tiles of `q_tile` queries against tiles of `k_tile` keys, the
/// softmax kept online per query row; causal tiles wholly above the
/// diagonal skipped. `lse`, when given, receives L = m + log l per row (what
/// a backward would keep instead of P).
at::Tensor attention_tiled_online(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                                  int64_t q_tile = 64, int64_t k_tile = 256, at::Tensor* lse = nullptr);

}  // namespace ch06
