// Lab 04 — reference solution.
#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>

#include "sp_lab.hpp"

namespace lab04 {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;
using titan::dist::ProcessGroup;

// autograd::Function arguments must be tensors or IValues: the group
// travels as its address (the checker owns it; it outlives the graph).
int64_t handle_of(const ProcessGroup& g) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(&g)); }
const ProcessGroup& group_of(int64_t h) { return *reinterpret_cast<const ProcessGroup*>(static_cast<intptr_t>(h)); }

struct GatherSequence : torch::autograd::Function<GatherSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["g"] = group;
    return group_of(group).all_gather(x.contiguous(), /*dim=*/1);
  }
  // Every rank's FFN used every token, so each rank's gradient of the whole
  // sequence is partial: sum over ranks, keep my tokens.
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const ProcessGroup& g = group_of(ctx->saved_data["g"].toInt());
    return {g.reduce_scatter(grads[0].contiguous(), /*dim=*/1, titan::dist::ReduceOp::Sum), at::Tensor()};
  }
};

struct ReduceScatterSequence : torch::autograd::Function<ReduceScatterSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& partial, int64_t group) {
    ctx->saved_data["g"] = group;
    return group_of(group).reduce_scatter(partial.contiguous(), /*dim=*/1, titan::dist::ReduceOp::Sum);
  }
  // out_r = Σ_q partial_q[slice r], so every rank's partial needs the
  // gradient of every slice: gather them.
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const ProcessGroup& g = group_of(ctx->saved_data["g"].toInt());
    return {g.all_gather(grads[0].contiguous(), /*dim=*/1), at::Tensor()};
  }
};

}  // namespace

at::Tensor gather_sequence(const at::Tensor& x_shard, const ProcessGroup& group) {
  return GatherSequence::apply(x_shard, handle_of(group));
}

at::Tensor reduce_scatter_sequence(const at::Tensor& partial, const ProcessGroup& group) {
  return ReduceScatterSequence::apply(partial, handle_of(group));
}

}  // namespace lab04
