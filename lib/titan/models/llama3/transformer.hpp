#pragma once
/// @file
/// @brief The Llama 3 decoder: token embeddings, n_layers TransformerBlocks,
/// final RMSNorm and the output projection to vocabulary logits.

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/moduledict.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <vector>

#include "titan/models/llama3/model_args.hpp"
#include "titan/models/llama3/transformer_block.hpp"
#include "titan/ops/forward_hooks.hpp"
#include "titan/ops/linear.hpp"
#include "titan/ops/rms_norm.hpp"
#include "titan/ops/rope.hpp"

namespace titan::models::llama3 {

/// @brief Llama 3 as torchtitan lays it out: named_parameters() yields exactly
/// torchtitan's state-dict names (tok_embeddings.weight,
/// layers.0.attention.wq.weight, ..., norm.weight, output.weight). With
/// args.tie_word_embeddings the output multiplies by tok_embeddings.weight
/// (ops::LinearImpl::tie_to) and there is no output.weight.
///
/// `layers` is a ModuleDict keyed "0".."n-1" (as torchtitan) so that a
/// pipeline stage can drop the blocks it does not own and keep the names of
/// the rest. Any of tok_embeddings / norm / output may be dropped as well:
/// forward() then takes hidden states instead of tokens, or returns hidden
/// states instead of logits.
///
/// The RoPE cos/sin table is not a registered buffer (LibTorch has no
/// non-persistent buffers, and it is not model state): it is computed from the
/// args on first use per device and cached.
///
/// Build it on the meta device (options.device(at::kMeta)) to count or plan
/// without memory, then to_empty() and init_weights() to materialise.
///
/// It is a HookableModule (as is each block) so that fully_shard can gather
/// the root's parameters around the whole forward.
class TransformerImpl : public ops::HookableModule {
 public:
  /// Builds every module with uninitialised weights on options' device/dtype;
  /// call init_weights() before use. Validates `args` (titan::Error).
  explicit TransformerImpl(ModelArgs args, at::TensorOptions options = {});

  /// tokens [batch, seq] int64 → logits [batch, seq, vocab] (in the weights'
  /// dtype). Without tok_embeddings the input is hidden states [batch, seq,
  /// dim]; without output the result is hidden states. seq ≤ args.max_seq_len.
  ///
  /// `doc_start` ([batch, seq] int64, ops/attention/document_mask.hpp) is
  /// what args.attn_mask_type = "block_causal" attends by: each token only
  /// to earlier tokens of its own document, at RoPE positions counted from
  /// that document's start. Required then (data::Batch::doc_start), unused
  /// with "causal"; a later pipeline stage (hidden states in) gets its
  /// micro-batch's rows of it too. Under context parallelism input and
  /// doc_start are this rank's shards (cp::shard_sequence of the window's)
  /// and doc_start's values stay window positions.
  ///
  /// `seq_len`: on a later pipeline stage, the length of the sequences (of
  /// this rank's shard under context parallelism) its hidden states hold
  /// — under sequence parallelism they hold only seq_len/tp positions, so
  /// the input cannot tell. -1: the input's, or doc_start's when given.
  at::Tensor forward(const at::Tensor& input, const at::Tensor& doc_start = {}, int64_t seq_len = -1);

  /// torchtitan's initialisation, in torchtitan's order (so the draws are
  /// deterministic given the torch seed): tok_embeddings ~ N(0, 1); per block
  /// norms = 1, wq/wk/wv/w1 ~ trunc_normal(0, 0.02), wo/w2/w3 ~
  /// trunc_normal(0, block.weight_init_std); norm = 1; output ~
  /// trunc_normal(0, dim^-0.5) cut at ±3σ. Skips dropped pieces. Tied, the
  /// shared weight gets only the output's init (torchtitan 0.3's order).
  void init_weights();

  /// The blocks still present, in layer order (with their original layer_id).
  std::vector<std::shared_ptr<TransformerBlockImpl>> blocks() const;

  /// Pipeline split: unregisters every block whose layer_id is outside
  /// [begin, end); the kept ones keep their names ("layers.<id>....").
  void keep_layers(int64_t begin, int64_t end);
  /// Pipeline split: unregisters tok_embeddings (a later stage gets hidden states).
  void drop_tok_embeddings();
  /// Pipeline split: unregisters norm and output (an earlier stage returns hidden states).
  void drop_head();

  /// @brief Context parallelism: the model's input is from now on this
  /// rank's shard of each sequence (cp::shard_sequence of the tokens), RoPE
  /// rotates by the positions the shard holds and every attention runs
  /// ring attention over the cp group. Null turns it off.
  void set_context_parallel(std::shared_ptr<const cp::ContextParallel> cp);
  const std::shared_ptr<const cp::ContextParallel>& context_parallel() const { return cp_; }

  /// The arguments the model was built from.
  const ModelArgs& args() const { return args_; }

  ops::Embedding tok_embeddings{nullptr};  ///< [vocab, dim]; null on later pipeline stages
  torch::nn::ModuleDict layers{nullptr};   ///< "0".."n-1" → TransformerBlock
  ops::RMSNorm norm{nullptr};              ///< final norm; null on earlier pipeline stages
  ops::Linear output{nullptr};             ///< [vocab, dim]; null on earlier pipeline stages

 private:
  at::Tensor forward_body(const at::Tensor& input, const at::Tensor& doc_start, int64_t seq_len);
  const ops::RopeTable& rope_table(at::Device device);

  ModelArgs args_;
  ops::RopeTable rope_;  // cached for rope_device_
  std::optional<at::Device> rope_device_;
  std::shared_ptr<const cp::ContextParallel> cp_;
};
TORCH_MODULE(Transformer);

}  // namespace titan::models::llama3
