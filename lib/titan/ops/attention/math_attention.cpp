#include "titan/ops/attention/math_attention.hpp"

#include <cmath>
#include <limits>

#include "titan/ops/attention/document_mask.hpp"
#include "titan/util/error.hpp"

namespace titan::ops {

at::Tensor math_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                          std::optional<double> scale, const at::Tensor& doc_start) {
  TITAN_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "math_attention: q, k, v must be 4-d");
  TITAN_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "math_attention: ", q.size(1),
              " query heads are not a multiple of ", k.size(1), " kv heads");
  const int64_t rep = q.size(1) / k.size(1);
  const at::Tensor kr = rep == 1 ? k : k.repeat_interleave(rep, 1);
  const at::Tensor vr = rep == 1 ? v : v.repeat_interleave(rep, 1);
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(3))));
  at::Tensor scores = at::matmul(q, kr.transpose(-2, -1)).mul(s);
  if (doc_start.defined()) {
    const at::Tensor d = checked_document_starts(doc_start, causal, q.size(0), q.size(2), "math_attention");
    scores = scores.masked_fill(block_causal_mask(d.to(q.device())).logical_not(),
                                -std::numeric_limits<double>::infinity());
  } else if (causal) {
    const int64_t sq = q.size(2), sk = k.size(2);
    const at::Tensor above = at::ones({sq, sk}, q.options().dtype(at::kBool)).triu(1);
    scores = scores.masked_fill(above, -std::numeric_limits<double>::infinity());
  }
  const at::Tensor p = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
  return at::matmul(p, vr);
}

}  // namespace titan::ops
