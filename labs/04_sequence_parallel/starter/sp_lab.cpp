// Lab 04 — your code. Fill in the four TODO(lab) holes; see README.md.
#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>
#include <vector>

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
    // TODO(lab): the whole sequence, every rank's slice in rank order along
    // dim 1 (ProcessGroup::all_gather). As given: n copies of my own slice.
    const int64_t n = group_of(group).size();
    return at::cat(std::vector<at::Tensor>(static_cast<size_t>(n), x), 1);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const ProcessGroup& g = group_of(ctx->saved_data["g"].toInt());
    // TODO(lab): grads[0] is this rank's gradient of the WHOLE sequence,
    // and only part of the truth (its FFN shard's). Return my slice of the
    // sum over ranks (ProcessGroup::reduce_scatter on dim 1, ReduceOp::Sum).
    // As given: my slice of my own gradient.
    const int64_t c = grads[0].size(1) / g.size();
    return {grads[0].narrow(1, g.rank() * c, c).contiguous(), at::Tensor()};
  }
};

struct ReduceScatterSequence : torch::autograd::Function<ReduceScatterSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& partial, int64_t group) {
    ctx->saved_data["g"] = group;
    // TODO(lab): my slice of the sum over ranks of the partial outputs
    // (ProcessGroup::reduce_scatter on dim 1, ReduceOp::Sum). As given: my
    // slice of my own partial sum.
    const ProcessGroup& g = group_of(group);
    const int64_t c = partial.size(1) / g.size();
    return partial.narrow(1, g.rank() * c, c).contiguous();
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const ProcessGroup& g = group_of(ctx->saved_data["g"].toInt());
    // TODO(lab): every rank's partial fed every rank's slice, so it needs
    // the gradient of the whole sequence: all-gather grads[0] on dim 1.
    // As given: my slice's gradient, zeros for the others'.
    const int64_t c = grads[0].size(1);
    std::vector<int64_t> shape = grads[0].sizes().vec();
    shape[1] = c * g.size();
    at::Tensor whole = at::zeros(shape, grads[0].options());
    whole.narrow(1, g.rank() * c, c).copy_(grads[0]);
    return {whole, at::Tensor()};
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
