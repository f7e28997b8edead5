// The ATen side of the CUDA flash kernels: checks, output buffers and the
// stream; the kernels themselves are in flash_cuda.cu (no ATen there).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cmath>

#include "titan/ops/attention/document_mask.hpp"
#include "titan/ops/cuda_kernels.hpp"
#include "titan/ops/attention/flash_cuda.hpp"
#include "titan/ops/attention/flash_cuda_launch.hpp"
#include "titan/ops/attention/flash_operands.hpp"
#include "titan/util/error.hpp"
#include "titan/util/strprintf.hpp"

namespace titan::ops {
namespace {

using flash_cuda_detail::Dtype;
using flash_detail::Problem;

// The kernels read rows of D elements 16 bytes at a time: the last dim
// contiguous, every other stride and the start a multiple of 8 elements.
at::Tensor usable(const at::Tensor& t, const at::Tensor& q, const char* name) {
  TITAN_CHECK(t.dim() == 4, "flash_attention (CUDA): ", name, " must be [batch, heads, seq, head_dim], got ",
              t.sizes());
  TITAN_CHECK(t.device() == q.device(), "flash_attention (CUDA): ", name, " is on ", t.device(), ", q on ",
              q.device());
  TITAN_CHECK(t.scalar_type() == q.scalar_type(), "flash_attention (CUDA): q, k, v (and dout) must share a dtype");
  const bool aligned = t.stride(3) == 1 && t.stride(0) % 8 == 0 && t.stride(1) % 8 == 0 && t.stride(2) % 8 == 0 &&
                       reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
  // clone, not contiguous(): a contiguous view at an odd offset stays
  // misaligned under contiguous(), and a misaligned 16-byte load is a
  // sticky CUDA error.
  return aligned ? t : t.clone(at::MemoryFormat::Contiguous);
}

Problem problem(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                std::optional<double> scale) {
  TITAN_CHECK(q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf,
              "flash_attention (CUDA): q must be bfloat16 or float16 (the tensor cores' inputs), got ",
              q.scalar_type(), "; train with [training] mixed_precision_param = \"bfloat16\" under FSDP, "
              "or use attn_type sdpa");
  TITAN_CHECK(k.sizes() == v.sizes(), "flash_attention (CUDA): k ", k.sizes(), " and v ", v.sizes(), " differ");
  TITAN_CHECK(q.size(0) == k.size(0) && q.size(3) == k.size(3), "flash_attention (CUDA): q ", q.sizes(),
              " and k ", k.sizes(), " differ in batch or head_dim");
  TITAN_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "flash_attention (CUDA): ", q.size(1),
              " query heads are not a multiple of ", k.size(1), " kv heads");
  TITAN_CHECK(!causal || q.size(2) == k.size(2), "flash_attention (CUDA): causal needs as many queries as keys, got ",
              q.size(2), " and ", k.size(2));
  TITAN_CHECK(flash_cuda_detail::head_dim_supported(q.size(3)),
              "flash_attention (CUDA): head_dim must be 16, 32, 64 or 128, got ", q.size(3));
  TITAN_CHECK(q.size(0) * q.size(1) <= 65535, "flash_attention (CUDA): batch × heads = ", q.size(0) * q.size(1),
              " exceeds the grid's 65535");
  Problem p;
  p.batch = q.size(0), p.hq = q.size(1), p.hkv = k.size(1), p.sq = q.size(2), p.sk = k.size(2), p.d = q.size(3);
  p.causal = causal;
  p.bf16 = q.scalar_type() == at::kBFloat16;
  p.scale = static_cast<float>(scale.value_or(1.0 / std::sqrt(static_cast<double>(p.d))));
  return p;
}

// The per-row first visible keys the kernels read (Problem::doc_start): a
// window's document starts or a ring block's key bounds, validated on the
// host as their kind requires, used on the device.
at::Tensor device_row_bounds(const at::Tensor& doc_start, const at::Tensor& key_begin, bool causal, const Problem& p,
                             const at::Tensor& q, const char* who) {
  TITAN_CHECK(!doc_start.defined() || !key_begin.defined(), who, ": doc_start and key_begin are exclusive");
  if (doc_start.defined()) {
    checked_document_starts(doc_start, causal, p.batch, p.sq, who);
    return doc_start.to(q.device()).contiguous();
  }
  if (key_begin.defined()) {
    checked_key_begin(key_begin, causal, p.batch, p.sq, p.sk, who);
    return key_begin.to(q.device()).contiguous();
  }
  return {};
}

Dtype dtype_of(const Problem& p) { return p.bf16 ? Dtype::bf16 : Dtype::fp16; }

}  // namespace

