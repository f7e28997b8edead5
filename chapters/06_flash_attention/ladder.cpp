#include "ladder.hpp"

#include <cmath>
#include <limits>

namespace ch06 {
namespace {

// Scores of queries [i0, i0 + rows) against keys [j0, j0 + cols), scaled,
// with the causal mask applied (key position > query position: -inf).
at::Tensor scores(const at::Tensor& q, const at::Tensor& k, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                  bool causal) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(1)));
  at::Tensor s = q.narrow(0, i0, rows).mm(k.narrow(0, j0, cols).t()) * scale;
  if (causal) {
    const at::Tensor qi = at::arange(i0, i0 + rows, at::kLong).unsqueeze(1);
    const at::Tensor kj = at::arange(j0, j0 + cols, at::kLong).unsqueeze(0);
    s.masked_fill_(kj > qi, -std::numeric_limits<float>::infinity());
  }
  return s;
}

}  // namespace

at::Tensor attention_as_written(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal) {
  const int64_t n = q.size(0);
  const at::Tensor s = scores(q, k, 0, n, 0, k.size(0), causal);  // [seq, seq]
  return at::softmax(s, 1).mm(v);                                  // P, [seq, seq], then P V
}

at::Tensor attention_by_rows(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal) {
  const int64_t n = q.size(0);
  at::Tensor out = at::empty_like(q);
  for (int64_t i = 0; i < n; ++i) {
    // Row i of S: one query against every key it may see.
    const int64_t visible = causal ? i + 1 : k.size(0);
    const at::Tensor s = scores(q, k, i, 1, 0, visible, causal);
    out.narrow(0, i, 1).copy_(at::softmax(s, 1).mm(v.narrow(0, 0, visible)));
  }
  return out;
}

at::Tensor attention_tiled_online(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                                  int64_t q_tile, int64_t k_tile, at::Tensor* lse) {
  const int64_t n = q.size(0), nk = k.size(0), d = q.size(1);
  at::Tensor out = at::empty_like(q);
  if (lse) *lse = at::empty({n}, q.options());
  for (int64_t i0 = 0; i0 < n; i0 += q_tile) {
    const int64_t rows = std::min(q_tile, n - i0);
    at::Tensor m = at::full({rows, 1}, -std::numeric_limits<float>::infinity(), q.options());  // running max
    at::Tensor l = at::zeros({rows, 1}, q.options());                                          // Σ exp(s − m)
    at::Tensor acc = at::zeros({rows, d}, q.options());                                        // Σ exp(s − m) v
    for (int64_t j0 = 0; j0 < nk; j0 += k_tile) {
      if (causal && j0 > i0 + rows - 1) break;  // this tile and all after it are above the diagonal
      const int64_t cols = std::min(k_tile, nk - j0);
      const at::Tensor s = scores(q, k, i0, rows, j0, cols, causal);
      // A larger maximum rescales what was summed so far by exp(m − m').
      const at::Tensor m_new = at::maximum(m, std::get<0>(s.max(1, /*keepdim=*/true)));
      const at::Tensor rescale = at::exp(m - m_new);
      const at::Tensor p = at::exp(s - m_new);
      l = rescale * l + p.sum(1, /*keepdim=*/true);
      acc = rescale * acc + p.mm(v.narrow(0, j0, cols));
      m = m_new;
    }
    out.narrow(0, i0, rows).copy_(acc / l);
    if (lse) lse->narrow(0, i0, rows).copy_((m + at::log(l)).squeeze(1));
  }
  return out;
}

}  // namespace ch06
