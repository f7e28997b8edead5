#include "titan/ops/attention/lse_attention.hpp"

#include <cmath>
#include <limits>

#include "titan/ops/attention/document_mask.hpp"
#include "titan/util/error.hpp"
#ifdef TITAN_HAS_CUDA
#include "titan/ops/attention/flash_cuda.hpp"
#endif

namespace titan::ops {
namespace {

double scale_of(const at::Tensor& q, std::optional<double> scale) {
  return scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(3))));
}

// q [B, Hq, S, D] viewed as [B, Hkv, rep, S, D], so that each kv head
// meets its query-head group by broadcasting (K/V are not repeated).
at::Tensor grouped(const at::Tensor& q, int64_t hkv) {
  return q.view({q.size(0), hkv, q.size(1) / hkv, q.size(2), q.size(3)});
}

// fp32 scores [B, Hkv, rep, S, S_kv] with the causal mask (and the rows'
// key bounds) applied.
at::Tensor scores_of(const at::Tensor& q, const at::Tensor& k, bool causal, double s, const at::Tensor& key_begin) {
  TITAN_CHECK(q.dim() == 4 && k.dim() == 4, "attention with lse: q and k must be [batch, heads, seq, head_dim]");
  TITAN_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "attention with lse: ", q.size(1),
              " query heads are not a multiple of ", k.size(1), " kv heads");
  TITAN_CHECK(!causal || q.size(2) == k.size(2), "attention with lse: causal needs as many queries as keys, got ",
              q.size(2), " and ", k.size(2));
  const at::Tensor qg = grouped(q.to(at::kFloat).contiguous(), k.size(1));
  at::Tensor scores = at::matmul(qg, k.to(at::kFloat).unsqueeze(2).transpose(-2, -1)).mul_(s);
  if (key_begin.defined()) {
    const at::Tensor kb = checked_key_begin(key_begin, causal, q.size(0), q.size(2), k.size(2), "attention with lse");
    // [B, 1, S, S_kv] -> [B, 1, 1, S, S_kv]: one mask for every head.
    const at::Tensor visible = key_range_mask(kb.to(q.device()), k.size(2), causal).unsqueeze(1);
    scores.masked_fill_(visible.logical_not(), -std::numeric_limits<float>::infinity());
  } else if (causal) {
    const at::Tensor above = at::ones({q.size(2), k.size(2)}, q.options().dtype(at::kBool)).triu(1);
    scores.masked_fill_(above, -std::numeric_limits<float>::infinity());
  }
  return scores;
}

// A flash kernel for these operands: the CPU one always; on CUDA the GPU
// one for bf16/fp16 (fp32 blocks keep the fp32 math path's accuracy).
bool flash_kernel_takes(const at::Tensor& q) {
  if (q.device().is_cpu()) return true;
#ifdef TITAN_HAS_CUDA
  return flash_cuda_supports(q);
#else
  return false;
#endif
}

}  // namespace

FlashForward math_attention_forward_lse(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                                        std::optional<double> scale, const at::Tensor& key_begin) {
  const at::Tensor scores = scores_of(q, k, causal, scale_of(q, scale), key_begin);
  const at::Tensor lse = at::logsumexp(scores, -1);
  // A row that sees no key (lse −inf, only with key bounds) gets p = 0,
  // not exp(−inf + inf) = NaN.
  const at::Tensor lse_safe = at::where(at::isinf(lse), at::zeros_like(lse), lse);
  const at::Tensor p = (scores - lse_safe.unsqueeze(-1)).exp_();
  const at::Tensor out = at::matmul(p, v.to(at::kFloat).unsqueeze(2));
  const auto b = q.size(0), h = q.size(1), s = q.size(2);
  return {out.reshape({b, h, s, q.size(3)}).to(q.scalar_type()), lse.reshape({b, h, s})};
}