std::string flash_cuda_unavailable(int device, int64_t head_dim, bool bf16) {
  if (!flash_cuda_detail::head_dim_supported(head_dim))
    return strprintf("the flash kernel has no head_dim %lld (16, 32, 64 or 128)", static_cast<long long>(head_dim));
  const flash_cuda_detail::Dtype dtype = bf16 ? flash_cuda_detail::Dtype::bf16 : flash_cuda_detail::Dtype::fp16;
  return cuda_kernels_unavailable(device, strprintf("flash d%lld %s", static_cast<long long>(head_dim),
                                                    bf16 ? "bf16" : "fp16"),
                                  [&] { return flash_cuda_detail::kernels_unavailable(device, head_dim, dtype); });
}

bool flash_cuda_supports(const at::Tensor& q) {
  return q.is_cuda() && (q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf) && q.dim() == 4 &&
         flash_cuda_unavailable(q.device().index(), q.size(3), q.scalar_type() == at::kBFloat16).empty();
}

FlashForward flash_attention_forward_cuda(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                          bool causal, std::optional<double> scale, const at::Tensor& doc_start_in,
                                          const at::Tensor& key_begin) {
  const c10::cuda::CUDAGuard guard(q_in.device());
  const at::Tensor q = usable(q_in, q_in, "q"), k = usable(k_in, q_in, "k"), v = usable(v_in, q_in, "v");
  flash_detail::ForwardArgs a;
  a.p = problem(q, k, v, causal, scale);
  const at::Tensor doc_start = device_row_bounds(doc_start_in, key_begin, causal, a.p, q, "flash_attention (CUDA)");
  if (doc_start.defined()) a.p.doc_start = doc_start.data_ptr<int64_t>();
  const FlashForward f = flash_detail::forward_operands(a, q, k, v);
  if (a.p.sq > 0 && a.p.sk > 0 && a.p.batch > 0 && a.p.hq > 0) {  // an empty grid is a launch error
    const char* err = flash_cuda_detail::launch_forward(a, dtype_of(a.p), at::cuda::getCurrentCUDAStream().stream());
    TITAN_CHECK(err == nullptr, "flash_attention (CUDA): forward launch failed: ", err);
  }
  return f;
}

FlashGrads flash_attention_backward_cuda(const at::Tensor& dout_in, const at::Tensor& q_in, const at::Tensor& k_in,
                                         const at::Tensor& v_in, const at::Tensor& out, const at::Tensor& lse_in,
                                         bool causal, std::optional<double> scale, const at::Tensor& doc_start_in,
                                         const at::Tensor& key_begin) {
  const c10::cuda::CUDAGuard guard(q_in.device());
  const at::Tensor q = usable(q_in, q_in, "q"), k = usable(k_in, q_in, "k"), v = usable(v_in, q_in, "v");
  const at::Tensor dout = usable(dout_in.to(q_in.scalar_type()), q_in, "dout");
  flash_detail::BackwardArgs a;
  a.p = problem(q, k, v, causal, scale);
  const at::Tensor doc_start =
      device_row_bounds(doc_start_in, key_begin, causal, a.p, q, "flash_attention_backward (CUDA)");
  if (doc_start.defined()) a.p.doc_start = doc_start.data_ptr<int64_t>();
  TITAN_CHECK(out.device() == q.device() && lse_in.device() == q.device(),
              "flash_attention_backward (CUDA): out (", out.device(), ") and lse (", lse_in.device(),
              ") must be on q's device ", q.device());
  const flash_detail::BackwardBuffers buf =
      flash_detail::backward_operands(a, dout, q, k, v, out, lse_in, "flash_attention_backward (CUDA)");
  if (a.p.sq > 0 && a.p.sk > 0 && a.p.batch > 0 && a.p.hq > 0) {
    const char* err =
        flash_cuda_detail::launch_backward(a, dtype_of(a.p), at::cuda::getCurrentCUDAStream().stream());
    TITAN_CHECK(err == nullptr, "flash_attention_backward (CUDA): launch failed: ", err);
  } else {
    buf.dk.zero_(), buf.dv.zero_();
  }
  return {buf.dq.to(q.scalar_type()), buf.dk, buf.dv};
}

}  // namespace titan::ops
