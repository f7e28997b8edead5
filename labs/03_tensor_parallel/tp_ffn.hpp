#pragma once
/// @file
/// @brief Lab 03: the Llama feed-forward block, w2(silu(w1·x) ∗ w3·x),
/// tensor-parallel by hand: w1 and w3 cut by output rows (column parallel),
/// w2 cut by input columns (row parallel), and Megatron's two conjugate
/// operators around them, written as autograd functions:
///
/// | operator            | forward              | backward             |
/// | ------------------- | -------------------- | -------------------- |
/// | f = copy_to_tp      | identity             | all-reduce (sum)     |
/// | g = reduce_from_tp  | all-reduce (sum)     | identity             |
///
///     y = g( w2_shard · (silu(w1_shard · f(x)) ∗ w3_shard · f(x)) )
///
/// Every rank holds the whole input x and computes the same loss from the
/// whole output y (a replicated loss, not a sum over ranks).

#include <ATen/core/Tensor.h>

#include "titan/dist/process_group.hpp"

namespace lab03 {

/// @brief This rank's pieces of the FFN's weights.
struct FfnShard {
  at::Tensor w1;  ///< [hidden/n, dim]: rows of w1 (column parallel)
  at::Tensor w3;  ///< [hidden/n, dim]: the same rows of w3
  at::Tensor w2;  ///< [dim, hidden/n]: the matching columns of w2 (row parallel)
};

/// @brief Cuts the full weights w1, w3 [hidden, dim] and w2 [dim, hidden]
/// into this rank's shard of `group` (hidden divides by group.size()).
/// The shards are new leaf tensors that require grad.
FfnShard shard_ffn(const at::Tensor& w1, const at::Tensor& w3, const at::Tensor& w2,
                   const titan::dist::ProcessGroup& group);

/// @brief Megatron's f: identity forward; backward all-reduces (sums) the
/// gradient of the input over `group`.
at::Tensor copy_to_tp(const at::Tensor& x, const titan::dist::ProcessGroup& group);

/// @brief Megatron's g: forward all-reduces (sums) the partial outputs over
/// `group`; backward passes the gradient through unchanged.
at::Tensor reduce_from_tp(const at::Tensor& partial, const titan::dist::ProcessGroup& group);

/// @brief The tensor-parallel FFN on the replicated input x [b, s, dim]:
/// the whole output [b, s, dim] on every rank.
at::Tensor ffn_forward(const at::Tensor& x, const FfnShard& w, const titan::dist::ProcessGroup& group);

}  // namespace lab03
