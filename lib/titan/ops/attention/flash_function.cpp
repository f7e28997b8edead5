#include "titan/ops/attention/flash_function.hpp"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

namespace titan::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// doc_start travels wrapped: as a plain at::Tensor argument autograd would
// treat it as an input (and reject it when undefined); it needs no gradient.
struct DocumentStarts {
  at::Tensor starts;
};

struct FlashAttentionFunction : torch::autograd::Function<FlashAttentionFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            bool causal, std::optional<double> scale, FlashOptions opts, DocumentStarts doc) {
    RECORD_FUNCTION("titan::flash_attention", std::vector<c10::IValue>());  // an op in profiler traces
    FlashForward f = flash_attention_forward(q, k, v, causal, scale, opts, doc.starts);
    ctx->save_for_backward({q, k, v, f.out, f.lse});
    ctx->saved_data["doc_start"] = doc.starts;
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["scale"] = scale ? c10::IValue(*scale) : c10::IValue();  // None: 1/√D (any given value kept, ≤ 0 too)
    ctx->saved_data["q_tile"] = opts.q_tile;
    ctx->saved_data["kv_tile"] = opts.kv_tile;
    ctx->saved_data["gemm"] = static_cast<int64_t>(opts.gemm);
    return f.out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const c10::IValue& saved_scale = ctx->saved_data["scale"];
    const std::optional<double> scale =
        saved_scale.isNone() ? std::nullopt : std::optional<double>(saved_scale.toDouble());
    FlashOptions opts;
    opts.q_tile = ctx->saved_data["q_tile"].toInt();
    opts.kv_tile = ctx->saved_data["kv_tile"].toInt();
    opts.gemm = static_cast<TileGemm>(ctx->saved_data["gemm"].toInt());
    FlashGrads g = flash_attention_backward(grads[0], s[0], s[1], s[2], s[3], s[4],
                                            ctx->saved_data["causal"].toBool(),
                                            scale, opts,
                                            ctx->saved_data["doc_start"].toTensor());
    return {g.dq, g.dk, g.dv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                           std::optional<double> scale, const FlashOptions& opts, const at::Tensor& doc_start) {
  return FlashAttentionFunction::apply(q, k, v, causal, scale, opts, DocumentStarts{doc_start});
}

}  // namespace titan::ops
