#include "titan/ops/attention/flash_cpu.hpp"

#include <cmath>

#include "titan/ops/attention/document_mask.hpp"
#include "titan/ops/attention/flash_cpu_args.hpp"
#include "titan/ops/attention/flash_operands.hpp"
#include "titan/ops/cpu_isa.hpp"
#ifdef TITAN_HAS_CUDA
#include "titan/ops/attention/flash_cuda.hpp"
#endif
#include "titan/util/error.hpp"

namespace titan::ops {
namespace {

using flash_detail::Problem;
using flash_detail::Strides;

// A [B, H, S, D] operand the kernel can read through raw strides. Only the
// head dim must be contiguous (the kernel's vector loads run along it):
// the model's q, k, v are transposed views of [B, S, H, D], and copying
// them to make all four dims contiguous would cost a pass over each.
at::Tensor usable(const at::Tensor& t, const char* name) {
  TITAN_CHECK(t.dim() == 4, "flash_attention: ", name, " must be [batch, heads, seq, head_dim], got ", t.sizes());
  TITAN_CHECK(t.device().is_cpu(), "flash_attention: ", name, " is on ", t.device(),
              "; the flash backend runs on the CPU, and on CUDA GPUs in CUDA builds");
  TITAN_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16,
              "flash_attention: ", name, " must be float32 or bfloat16, got ", t.scalar_type());
  return t.stride(3) == 1 ? t : t.contiguous();
}

Problem problem(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                std::optional<double> scale, const FlashOptions& opts) {
  TITAN_CHECK(k.sizes() == v.sizes(), "flash_attention: k ", k.sizes(), " and v ", v.sizes(), " differ");
  TITAN_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(),
              "flash_attention: q, k, v must share a dtype");
  TITAN_CHECK(q.size(0) == k.size(0) && q.size(3) == k.size(3),
              "flash_attention: q ", q.sizes(), " and k ", k.sizes(), " differ in batch or head_dim");
  TITAN_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "flash_attention: ", q.size(1),
              " query heads are not a multiple of ", k.size(1), " kv heads");
  TITAN_CHECK(!causal || q.size(2) == k.size(2), "flash_attention: causal needs as many queries as keys, got ",
              q.size(2), " and ", k.size(2));
  TITAN_CHECK(opts.q_tile > 0 && opts.kv_tile > 0, "flash_attention: tile sizes must be positive");
  Problem p;
  p.batch = q.size(0), p.hq = q.size(1), p.hkv = k.size(1), p.sq = q.size(2), p.sk = k.size(2), p.d = q.size(3);
  p.causal = causal;
  p.bf16 = q.scalar_type() == at::kBFloat16;
  p.scale = static_cast<float>(scale.value_or(1.0 / std::sqrt(static_cast<double>(p.d))));
  p.q_tile = opts.q_tile, p.kv_tile = opts.kv_tile, p.gemm = opts.gemm;
  return p;
}

void run_forward(const flash_detail::ForwardArgs& a) {
  switch (best_cpu_isa()) {
    case CpuIsa::avx512: return flash_detail::AVX512::forward(a);
    case CpuIsa::avx2: return flash_detail::AVX2::forward(a);
    case CpuIsa::portable: return flash_detail::DEFAULT::forward(a);
  }
}

void run_backward(const flash_detail::BackwardArgs& a) {
  switch (best_cpu_isa()) {
    case CpuIsa::avx512: return flash_detail::AVX512::backward(a);
    case CpuIsa::avx2: return flash_detail::AVX2::backward(a);
    case CpuIsa::portable: return flash_detail::DEFAULT::backward(a);
  }
}

// The row bounds as the kernel reads them: a window's doc_start (checked as
// document starts) or a block's key_begin (checked as key bounds).
enum class Bounds { doc_start, key_begin };

at::Tensor checked_bounds(const at::Tensor& t, Bounds kind, const Problem& p, const char* who) {
  return kind == Bounds::doc_start ? checked_document_starts(t, p.causal, p.batch, p.sq, who)
                                   : checked_key_begin(t, p.causal, p.batch, p.sq, p.sk, who);
}

