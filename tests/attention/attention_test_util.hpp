#pragma once
// Shared by the attention tests: random q/k/v, the fp64 math reference with
// its gradients, and the relative difference the tolerances are stated in.

#include <torch/torch.h>

#include <cstdint>

#include "titan/ops/attention/math_attention.hpp"

namespace attn_test {

struct Inputs {
  at::Tensor q, k, v, dout;
};

// q [b, hq, s, d], k/v [b, hkv, s, d], and an upstream gradient, N(0, 1).
inline Inputs make_inputs(int64_t b, int64_t hq, int64_t hkv, int64_t s, int64_t d, uint64_t seed,
                          at::ScalarType dtype = at::kFloat) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto r = [&](int64_t h) { return at::randn({b, h, s, d}, gen, at::kFloat).to(dtype); };
  Inputs in;
  in.q = r(hq), in.k = r(hkv), in.v = r(hkv), in.dout = r(hq);
  return in;
}

struct Result {
  at::Tensor out, dq, dk, dv;
};

// math_attention in fp64 on the inputs' values (upcast), with autograd
// gradients: the independent reference.
inline Result math_reference(const Inputs& in, bool causal) {
  at::Tensor q = in.q.to(at::kDouble).requires_grad_(), k = in.k.to(at::kDouble).requires_grad_(),
             v = in.v.to(at::kDouble).requires_grad_();
  at::Tensor out = titan::ops::math_attention(q, k, v, causal);
  out.backward(in.dout.to(at::kDouble));
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

// max |a − b| / max |b|: the error relative to the reference's scale.
inline double rel_diff(const at::Tensor& a, const at::Tensor& ref) {
  const at::Tensor r = ref.to(at::kDouble);
  const double scale = r.abs().max().item<double>();
  return (a.to(at::kDouble) - r).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

}  // namespace attn_test
