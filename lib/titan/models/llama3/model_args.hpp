#pragma once
/// @file
/// @brief Llama 3 hyper-parameters and the named flavors (debugmodel, 1B, 3B,
/// 8B, 70B, 405B) with torchtitan's / Meta's dimensions.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "titan/ops/rope.hpp"

namespace titan::config {
struct ModelSection;
}

namespace titan::models::llama3 {

/// @brief Everything that fixes the shape of a Llama 3 model.
struct ModelArgs {
  int64_t dim = 4096;                       ///< model (residual stream) width
  int64_t n_layers = 32;                    ///< transformer blocks
  int64_t n_heads = 32;                     ///< query heads
  std::optional<int64_t> n_kv_heads;        ///< key/value heads (GQA); unset = n_heads
  int64_t vocab_size = 128256;              ///< Llama 3's tiktoken vocabulary
  int64_t multiple_of = 256;                ///< FFN hidden size is rounded up to this
  std::optional<double> ffn_dim_multiplier; ///< scales the FFN hidden size
  double norm_eps = 1e-5;                   ///< RMSNorm epsilon
  double rope_theta = 500000.0;             ///< RoPE base
  ops::RopeScaling rope_scaling;            ///< Llama 3.1 long-context scaling
  int64_t max_seq_len = 2048;               ///< rows of the RoPE table; the trainer sets it to seq_len
  /// torchtitan's depth_init: true scales wo/w2/w3's init std by the block's
  /// depth (0.02/√(2(layer_id+1))), false by the total depth (0.02/√(2·n_layers)).
  bool depth_init = true;
  /// The output projection multiplies by tok_embeddings.weight (HF's and
  /// torchtitan's tie_word_embeddings; Meta's Llama 3.2 1B and 3B): one
  /// [vocab, dim] parameter, named tok_embeddings.weight, no output.weight.
  bool tie_word_embeddings = false;
  /// How attention is computed (torchtitan's model-args name attn_type):
  /// "sdpa" (ATen's dispatch), "flash" (titan's CPU flash kernel) or
  /// "math" (explicit softmax). Not part of the checkpoint metadata: it
  /// changes kernels, not the model.
  std::string attn_type = "sdpa";
  /// The attention mask (torchtitan 0.3's attn_mask_type): "causal" over
  /// the whole window, or "block_causal": causal within each document of a
  /// packed window (forward() then needs the batch's doc_start), with RoPE
  /// positions restarting per document. Not part of the checkpoint either.
  std::string attn_mask_type = "causal";
  /// titan's [model] fused_kernels: RMSNorm, SwiGLU and RoPE as one kernel
  /// each (ops/fused/fused_ops.hpp) and the loss as the chunked
  /// cross-entropy (ops/chunked_cross_entropy.hpp); false = op by op, as
  /// eager PyTorch computes them. Kernels only: not in the checkpoint.
  bool fused_kernels = true;

  /// Number of key/value heads (n_kv_heads, or n_heads when unset).
  int64_t kv_heads() const { return n_kv_heads.value_or(n_heads); }
  /// Per-head width, dim / n_heads.
  int64_t head_dim() const { return dim / n_heads; }
  /// SwiGLU hidden width as Meta's reference code computes it (see ffn_hidden_dim()).
  int64_t ffn_hidden_dim() const;
  /// Throws titan::Error naming the first inconsistent field (dim not divisible
  /// by n_heads, n_heads not divisible by n_kv_heads, odd head_dim, ...).
  void validate() const;
};

/// @brief The SwiGLU hidden width: h = 4·dim; h = ⌊2h/3⌋ (SwiGLU has three
/// matrices instead of two, so 2/3 keeps the parameter count of a 4·dim MLP);
/// h = ⌊multiplier·h⌋ when a multiplier is set; round h up to multiple_of.
/// 8B: 16384 → 10922 → 14198 → 14336.
int64_t ffn_hidden_dim(int64_t dim, int64_t multiple_of, std::optional<double> ffn_dim_multiplier);

/// @brief The args as one JSON object (field names as in ModelArgs, n_kv_heads
/// and ffn_dim_multiplier null when unset, rope_scaling nested), for
/// checkpoint metadata and the Python reference.
std::string to_json(const ModelArgs& args);

/// @brief Sets `a`'s FFN recipe (multiple_of, ffn_dim_multiplier) so that
/// ffn_hidden_dim() is `width`: a flavor's recipe of the same dim when one
/// lands on it (a real model's args then read like its flavor's), else a
/// recipe made for it. False when no recipe reaches it (the caller names
/// its key in the error).
bool set_ffn_hidden_dim(ModelArgs& a, int64_t width);

/// The flavor names flavor_args() accepts, in size order.
const std::vector<std::string>& flavor_names();

/// @brief The ModelArgs of a named flavor; throws a one-line titan::Error that
/// lists the valid names for an unknown one.
ModelArgs flavor_args(const std::string& flavor);

/// @brief flavor_args(flavor) with `n_layers` transformer blocks when it is
/// positive ([model] n_layers); a negative count is a one-line titan::Error.
ModelArgs flavor_args(const std::string& flavor, int64_t n_layers);

/// @brief titan's [model] shape overrides: each positive field replaces the
/// flavor's (0 keeps it). They make a model of any width or depth from a
/// named flavor's other choices (vocabulary, FFN rounding, RoPE), e.g. the
/// debug model widened to dim 1024 for a benchmark.
struct ShapeOverrides {
  int64_t n_layers = 0;    ///< transformer blocks
  int64_t dim = 0;         ///< model width
  int64_t n_heads = 0;     ///< query heads
  int64_t n_kv_heads = 0;  ///< key/value heads
  int64_t ffn_hidden_size = 0;  ///< SwiGLU's hidden width (set_ffn_hidden_dim)
  int64_t vocab_size = 0;       ///< vocabulary (embedding and output rows)
};

/// @brief flavor_args(flavor) with the positive fields of `overrides`; a
/// negative one is a one-line titan::Error naming its [model] key, and the
/// result is validated (dim divisible by n_heads, ...).
ModelArgs flavor_args(const std::string& flavor, const ShapeOverrides& overrides);

/// @brief The model a job's [model] section names: its flavor with its
/// n_layers / dim / n_heads / n_kv_heads / ffn_hidden_size / vocab_size
/// overrides.
ModelArgs flavor_args(const config::ModelSection& model);

}  // namespace titan::models::llama3
