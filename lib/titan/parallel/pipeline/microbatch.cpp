#include "titan/parallel/pipeline/microbatch.hpp"

#include <ATen/ATen.h>

#include "titan/util/error.hpp"

namespace titan::pp {

std::vector<BatchInputs> split_microbatches(const BatchInputs& batch, int m) {
  TITAN_CHECK(m >= 1, "pipeline: ", m, " micro-batches per step; need at least 1");
  TITAN_CHECK(batch.inputs.defined() && batch.inputs.dim() >= 1, "pipeline: a step needs its batch's inputs");
  const int64_t b = batch.inputs.size(0);
  TITAN_CHECK(b % m == 0, "pipeline: a batch of ", b, " sequences does not split into ", m, " micro-batches");
  // One cut for every tensor, so that micro-batch i's labels and document
  // starts are always the rows of its tokens.
  auto cut = [&](const at::Tensor& t, const char* what) {
    std::vector<at::Tensor> parts(static_cast<size_t>(m));
    if (!t.defined()) return parts;
    TITAN_CHECK(t.dim() >= 1 && t.size(0) == b, "pipeline: the batch's ", what, " hold ", t.dim() ? t.size(0) : 0,
                " sequences but its inputs ", b);
    for (int i = 0; i < m; ++i) parts[static_cast<size_t>(i)] = t.narrow(0, i * (b / m), b / m);
    return parts;
  };
  const std::vector<at::Tensor> in = cut(batch.inputs, "inputs"), lab = cut(batch.labels, "labels"),
                                doc = cut(batch.doc_start, "doc_start");
  std::vector<BatchInputs> out(static_cast<size_t>(m));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].inputs = in[i], out[i].labels = lab[i], out[i].doc_start = doc[i];
  }
  return out;
}

}  // namespace titan::pp
