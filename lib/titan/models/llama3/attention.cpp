#include "titan/models/llama3/attention.hpp"

#include "titan/ops/attention/document_mask.hpp"
#include "titan/models/llama3/init_plan.hpp"
#include "titan/ops/init.hpp"
#include "titan/parallel/context_parallel/context.hpp"
#include "titan/ops/fused/fused_ops.hpp"
#include "titan/ops/rope.hpp"

namespace titan::models::llama3 {

AttentionImpl::AttentionImpl(const ModelArgs& args, at::TensorOptions options)
    : n_heads(args.n_heads),
      n_kv_heads(args.kv_heads()),
      head_dim(args.head_dim()),
      backend(ops::parse_attention_backend(args.attn_type)),
      fused_rope(args.fused_kernels) {
  wq = register_module("wq", ops::Linear(args.dim, n_heads * head_dim, options));
  wk = register_module("wk", ops::Linear(args.dim, n_kv_heads * head_dim, options));
  wv = register_module("wv", ops::Linear(args.dim, n_kv_heads * head_dim, options));
  wo = register_module("wo", ops::Linear(n_heads * head_dim, args.dim, options));
}

at::Tensor repeat_kv(const at::Tensor& x, int64_t n_rep) {
  if (n_rep == 1) return x;
  const int64_t b = x.size(0), s = x.size(1), kv = x.size(2), d = x.size(3);
  return x.unsqueeze(3).expand({b, s, kv, n_rep, d}).reshape({b, s, kv * n_rep, d});
}

at::Tensor AttentionImpl::forward(const at::Tensor& x_in, const at::Tensor& cos_in, const at::Tensor& sin_in,
                                  const at::Tensor& doc_start, const at::Tensor& sdpa_bias) {
  return call_with_hooks(x_in, [&](const at::Tensor& x) { return attend(x, cos_in, sin_in, doc_start, sdpa_bias); });
}

at::Tensor AttentionImpl::attend(const at::Tensor& x, const at::Tensor& cos_in, const at::Tensor& sin_in,
                                 const at::Tensor& doc_start, const at::Tensor& sdpa_bias) {
  const int64_t b = x.size(0), s = x.size(1);
  // Under sequence parallelism the block's input holds seq/tp positions but
  // attention sees the whole (all-gathered) sequence, so the caller passes
  // the table for the longest and each user takes the rows it needs
  // (per-sequence tables, [batch, seq, half], are always whole).
  const int64_t seq_dim = cos_in.dim() - 2;
  const at::Tensor cos = cos_in.size(seq_dim) == s ? cos_in : cos_in.narrow(seq_dim, 0, s);
  const at::Tensor sin = sin_in.size(seq_dim) == s ? sin_in : sin_in.narrow(seq_dim, 0, s);
  // -1 rather than n_heads: under tensor parallelism each rank holds a slice
  // of the heads, and the local projection's width says how many.
  at::Tensor q = wq(x).view({b, s, -1, head_dim});
  at::Tensor k = wk(x).view({b, s, -1, head_dim});
  at::Tensor v = wv(x).view({b, s, -1, head_dim});
  q = fused_rope ? ops::fused_rope(q, cos, sin) : ops::apply_rope(q, cos, sin);
  k = fused_rope ? ops::fused_rope(k, cos, sin) : ops::apply_rope(k, cos, sin);
  // The backends want [batch, heads, seq, head_dim].
  at::Tensor out;
  if (context_parallel) {
    // K/V of the other cp ranks' shards come round the ring; GQA as flash.
    // Block-causal: doc_start is this rank's shard, in window positions.
    out = cp::ring_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), *context_parallel->group,
                             context_parallel->attention, doc_start);
  } else if (backend == ops::AttentionBackend::sdpa) {
    // SDPA gets K/V repeated per query head: its GQA path is not taken by
    // every kernel it may pick.
    const int64_t n_rep = n_heads / n_kv_heads;
    k = repeat_kv(k, n_rep);
    v = repeat_kv(v, n_rep);
    if (doc_start.defined()) {
      // Document masking: the block-causal mask instead of is_causal, as
      // the caller's shared bias when it made one.
      const at::Tensor mask = sdpa_bias.defined() ? sdpa_bias : ops::block_causal_mask(doc_start);
      out = at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask,
                                             /*dropout_p=*/0.0, /*is_causal=*/false);
    } else {
      out = at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true);
    }
  } else {
    // flash and math read kv head h / n_rep for query head h themselves.
    out = ops::attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), backend, /*causal=*/true,
                         std::nullopt, doc_start);
  }
  out = out.transpose(1, 2).contiguous().view({b, s, -1});
  return wo(out);
}

void AttentionImpl::init_weights(double init_std) {
  auto own = named_parameters();
  for (const auto& [name, recipe] : attention_init(init_std)) ops::init_(own[name], recipe);
}

}  // namespace titan::models::llama3
