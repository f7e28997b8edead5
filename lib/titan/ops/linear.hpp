#pragma once
/// @file
/// @brief Bias-free Linear and Embedding modules that can be built on any
/// device, including the meta device.
///
/// torch::nn::Linear / torch::nn::Embedding always allocate and initialise
/// their weights on the CPU in the constructor, which makes a 405B model
/// impossible to describe without 1.6 TB of memory. These two modules take
/// TensorOptions, leave the weights uninitialised (torch::empty), and let the
/// model's init code fill them, exactly like torchtitan's flow of "build on
/// meta, materialise, init_weights()".

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>

#include "titan/ops/param_module.hpp"

namespace titan::ops {

class EmbeddingImpl;

/// @brief y = x W^T with W of shape [out_features, in_features], no bias
/// (Llama has none). The parameter is named "weight" like nn.Linear's.
class LinearImpl : public ParamModule {
 public:
  /// Registers an uninitialised weight [out_features, in_features] with `options`
  /// (device and dtype; kMeta gives a shape-only weight).
  LinearImpl(int64_t in_features, int64_t out_features, at::TensorOptions options = {});
  /// Applies the projection to the last dimension of `x`.
  at::Tensor forward(const at::Tensor& x);

  /// @brief Weight tying (HF's tie_word_embeddings): from now on the
  /// projection multiplies by `embedding`'s weight [out_features,
  /// in_features]. Its own "weight" parameter is unregistered (so the
  /// model has one parameter, under the embedding's name) and `weight`
  /// is left undefined; each forward reads the embedding's tensor of the
  /// moment, so whatever swaps that one (materialisation, FSDP's gather,
  /// TP's shard) is what the projection uses too. Throws titan::Error on
  /// a shape mismatch.
  void tie_to(std::shared_ptr<EmbeddingImpl> embedding);
  /// True after tie_to().
  bool tied() const { return tied_ != nullptr; }
  /// The weight the forward uses: `weight`, or the tied embedding's.
  const at::Tensor& current_weight() const;
  /// The global output width (the vocabulary for the model's output).
  int64_t out_features() const { return out_features_; }

  at::Tensor weight;  ///< [out_features, in_features]; undefined when tied

 protected:
  /// Re-reads `weight` after replace_parameter() swapped the tensor.
  void rebind_parameters() override {
    if (!tied_) weight = parameters_["weight"];
  }

 private:
  std::shared_ptr<EmbeddingImpl> tied_;
  int64_t out_features_ = 0;
};
TORCH_MODULE(Linear);

/// @brief Token-id lookup table, weight [num_embeddings, embedding_dim],
/// parameter named "weight" like nn.Embedding's.
class EmbeddingImpl : public ParamModule {
 public:
  /// Registers an uninitialised weight [num_embeddings, embedding_dim].
  EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim, at::TensorOptions options = {});
  /// Looks up integer `ids` of any shape; returns ids.shape + [embedding_dim].
  at::Tensor forward(const at::Tensor& ids);

  at::Tensor weight;  ///< [num_embeddings, embedding_dim]

 protected:
  /// Re-reads `weight` after replace_parameter() swapped the tensor.
  void rebind_parameters() override { weight = parameters_["weight"]; }
};
TORCH_MODULE(Embedding);

}  // namespace titan::ops
