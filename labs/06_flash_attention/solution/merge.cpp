// Lab 06 — the reference solution.
#include "merge.hpp"

#include <limits>

namespace lab06 {

Partial merge(const Partial& a, const Partial& b) {
  // lse = m + log(exp(lse_a − m) + exp(lse_b − m)) with m the larger: no
  // exp of a large number. A row masked in both parts has m = −inf; use 0
  // there so that the differences stay −inf (exp → 0) instead of NaN.
  const at::Tensor m = at::maximum(a.lse, b.lse);
  const at::Tensor m_safe = at::where(at::isinf(m), at::zeros_like(m), m);
  const at::Tensor ea = at::exp(a.lse - m_safe), eb = at::exp(b.lse - m_safe);
  const at::Tensor sum = ea + eb;
  Partial r;
  r.lse = m_safe + at::log(sum);  // −inf where both parts are empty
  // Each part's share of the merged normaliser: exp(lse_part − lse).
  const at::Tensor safe_sum = at::where(sum > 0, sum, at::ones_like(sum));
  const at::Tensor wa = (ea / safe_sum).unsqueeze(-1), wb = (eb / safe_sum).unsqueeze(-1);
  r.out = wa * a.out + wb * b.out;
  return r;
}

}  // namespace lab06
