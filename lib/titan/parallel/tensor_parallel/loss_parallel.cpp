#include "titan/parallel/tensor_parallel/loss_parallel.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "titan/dist/process_group.hpp"
#include "titan/ops/cross_entropy.hpp"
#include "titan/util/error.hpp"

namespace titan::tp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

using ops::kIgnoreIndex;

struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  // z [N, Vl] fp32, labels [N]; returns the mean (or the sum, `sum`) of
  // the losses of the valid positions.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& z, const at::Tensor& labels, int64_t group,
                            int64_t vocab_offset, bool sum) {
    const auto& g = *reinterpret_cast<const dist::ProcessGroup*>(static_cast<intptr_t>(group));
    const int64_t vl = z.size(1);
    // m: the row max over the whole vocabulary. It only keeps exp() in
    // range and cancels out of the result, so it carries no gradient.
    at::Tensor m = std::get<0>(z.max(1)).contiguous();
    g.all_reduce(m, dist::ReduceOp::Max);
    at::Tensor e = at::exp(z - m.unsqueeze(1));
    at::Tensor sum_exp = e.sum(1).contiguous();
    g.all_reduce(sum_exp);
    const at::Tensor valid = labels != kIgnoreIndex;
    const at::Tensor mine = valid & (labels >= vocab_offset) & (labels < vocab_offset + vl);
    const at::Tensor local_ids = (labels - vocab_offset).masked_fill(~mine, 0);
    at::Tensor target = z.gather(1, local_ids.unsqueeze(1)).squeeze(1).masked_fill(~mine, 0.0).contiguous();
    g.all_reduce(target);
    const at::Tensor count =
        sum ? at::ones({}, z.options()) : valid.sum().clamp_min(1).to(z.scalar_type());
    at::Tensor per_pos = (at::log(sum_exp) + m - target).masked_fill(~valid, 0.0);
    // softmax over the global vocabulary, this rank's columns: the backward
    // is softmax − one-hot, so keep it (the size of the local logits).
    at::Tensor softmax = e.div_(sum_exp.unsqueeze(1));
    ctx->save_for_backward({softmax, local_ids, mine, valid, count});
    return per_pos.sum() / count;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    at::Tensor grad = saved[0].clone();
    const at::Tensor& local_ids = saved[1];
    const at::Tensor& mine = saved[2];
    const at::Tensor& valid = saved[3];
    const at::Tensor& count = saved[4];
    grad.scatter_add_(1, local_ids.unsqueeze(1), -mine.to(grad.scalar_type()).unsqueeze(1));
    grad.mul_(valid.to(grad.scalar_type()).unsqueeze(1));
    grad.mul_(grads[0] / count);
    return {grad, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& local_logits, const at::Tensor& labels,
                                        const dist::ProcessGroup& tp_group, int64_t vocab_offset,
                                        ops::LossReduction reduction) {
  TITAN_CHECK(local_logits.dim() >= 2 && labels.dim() == local_logits.dim() - 1 &&
                  labels.sizes() == local_logits.sizes().slice(0, labels.dim()),
              "vocab_parallel_cross_entropy: logits ", local_logits.sizes(), " do not match labels ", labels.sizes());
  at::Tensor z = local_logits.reshape({-1, local_logits.size(-1)}).to(at::kFloat);
  at::Tensor y = labels.reshape({-1}).to(at::kLong);
  return VocabParallelCrossEntropy::apply(z, y, static_cast<int64_t>(reinterpret_cast<intptr_t>(&tp_group)),
                                          vocab_offset, reduction == ops::LossReduction::Sum);
}

}  // namespace titan::tp
