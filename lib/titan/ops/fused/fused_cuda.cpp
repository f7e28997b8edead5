// The fused CUDA kernels on tensors; the launchers are in fused_cuda.cu.
#include "titan/ops/fused/fused_cuda.hpp"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <array>
#include <atomic>
#include <cstdint>

#include "titan/ops/cuda_kernels.hpp"
#include "titan/ops/fused/fused_cuda_launch.hpp"
#include "titan/util/error.hpp"
#include "titan/util/internal_assert.hpp"

namespace titan::ops::fused_cuda {
namespace {

namespace fd = fused_detail;

void check_launch(const char* err, const char* op) {
  TITAN_CHECK(err == nullptr, op, " (CUDA): the kernel launch failed: ", err);
}

void* stream_of(const at::Tensor& t) { return at::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

}  // namespace

std::string unavailable(int device) {
  return cuda_kernels_unavailable(device, "fused", [] { return fused_cuda_detail::kernels_unavailable(); });
}

bool takes(const at::Tensor& t) {
  if (!t.defined() || !t.is_cuda() || (t.scalar_type() != at::kFloat && t.scalar_type() != at::kBFloat16))
    return false;
  // A GPU this binary has no kernels for runs ATen's ops (cuda_kernels.hpp).
  // Asked per op: the answer per device is kept in an atomic, so only the
  // first op on a device takes the cache's lock.
  constexpr int kDevices = 64;
  static std::array<std::atomic<int8_t>, kDevices> runs{};  // 0 not asked, 1 runs, -1 does not
  const int device = t.device().index();
  if (device < 0 || device >= kDevices) return unavailable(device).empty();
  int8_t known = runs[static_cast<size_t>(device)].load(std::memory_order_relaxed);
  if (known == 0) {
    known = unavailable(device).empty() ? 1 : -1;
    runs[static_cast<size_t>(device)].store(known, std::memory_order_relaxed);
  }
  return known == 1;
}

at::Tensor swiglu_forward(const at::Tensor& a_in, const at::Tensor& b_in) {
  TITAN_INTERNAL_ASSERT(takes(a_in) && b_in.scalar_type() == a_in.scalar_type() && a_in.sizes() == b_in.sizes() &&
                            b_in.device() == a_in.device(),
                        "swiglu (CUDA): a ", a_in.sizes(), " and b ", b_in.sizes());
  const c10::cuda::CUDAGuard guard(a_in.device());
  const at::Tensor a = a_in.contiguous(), b = b_in.contiguous();
  at::Tensor out = at::empty_like(a);
  fd::SwigluForward p;
  p.a = a.data_ptr(), p.b = b.data_ptr(), p.out = out.data_ptr(), p.n = a.numel();
  p.bf16 = a.scalar_type() == at::kBFloat16;
  if (p.n > 0) check_launch(fused_cuda_detail::swiglu_forward(p, stream_of(a)), "swiglu");
  return out;
}

std::pair<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& dout_in, const at::Tensor& a,
                                                  const at::Tensor& b) {
  const c10::cuda::CUDAGuard guard(a.device());
  const at::Tensor dout = dout_in.to(a.scalar_type()).contiguous();
  TITAN_INTERNAL_ASSERT(a.is_contiguous() && b.is_contiguous() && dout.sizes() == a.sizes(),
                        "swiglu backward (CUDA): dout ", dout.sizes(), " for a ", a.sizes());
  at::Tensor da = at::empty_like(a), db = at::empty_like(b);
  fd::SwigluBackward p;
  p.dout = dout.data_ptr(), p.a = a.data_ptr(), p.b = b.data_ptr(), p.da = da.data_ptr(), p.db = db.data_ptr();
  p.n = a.numel(), p.bf16 = a.scalar_type() == at::kBFloat16;
  if (p.n > 0) check_launch(fused_cuda_detail::swiglu_backward(p, stream_of(a)), "swiglu backward");
  return {da, db};
}

at::Tensor rope(const at::Tensor& x_in, const at::Tensor& cos_in, const at::Tensor& sin_in, bool inverse) {
  TITAN_INTERNAL_ASSERT(takes(x_in) && x_in.dim() == 4 && x_in.size(3) % 2 == 0, "fused rope (CUDA): x ",
                        x_in.sizes());
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous();
  const at::Tensor cos = cos_in.to(x.device(), at::kFloat).contiguous();
  const at::Tensor sin = sin_in.to(x.device(), at::kFloat).contiguous();
  at::Tensor out = at::empty_like(x);
  fd::Rope p;
  p.x = x.data_ptr(), p.out = out.data_ptr(), p.cos = cos.data_ptr<float>(), p.sin = sin.data_ptr<float>();
  p.batch = x.size(0), p.seq = x.size(1), p.heads = x.size(2), p.half = x.size(3) / 2;
  p.per_sequence = cos.dim() == 3, p.inverse = inverse, p.bf16 = x.scalar_type() == at::kBFloat16;
  if (x.numel() > 0) check_launch(fused_cuda_detail::rope(p, stream_of(x)), "fused rope");
  return out;
}

std::pair<at::Tensor, at::Tensor> cross_entropy_forward(const at::Tensor& logits_in, const at::Tensor& labels_in) {
  TITAN_INTERNAL_ASSERT(takes(logits_in) && logits_in.dim() == 2 && labels_in.dim() == 1 &&
                            labels_in.size(0) == logits_in.size(0),
                        "cross_entropy (CUDA): logits ", logits_in.sizes(), " labels ", labels_in.sizes());
  const c10::cuda::CUDAGuard guard(logits_in.device());
  const at::Tensor logits = logits_in.contiguous();
  const at::Tensor labels = labels_in.to(logits.device(), at::kLong).contiguous();
  const auto f32 = logits.options().dtype(at::kFloat);
  at::Tensor loss = at::empty({logits.size(0)}, f32), lse = at::empty({logits.size(0)}, f32);
  fd::CrossEntropyForward p;
  p.logits = logits.data_ptr(), p.labels = labels.data_ptr<int64_t>(), p.lse = lse.data_ptr<float>();
  p.loss = loss.data_ptr<float>(), p.rows = logits.size(0), p.vocab = logits.size(1);
  p.bf16 = logits.scalar_type() == at::kBFloat16;
  if (p.rows > 0) check_launch(fused_cuda_detail::cross_entropy_forward(p, stream_of(logits)), "cross_entropy");
  return {loss, lse};
}

at::Tensor cross_entropy_backward(const at::Tensor& logits_in, const at::Tensor& labels_in, const at::Tensor& lse,
                                  const at::Tensor& scale_in) {
  const c10::cuda::CUDAGuard guard(logits_in.device());
  const at::Tensor logits = logits_in.contiguous();
  const at::Tensor labels = labels_in.to(logits.device(), at::kLong).contiguous();
  const at::Tensor scale = scale_in.to(logits.device(), at::kFloat).reshape({1}).contiguous();
  at::Tensor dlogits = at::empty_like(logits);
  fd::CrossEntropyBackward p;
  p.logits = logits.data_ptr(), p.labels = labels.data_ptr<int64_t>(), p.lse = lse.data_ptr<float>();
  p.scale = scale.data_ptr<float>(), p.dlogits = dlogits.data_ptr();
  p.rows = logits.size(0), p.vocab = logits.size(1), p.bf16 = logits.scalar_type() == at::kBFloat16;
  if (logits.numel() > 0)
    check_launch(fused_cuda_detail::cross_entropy_backward(p, stream_of(logits)), "cross_entropy backward");
  return dlogits;
}

}  // namespace titan::ops::fused_cuda
