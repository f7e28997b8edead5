#include "titan/ops/chunked_cross_entropy.hpp"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <vector>

#include <algorithm>

#include "titan/util/error.hpp"
#ifdef TITAN_HAS_CUDA
#include "titan/ops/fused/fused_cuda.hpp"
#endif

namespace titan::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kChunkBytes = int64_t{256} << 20;

struct ChunkedCrossEntropyFunction : torch::autograd::Function<ChunkedCrossEntropyFunction> {
  // logits [rows, vocab], labels [rows] int64.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& labels, bool sum,
                            int64_t chunk_rows) {
    const int64_t rows = logits.size(0);
    const at::Tensor counted = labels.ne(kIgnoreIndex);
    const at::Tensor count = counted.sum().to(at::kFloat);
    ctx->saved_data["sum"] = sum;
    ctx->saved_data["chunk_rows"] = chunk_rows;
#ifdef TITAN_HAS_CUDA
    // On a GPU one kernel reads each row once (no chunks, no fp32 copy).
    if (fused_cuda::takes(logits)) {
      auto [row_loss, lse] = fused_cuda::cross_entropy_forward(logits, labels);
      ctx->save_for_backward({logits, labels, counted, lse, count});
      ctx->saved_data["cuda_kernel"] = true;
      const at::Tensor total = row_loss.sum();
      return sum ? total : total / count;
    }
#endif
    ctx->saved_data["cuda_kernel"] = false;
    // ATen's own log_softmax per chunk: row by row the same bits as
    // cross_entropy's, so the gradients equal the one-piece loss's exactly
    // (only the loss's sum runs in another order). Backward recomputes it.
    const at::Tensor safe_labels = labels.masked_fill(counted.logical_not(), 0).unsqueeze(1);
    at::Tensor total = at::zeros({}, logits.options().dtype(at::kFloat));
    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
      const int64_t n = std::min(chunk_rows, rows - r0);
      const at::Tensor logp = at::_log_softmax(logits.narrow(0, r0, n).to(at::kFloat), 1, false);
      const at::Tensor picked = logp.gather(1, safe_labels.narrow(0, r0, n)).squeeze(1);
      total.sub_(at::where(counted.narrow(0, r0, n), picked, 0.0).sum());
    }
    ctx->save_for_backward({logits, labels, counted, at::Tensor(), count});
    return sum ? total : total / count;
  }

  // d loss / d logits = (softmax − one_hot(label)) · scale on counted rows.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const at::Tensor &logits = s[0], &labels = s[1], &counted = s[2], &count = s[4];
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const int64_t chunk_rows = ctx->saved_data["chunk_rows"].toInt();
    const at::Tensor g = grads[0].to(at::kFloat);
    // Mean over no counted target: the loss is NaN, and no row gets a gradient.
    const at::Tensor scale = ctx->saved_data["sum"].toBool() ? g : g / count.clamp_min(1.0);
#ifdef TITAN_HAS_CUDA
    if (ctx->saved_data["cuda_kernel"].toBool())
      return {fused_cuda::cross_entropy_backward(logits, labels, /*lse=*/s[3], scale), at::Tensor(), at::Tensor(),
              at::Tensor()};
#endif
    // nll_loss's backward (−scale at each counted label) through
    // log_softmax's, as ATen's cross_entropy computes them.
    const at::Tensor safe_labels = labels.masked_fill(counted.logical_not(), 0).unsqueeze(1);
    const at::Tensor label_grad = counted.to(at::kFloat) * scale.neg();
    at::Tensor dlogits = at::empty_like(logits);
    const int64_t rows = logits.size(0);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
      const int64_t n = std::min(chunk_rows, rows - r0);
      const at::Tensor logp = at::_log_softmax(logits.narrow(0, r0, n).to(at::kFloat), 1, false);
      at::Tensor g = at::zeros_like(logp);
      g.scatter_(1, safe_labels.narrow(0, r0, n), label_grad.narrow(0, r0, n).unsqueeze(1));
      dlogits.narrow(0, r0, n).copy_(at::_log_softmax_backward_data(g, logp, 1, at::kFloat));
    }
    return {dlogits, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor chunked_cross_entropy(const at::Tensor& logits, const at::Tensor& labels, LossReduction reduction,
                                 int64_t chunk_rows) {
  RECORD_FUNCTION("titan::chunked_cross_entropy", std::vector<c10::IValue>());  // an op in profiler traces
  TITAN_CHECK(logits.dim() == 3 && labels.dim() == 2 && logits.size(0) == labels.size(0) &&
                  logits.size(1) == labels.size(1),
              "cross_entropy: logits ", logits.sizes(), " do not match labels ", labels.sizes());
  TITAN_CHECK(labels.scalar_type() == at::kLong, "cross_entropy: labels must be int64, got ", labels.scalar_type());
  const int64_t vocab = std::max<int64_t>(1, logits.size(2));
  if (chunk_rows <= 0) chunk_rows = std::max<int64_t>(1, kChunkBytes / (vocab * 4));
  return ChunkedCrossEntropyFunction::apply(logits.flatten(0, 1), labels.flatten(0, 1),
                                            reduction == LossReduction::Sum, chunk_rows);
}

}  // namespace titan::ops