FlashGrads math_attention_backward_lse(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                       bool causal, std::optional<double> scale, const at::Tensor& key_begin) {
  const double s = scale_of(q, scale);
  const int64_t hkv = k.size(1);
  const at::Tensor scores = scores_of(q, k, causal, s, key_begin);
  // exp(−inf − L) = 0: masked keys get no probability and no gradient (a
  // row that saw no key has L = −inf: taken as 0 so that stays 0, not NaN).
  const at::Tensor l = lse.to(at::kFloat);
  const at::Tensor l_safe = at::where(at::isinf(l), at::zeros_like(l), l);
  const at::Tensor p = (scores - grouped(l_safe.unsqueeze(-1), hkv)).exp_();
  const at::Tensor dog = grouped(dout.to(at::kFloat).contiguous(), hkv);
  const at::Tensor kf = k.to(at::kFloat).unsqueeze(2), vf = v.to(at::kFloat).unsqueeze(2);
  const at::Tensor delta = grouped((dout.to(at::kFloat) * out.to(at::kFloat)).sum(-1, true).contiguous(), hkv);
  const at::Tensor dp = at::matmul(dog, vf.transpose(-2, -1));
  const at::Tensor ds = p * (dp - delta);
  const at::Tensor dq = at::matmul(ds, kf).mul_(s).reshape(q.sizes());
  // Summed over the query heads of each group: the gradient of the shared kv head.
  const at::Tensor dk = at::matmul(ds.transpose(-2, -1), grouped(q.to(at::kFloat).contiguous(), hkv)).mul_(s).sum(2);
  const at::Tensor dv = at::matmul(p.transpose(-2, -1), dog).sum(2);
  return {dq.to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type())};
}

FlashForward attention_forward_lse(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                                   std::optional<double> scale, const at::Tensor& key_begin) {
  if (flash_kernel_takes(q)) return flash_block_forward(q, k, v, causal, scale, key_begin);
  return math_attention_forward_lse(q, k, v, causal, scale, key_begin);
}

FlashGrads attention_backward_lse(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                  const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, bool causal,
                                  std::optional<double> scale, const at::Tensor& key_begin) {
  if (flash_kernel_takes(q)) return flash_block_backward(dout, q, k, v, out, lse, causal, scale, key_begin);
  return math_attention_backward_lse(dout, q, k, v, out, lse, causal, scale, key_begin);
}

void merge_attention_partial(at::Tensor& acc_out, at::Tensor& acc_lse, const at::Tensor& out_b,
                             const at::Tensor& lse_b) {
  TITAN_CHECK(acc_out.scalar_type() == at::kFloat && acc_lse.scalar_type() == at::kFloat,
              "merge_attention_partial: the running out and lse must be fp32");
  TITAN_CHECK(out_b.sizes() == acc_out.sizes() && lse_b.sizes() == acc_lse.sizes(),
              "merge_attention_partial: partial out ", out_b.sizes(), " / lse ", lse_b.sizes(),
              " do not match the running ", acc_out.sizes(), " / ", acc_lse.sizes());
  // L = m + log(e^{L_a − m} + e^{L_b − m}) with m the larger, so neither
  // exponential overflows; m = −inf (no key on either side) is replaced by
  // 0 so the weights come out 0 instead of NaN.
  const at::Tensor m = at::maximum(acc_lse, lse_b);
  const at::Tensor m_safe = at::where(at::isinf(m), at::zeros_like(m), m);
  const at::Tensor wa = (acc_lse - m_safe).exp_(), wb = (lse_b - m_safe).exp_();
  const at::Tensor total = wa + wb;
  const at::Tensor inv = at::where(total > 0, total.reciprocal(), at::zeros_like(total));
  acc_out.mul_((wa * inv).unsqueeze(-1)).add_(out_b.to(at::kFloat) * (wb * inv).unsqueeze(-1));
  acc_lse.copy_(m_safe + total.log());
}

}  // namespace titan::ops
