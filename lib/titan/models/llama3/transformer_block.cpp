#include "titan/models/llama3/transformer_block.hpp"

#include <cmath>

#include "titan/models/llama3/init_plan.hpp"

namespace titan::models::llama3 {

TransformerBlockImpl::TransformerBlockImpl(int64_t layer_id_, const ModelArgs& args,
                                           at::TensorOptions options)
    : layer_id(layer_id_) {
  // Deeper blocks add more residual terms; shrinking the std of the matrices
  // that write into the residual stream (wo, w2, w3) keeps its variance flat.
  weight_init_std = block_weight_init_std(args, layer_id);
  // Registration order fixes named_parameters() order; it follows torchtitan's
  // attribute order (attention, feed_forward, attention_norm, ffn_norm).
  attention = register_module("attention", Attention(args, options));
  feed_forward = register_module("feed_forward", FeedForward(args.dim, args.ffn_hidden_dim(), options, args.fused_kernels));
  attention_norm =
      register_module("attention_norm", ops::RMSNorm(args.dim, args.norm_eps, options, args.fused_kernels));
  ffn_norm = register_module("ffn_norm", ops::RMSNorm(args.dim, args.norm_eps, options, args.fused_kernels));
}

at::Tensor TransformerBlockImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                         const at::Tensor& doc_start, const at::Tensor& sdpa_bias) {
  // By value: activation checkpointing runs this body again in backward.
  return call_with_hooks(x, [this, cos, sin, doc_start, sdpa_bias](const at::Tensor& in) {
    at::Tensor h = in + attention(attention_norm(in), cos, sin, doc_start, sdpa_bias);
    return h + feed_forward(ffn_norm(h));
  });
}

void TransformerBlockImpl::init_weights() {
  attention_norm->reset_parameters();
  ffn_norm->reset_parameters();
  attention->init_weights(weight_init_std);
  feed_forward->init_weights(weight_init_std);
}

}  // namespace titan::models::llama3
