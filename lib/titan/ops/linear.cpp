#include "titan/ops/linear.hpp"

#include "titan/ops/gemm/cpu_matmul.hpp"
#include "titan/util/error.hpp"

namespace titan::ops {

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, at::TensorOptions options) {
  TITAN_CHECK(in_features > 0 && out_features > 0, "Linear: features must be positive, got in=",
              in_features, " out=", out_features);
  weight = register_parameter("weight", at::empty({out_features, in_features}, options));
  out_features_ = out_features;
}

at::Tensor LinearImpl::forward(const at::Tensor& x) {
  return call_with_hooks(x, [this](const at::Tensor& in) { return ops::linear(in, current_weight()); });
}

void LinearImpl::tie_to(std::shared_ptr<EmbeddingImpl> embedding) {
  TITAN_CHECK(embedding && embedding->weight.defined(), "Linear: cannot tie to a missing embedding");
  TITAN_CHECK(!tied_, "Linear: already tied");
  TITAN_CHECK(embedding->weight.sizes() == weight.sizes(), "Linear: cannot tie a ", weight.sizes(),
              " projection to an embedding of ", embedding->weight.sizes());
  parameters_.erase("weight");
  weight = at::Tensor();
  tied_ = std::move(embedding);
}

const at::Tensor& LinearImpl::current_weight() const { return tied_ ? tied_->weight : weight; }

EmbeddingImpl::EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim,
                             at::TensorOptions options) {
  TITAN_CHECK(num_embeddings > 0 && embedding_dim > 0,
              "Embedding: sizes must be positive, got num_embeddings=", num_embeddings,
              " embedding_dim=", embedding_dim);
  weight = register_parameter("weight", at::empty({num_embeddings, embedding_dim}, options));
}

at::Tensor EmbeddingImpl::forward(const at::Tensor& ids) {
  return call_with_hooks(ids, [this](const at::Tensor& in) { return at::embedding(weight, in); });
}

}  // namespace titan::ops
