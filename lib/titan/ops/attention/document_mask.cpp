#include "titan/ops/attention/document_mask.hpp"

#include <ATen/ATen.h>

#include "titan/util/error.hpp"

namespace titan::ops {

at::Tensor document_starts(const at::Tensor& tokens, int64_t bos_id) {
  TITAN_CHECK(tokens.dim() == 2, "document_starts: tokens must be [batch, seq], got ", tokens.sizes());
  const int64_t seq = tokens.size(1);
  const at::Tensor pos = at::arange(seq, tokens.options().dtype(at::kLong)).expand_as(tokens);
  // A BOS marks its own position; elsewhere 0; the running maximum carries
  // the last BOS forward (positions only grow).
  const at::Tensor marks = at::where(tokens == bos_id, pos, at::zeros_like(pos));
  return std::get<0>(at::cummax(marks, 1)).contiguous();
}

at::Tensor document_positions(const at::Tensor& doc_start) {
  const at::Tensor pos = at::arange(doc_start.size(-1), doc_start.options());
  return pos - doc_start;
}

at::Tensor block_causal_mask(const at::Tensor& doc_start) {
  const int64_t seq = doc_start.size(1);
  const at::Tensor j = at::arange(seq, doc_start.options()).view({1, 1, 1, seq});
  const at::Tensor i = at::arange(seq, doc_start.options()).view({1, 1, seq, 1});
  const at::Tensor start = doc_start.view({doc_start.size(0), 1, seq, 1});
  return (j <= i) & (j >= start);
}

at::Tensor checked_document_starts(const at::Tensor& doc_start, bool causal, int64_t batch, int64_t seq,
                                   const char* who) {
  if (!doc_start.defined()) return doc_start;
  TITAN_CHECK(causal, who, ": document masking (doc_start) is block-causal; it needs causal = true");
  TITAN_CHECK(doc_start.scalar_type() == at::kLong && doc_start.dim() == 2 && doc_start.size(0) == batch &&
                  doc_start.size(1) == seq,
              who, ": doc_start must be int64 [", batch, ", ", seq, "], got ", doc_start.scalar_type(), " ",
              doc_start.sizes());
  const at::Tensor d = doc_start.to(at::kCPU).contiguous();
  if (seq > 0) {
    const at::Tensor pos = at::arange(seq, d.options());
    const bool in_range = ((d >= 0) & (d <= pos)).all().item<bool>();
    const bool monotone = seq < 2 || (d.narrow(1, 1, seq - 1) >= d.narrow(1, 0, seq - 1)).all().item<bool>();
    TITAN_CHECK(in_range && monotone, who,
                ": doc_start must satisfy 0 <= doc_start[i] <= i and never decrease along a sequence "
                "(contiguous documents; see ops::document_starts)");
  }
  return d;
}

}  // namespace titan::ops
