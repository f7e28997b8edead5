// Lab 03 — your code. Fill in the TODO(lab) holes; see README.md.
#include "tp_ffn.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>

#include "titan/util/error.hpp"

namespace lab03 {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;
using titan::dist::ProcessGroup;

// autograd::Function arguments must be tensors or IValues: the group
// travels as its address (it outlives the graph, the checker owns it).
int64_t handle_of(const ProcessGroup& g) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(&g)); }
[[maybe_unused]] const ProcessGroup& group_of(int64_t h) { return *reinterpret_cast<const ProcessGroup*>(static_cast<intptr_t>(h)); }

// Sum over the group into a fresh tensor (the input stays untouched:
// autograd may have saved it).
[[maybe_unused]] at::Tensor summed(const at::Tensor& t, const ProcessGroup& g) {
  at::Tensor out = t.contiguous().clone();
  g.all_reduce(out, titan::dist::ReduceOp::Sum);
  return out;
}

// f: every rank uses the whole x, but each rank's gradient of x only covers
// its own hidden units; the true dL/dx is their sum.
struct CopyToTp : torch::autograd::Function<CopyToTp> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["g"] = group;
    return x.view_as(x);  // a new tensor (not x itself) so autograd can attach this node
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    // TODO(lab): each rank's grads[0] only holds the part of dL/dx that
    // flows through its own hidden units. Return their sum over the group
    // (summed(...) with group_of(ctx->saved_data["g"].toInt())).
    (void)ctx;
    return {grads[0], at::Tensor()};
  }
};

// g: y = Σ_r partial_r, so dL/dpartial_r = dL/dy, which every rank already
// holds whole (the loss is computed on every rank from the same y).
struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& partial, int64_t group) {
    // TODO(lab): every rank holds one partial sum of y; return the whole y
    // (the sum over the group, see summed()).
    (void)group;
    return partial.clone();
  }
  static tensor_list backward(AutogradContext*, tensor_list grads) { return {grads[0], at::Tensor()}; }
};

}  // namespace

FfnShard shard_ffn(const at::Tensor& w1, const at::Tensor& w3, const at::Tensor& w2, const ProcessGroup& group) {
  const int64_t n = group.size(), r = group.rank(), hidden = w1.size(0);
  TITAN_CHECK(hidden % n == 0, "lab03: hidden ", hidden, " does not divide by ", n, " ranks");
  const int64_t rows = hidden / n;
  auto leaf = [](const at::Tensor& t) { return t.detach().contiguous().clone().requires_grad_(true); };
  // TODO(lab): rank r owns hidden units [r·rows, (r+1)·rows): return those
  // rows of w1 and w3 (dim 0) and the same columns of w2 (dim 1), each
  // through leaf(...). As given, every rank keeps the whole weights.
  (void)r, (void)rows;
  return {leaf(w1), leaf(w3), leaf(w2)};
}

at::Tensor copy_to_tp(const at::Tensor& x, const ProcessGroup& group) { return CopyToTp::apply(x, handle_of(group)); }

at::Tensor reduce_from_tp(const at::Tensor& partial, const ProcessGroup& group) {
  return ReduceFromTp::apply(partial, handle_of(group));
}

at::Tensor ffn_forward(const at::Tensor& x, const FfnShard& w, const ProcessGroup& group) {
  // TODO(lab): this is the FFN of ONE process. Put f (copy_to_tp) where
  // the replicated x enters the column-parallel matmuls and g
  // (reduce_from_tp) where the row-parallel matmul's partial sums leave.
  (void)group;
  at::Tensor h = at::silu(at::matmul(x, w.w1.t())) * at::matmul(x, w.w3.t());
  return at::matmul(h, w.w2.t());
}

}  // namespace lab03
