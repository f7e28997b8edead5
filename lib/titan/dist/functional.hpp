#pragma once
/// @file
/// @brief Functional, autograd-aware collectives: each returns a new tensor
/// and has the backward that makes gradients right across ranks.
///
/// | forward          | backward                         |
/// | ---------------- | -------------------------------- |
/// | all_reduce(sum)  | all_reduce(sum) of the gradient  |
/// | all_gather(dim)  | reduce_scatter(sum, dim)         |
/// | reduce_scatter   | all_gather                       |
/// | all_to_all(a, b) | all_to_all(b, a)                 |
/// | broadcast(root)  | reduce(sum) onto root            |
/// | send(dst)        | recv the gradient from dst       |
/// | recv(src)        | send the gradient to src         |
///
/// The backward rules assume each rank's output feeds that rank's own loss
/// and the job's loss is the sum over ranks (what the chapters do).

#include <ATen/core/Tensor.h>

#include "titan/dist/process_group.hpp"

namespace titan::dist::functional {

/// Sum (or average) of `x` over the group; Max/Min are not differentiable
/// and are rejected.
at::Tensor all_reduce(const at::Tensor& x, const ProcessGroup& group, ReduceOp op = ReduceOp::Sum);
/// Concatenation of every member's `x` along `dim`.
at::Tensor all_gather(const at::Tensor& x, const ProcessGroup& group, int64_t dim = 0);
/// This member's chunk along `dim` of the sum (or average) over members.
at::Tensor reduce_scatter(const at::Tensor& x, const ProcessGroup& group, int64_t dim = 0,
                          ReduceOp op = ReduceOp::Sum);
/// Chunk j of `x` along `split_dim` goes to member j; arrivals are
/// concatenated along `concat_dim`.
at::Tensor all_to_all(const at::Tensor& x, const ProcessGroup& group, int64_t split_dim,
                      int64_t concat_dim);
/// `x` of group rank `root`, on every member.
at::Tensor broadcast(const at::Tensor& x, const ProcessGroup& group, int root = 0);
/// Sends `x` to group rank `dst`. Returns a 0-d token: backpropagating
/// through the token receives x's gradient from `dst`.
at::Tensor send(const at::Tensor& x, const ProcessGroup& group, int dst, int tag = 0);
/// Receives a tensor shaped and typed like `like` from group rank `src`. When
/// `like` requires grad, backward sends the gradient back to `src`.
at::Tensor recv(const at::Tensor& like, const ProcessGroup& group, int src, int tag = 0);

}  // namespace titan::dist::functional
