#pragma once
/// @file
/// @brief Lab 04: sequence parallelism's two layout transitions around a
/// tensor-parallel FFN, written as autograd functions.
///
/// Between blocks each rank holds a slice of the sequence, x_r [b, s/n, d]
/// (layout Shard(1)); norms and residual adds run there on s/n tokens. The
/// column/row-parallel FFN needs the whole sequence in and leaves partial
/// sums out, so two transitions frame it:
///
/// | transition            | forward                | backward                 |
/// | --------------------- | ---------------------- | ------------------------ |
/// | Shard(1) → Replicate  | all-gather on dim 1    | reduce-scatter (sum), 1  |
/// | Partial → Shard(1)    | reduce-scatter (sum), 1| all-gather on dim 1      |
///
///     out_r = x_r + reduce_scatter_sequence( ffn_partial( gather_sequence( norm(x_r) ) ) )
///
/// Together they move the same bytes as TP's one all-reduce (an all-reduce
/// is a reduce-scatter plus an all-gather), but the activations outside
/// the FFN are 1/n the size.

#include <ATen/ATen.h>

#include "titan/dist/process_group.hpp"

namespace lab04 {

/// @brief Shard(1) → Replicate: the whole sequence [b, n·c, d] from every
/// rank's slice [b, c, d] (rank order). Backward: this rank's slice of the
/// sum over ranks of the gradient (a reduce-scatter on dim 1).
at::Tensor gather_sequence(const at::Tensor& x_shard, const titan::dist::ProcessGroup& group);

/// @brief Partial → Shard(1): this rank's slice [b, c, d] of the sum over
/// ranks of `partial` [b, n·c, d] (a reduce-scatter on dim 1). Backward:
/// the whole sequence's gradient, all-gathered on dim 1.
at::Tensor reduce_scatter_sequence(const at::Tensor& partial, const titan::dist::ProcessGroup& group);

/// @brief This rank's pieces of the FFN (given, as lab 03 cuts them).
struct FfnShard {
  at::Tensor w1, w3;  ///< [hidden/n, d]: rows (column parallel)
  at::Tensor w2;      ///< [d, hidden/n]: columns (row parallel)
};

/// @brief Given: a weight-free RMS norm (per token, so it runs on any slice).
inline at::Tensor rms_norm(const at::Tensor& x) { return x * at::rsqrt(x.pow(2).mean(-1, true) + 1e-6); }

/// @brief Given: the column/row-parallel FFN on the whole sequence, without
/// communication: this rank's partial sum of the output.
inline at::Tensor ffn_partial(const at::Tensor& x, const FfnShard& w) {
  return at::matmul(at::silu(at::matmul(x, w.w1.t())) * at::matmul(x, w.w3.t()), w.w2.t());
}

/// @brief Given: the block half under SP, x_r + FFN(norm(x))'s slice r.
inline at::Tensor sp_block(const at::Tensor& x_shard, const FfnShard& w, const titan::dist::ProcessGroup& group) {
  at::Tensor whole = gather_sequence(rms_norm(x_shard), group);             // Shard(1) → Replicate
  return x_shard + reduce_scatter_sequence(ffn_partial(whole, w), group);  // Partial → Shard(1)
}

}  // namespace lab04