FlashForward forward(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in, bool causal,
                     std::optional<double> scale, const FlashOptions& opts, const at::Tensor& bounds_in,
                     Bounds kind) {
  const at::Tensor q = usable(q_in, "q"), k = usable(k_in, "k"), v = usable(v_in, "v");
  flash_detail::ForwardArgs a;
  a.p = problem(q, k, v, causal, scale, opts);
  const at::Tensor bounds = checked_bounds(bounds_in, kind, a.p, "flash_attention");
  if (bounds.defined()) a.p.doc_start = bounds.data_ptr<int64_t>();
  FlashForward f = flash_detail::forward_operands(a, q, k, v);
  if (a.p.sq > 0 && a.p.sk > 0) run_forward(a);
  return f;
}

FlashGrads backward(const at::Tensor& dout_in, const at::Tensor& q_in, const at::Tensor& k_in,
                    const at::Tensor& v_in, const at::Tensor& out, const at::Tensor& lse, bool causal,
                    std::optional<double> scale, const FlashOptions& opts, const at::Tensor& bounds_in,
                    Bounds kind) {
  const at::Tensor q = usable(q_in, "q"), k = usable(k_in, "k"), v = usable(v_in, "v");
  const at::Tensor dout = usable(dout_in.scalar_type() == q.scalar_type() ? dout_in : dout_in.to(q.scalar_type()),
                                 "dout");
  flash_detail::BackwardArgs a;
  a.p = problem(q, k, v, causal, scale, opts);
  const at::Tensor bounds = checked_bounds(bounds_in, kind, a.p, "flash_attention_backward");
  if (bounds.defined()) a.p.doc_start = bounds.data_ptr<int64_t>();
  const flash_detail::BackwardBuffers buf =
      flash_detail::backward_operands(a, dout, q, k, v, out, lse, "flash_attention_backward");
  if (a.p.sq > 0 && a.p.sk > 0) {
    run_backward(a);
  } else {
    buf.dk.zero_(), buf.dv.zero_();  // the kernel did not run to write them
  }
  // dq was summed over the kv tiles in fp32 (flash_operands.cpp); rounded
  // once, here, to the inputs' dtype.
  return {buf.dq.to(q.scalar_type()), buf.dk, buf.dv};
}

}  // namespace

FlashForward flash_attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                                     std::optional<double> scale, const FlashOptions& opts,
                                     const at::Tensor& doc_start) {
#ifdef TITAN_HAS_CUDA
  if (q.is_cuda()) return flash_attention_forward_cuda(q, k, v, causal, scale, doc_start);
#endif
  return forward(q, k, v, causal, scale, opts, doc_start, Bounds::doc_start);
}

FlashGrads flash_attention_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, bool causal,
                                    std::optional<double> scale, const FlashOptions& opts,
                                    const at::Tensor& doc_start) {
#ifdef TITAN_HAS_CUDA
  if (q.is_cuda()) return flash_attention_backward_cuda(dout, q, k, v, out, lse, causal, scale, doc_start);
#endif
  return backward(dout, q, k, v, out, lse, causal, scale, opts, doc_start, Bounds::doc_start);
}

FlashForward flash_block_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                                 std::optional<double> scale, const at::Tensor& key_begin, const FlashOptions& opts) {
#ifdef TITAN_HAS_CUDA
  if (q.is_cuda()) return flash_attention_forward_cuda(q, k, v, causal, scale, {}, key_begin);
#endif
  return forward(q, k, v, causal, scale, opts, key_begin, Bounds::key_begin);
}

FlashGrads flash_block_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& out, const at::Tensor& lse, bool causal,
                                std::optional<double> scale, const at::Tensor& key_begin, const FlashOptions& opts) {
#ifdef TITAN_HAS_CUDA
  if (q.is_cuda()) return flash_attention_backward_cuda(dout, q, k, v, out, lse, causal, scale, {}, key_begin);
#endif
  return backward(dout, q, k, v, out, lse, causal, scale, opts, key_begin, Bounds::key_begin);
}

}  // namespace titan::ops
