#include "titan/ops/fused/fused_cpu.hpp"

#include <ATen/ATen.h>

#include "titan/ops/cpu_isa.hpp"
#include "titan/ops/fused/fused_cpu_args.hpp"
#include "titan/util/internal_assert.hpp"

namespace titan::ops::fused_cpu {
namespace {

namespace fd = fused_detail;

// Run-time choice among the three compiled copies of a kernel.
#define TITAN_FUSED_DISPATCH(kernel, args)                              \
  switch (best_cpu_isa()) {                                             \
    case CpuIsa::avx512: return fd::AVX512::kernel(args);               \
    case CpuIsa::avx2: return fd::AVX2::kernel(args);                   \
    case CpuIsa::portable: return fd::DEFAULT::kernel(args);            \
  }

void check_same(const at::Tensor& t, const at::Tensor& like, const char* op, const char* name) {
  TITAN_INTERNAL_ASSERT(takes(t) && t.scalar_type() == like.scalar_type(), op, ": ", name, " is ",
                        t.scalar_type(), " on ", t.device(), ", expected ", like.scalar_type(), " on the CPU");
}

bool is_bf16(const at::Tensor& t) { return t.scalar_type() == at::kBFloat16; }

}  // namespace

bool takes(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && (t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16);
}

std::pair<at::Tensor, at::Tensor> rms_norm_forward(const at::Tensor& x_in, const at::Tensor& weight, double eps) {
  check_same(x_in, x_in, "fused rms_norm", "x");
  check_same(weight, x_in, "fused rms_norm", "weight");
  const at::Tensor x = x_in.contiguous(), w = weight.contiguous();
  const int64_t dim = x.size(-1), rows = dim == 0 ? 0 : x.numel() / dim;
  TITAN_INTERNAL_ASSERT(w.numel() == dim, "fused rms_norm: weight ", w.sizes(), " for rows of ", dim);
  at::Tensor y = at::empty_like(x);
  at::Tensor rstd = at::empty({rows}, x.options().dtype(at::kFloat));
  fd::RmsNormForward a;
  a.x = x.data_ptr(), a.w = w.data_ptr(), a.y = y.data_ptr(), a.rstd = rstd.data_ptr<float>();
  a.rows = rows, a.dim = dim, a.eps = static_cast<float>(eps), a.bf16 = is_bf16(x);
  if (rows > 0) [&] { TITAN_FUSED_DISPATCH(rms_norm_forward, a) }();
  return {y, rstd};
}

std::pair<at::Tensor, at::Tensor> rms_norm_backward(const at::Tensor& dy_in, const at::Tensor& x,
                                                    const at::Tensor& weight, const at::Tensor& rstd) {
  const at::Tensor dy = dy_in.to(x.scalar_type()).contiguous(), w = weight.contiguous();
  check_same(x, x, "fused rms_norm backward", "x");
  TITAN_INTERNAL_ASSERT(x.is_contiguous() && dy.sizes() == x.sizes(), "fused rms_norm backward: dy ", dy.sizes(),
                        " for x ", x.sizes());
  const int64_t dim = x.size(-1), rows = dim == 0 ? 0 : x.numel() / dim;
  at::Tensor dx = at::empty_like(x);
  at::Tensor dw = at::zeros({dim}, x.options().dtype(at::kFloat));
  fd::RmsNormBackward a;
  a.dy = dy.data_ptr(), a.x = x.data_ptr(), a.w = w.data_ptr(), a.rstd = rstd.data_ptr<float>();
  a.dx = dx.data_ptr(), a.dw = dw.data_ptr<float>();
  a.rows = rows, a.dim = dim, a.bf16 = is_bf16(x);
  if (rows > 0) [&] { TITAN_FUSED_DISPATCH(rms_norm_backward, a) }();
  return {dx, dw.to(weight.scalar_type())};
}

at::Tensor swiglu_forward(const at::Tensor& a_in, const at::Tensor& b_in) {
  check_same(a_in, a_in, "swiglu", "a");
  check_same(b_in, a_in, "swiglu", "b");
  TITAN_INTERNAL_ASSERT(a_in.sizes() == b_in.sizes(), "swiglu: a ", a_in.sizes(), " and b ", b_in.sizes());
  const at::Tensor a = a_in.contiguous(), b = b_in.contiguous();
  at::Tensor out = at::empty_like(a);
  fd::SwigluForward p;
  p.a = a.data_ptr(), p.b = b.data_ptr(), p.out = out.data_ptr(), p.n = a.numel(), p.bf16 = is_bf16(a);
  if (p.n > 0) [&] { TITAN_FUSED_DISPATCH(swiglu_forward, p) }();
  return out;
}

std::pair<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& dout_in, const at::Tensor& a,
                                                  const at::Tensor& b) {
  const at::Tensor dout = dout_in.to(a.scalar_type()).contiguous();
  TITAN_INTERNAL_ASSERT(a.is_contiguous() && b.is_contiguous() && dout.sizes() == a.sizes(),
                        "swiglu backward: dout ", dout.sizes(), " for a ", a.sizes());
  at::Tensor da = at::empty_like(a), db = at::empty_like(b);
  fd::SwigluBackward p;
  p.dout = dout.data_ptr(), p.a = a.data_ptr(), p.b = b.data_ptr(), p.da = da.data_ptr(), p.db = db.data_ptr();
  p.n = a.numel(), p.bf16 = is_bf16(a);
  if (p.n > 0) [&] { TITAN_FUSED_DISPATCH(swiglu_backward, p) }();
  return {da, db};
}

at::Tensor rope(const at::Tensor& x_in, const at::Tensor& cos_in, const at::Tensor& sin_in, bool inverse) {
  check_same(x_in, x_in, "fused rope", "x");
  TITAN_INTERNAL_ASSERT(x_in.dim() == 4 && x_in.size(3) % 2 == 0, "fused rope: x ", x_in.sizes());
  const at::Tensor x = x_in.contiguous();
  const at::Tensor cos = cos_in.to(at::kFloat).contiguous(), sin = sin_in.to(at::kFloat).contiguous();
  at::Tensor out = at::empty_like(x);
  fd::Rope p;
  p.x = x.data_ptr(), p.out = out.data_ptr(), p.cos = cos.data_ptr<float>(), p.sin = sin.data_ptr<float>();
  p.batch = x.size(0), p.seq = x.size(1), p.heads = x.size(2), p.half = x.size(3) / 2;
  p.per_sequence = cos.dim() == 3, p.inverse = inverse, p.bf16 = is_bf16(x);
  if (x.numel() > 0) [&] { TITAN_FUSED_DISPATCH(rope, p) }();
  return out;
}

double sum_of_squares(const at::Tensor& x_in) {
  check_same(x_in, x_in, "sum_of_squares", "x");
  const at::Tensor x = x_in.contiguous();
  double out = 0.0;
  fd::SumOfSquares p;
  p.x = x.data_ptr(), p.n = x.numel(), p.bf16 = is_bf16(x), p.out = &out;
  if (p.n > 0) [&] { TITAN_FUSED_DISPATCH(sum_of_squares, p) }();
  return out;
}

}  // namespace titan::ops::fused_cpu
