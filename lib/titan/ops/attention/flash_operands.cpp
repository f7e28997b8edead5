#include "titan/ops/attention/flash_operands.hpp"

#include "titan/util/error.hpp"

namespace titan::ops::flash_detail {

Strides strides_of(const at::Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }

FlashForward forward_operands(ForwardArgs& a, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  at::Tensor out = at::empty({a.p.batch, a.p.sq, a.p.hq, a.p.d}, q.options()).transpose(1, 2);
  at::Tensor lse = at::empty({a.p.batch, a.p.hq, a.p.sq}, q.options().dtype(at::kFloat));
  a.q = q.data_ptr(), a.k = k.data_ptr(), a.v = v.data_ptr();
  a.qs = strides_of(q), a.ks = strides_of(k), a.vs = strides_of(v);
  a.out = out.data_ptr(), a.os = strides_of(out);
  a.lse = lse.data_ptr<float>();
  return {out, lse};
}

BackwardBuffers backward_operands(BackwardArgs& a, const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                  const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                  const char* who) {
  TITAN_CHECK(dout.sizes() == q.sizes() && out.sizes() == q.sizes(), who, ": dout ", dout.sizes(), " / out ",
              out.sizes(), " must be shaped like q ", q.sizes());
  TITAN_CHECK(lse.scalar_type() == at::kFloat && lse.sizes() == at::IntArrayRef({a.p.batch, a.p.hq, a.p.sq}), who,
              ": lse must be fp32 [batch, heads, seq]");
  BackwardBuffers buf;
  // D_i = rowsum(dO_i ∘ O_i) = rowsum(P_i ∘ dP_i): the softmax Jacobian's
  // correction term, computed once instead of per tile (FlashAttention-2).
  buf.delta = (dout.to(at::kFloat) * out.to(at::kFloat)).sum(-1).contiguous();
  buf.lse = lse.contiguous();
  // dq accumulates across kv tiles in fp32, laid out like q.
  buf.dq = at::zeros_like(q, q.options().dtype(at::kFloat));
  buf.dk = at::empty_like(k), buf.dv = at::empty_like(v);
  a.q = q.data_ptr(), a.k = k.data_ptr(), a.v = v.data_ptr(), a.dout = dout.data_ptr();
  a.qs = strides_of(q), a.ks = strides_of(k), a.vs = strides_of(v), a.dos = strides_of(dout);
  a.lse = buf.lse.data_ptr<float>(), a.delta = buf.delta.data_ptr<float>();
  a.dq = buf.dq.data_ptr<float>(), a.dqs = strides_of(buf.dq);
  a.dk = buf.dk.data_ptr(), a.dks = strides_of(buf.dk), a.dv = buf.dv.data_ptr(), a.dvs = strides_of(buf.dv);
  return buf;
}

}  // namespace titan::ops::flash_detail
