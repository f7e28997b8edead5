#pragma once
/// @file
/// @brief Llama 3 ModelArgs to and from Hugging Face's config.json for
/// LlamaForCausalLM.
///
/// Written in the layout of Meta's published Llama 3.1 configs (rope_theta and
/// rope_scaling at the top level, torch_dtype), which every transformers
/// version reads; read from that layout or transformers 5's (rope_parameters,
/// dtype). Keys that change the math and titan cannot represent are refused.

#include <ATen/ATen.h>

#include <optional>
#include <string>

#include "titan/models/llama3/model_args.hpp"

namespace titan::checkpoint {

/// @brief What a config.json says about a Llama model.
struct HfLlamaConfig {
  models::llama3::ModelArgs args;       ///< shapes, norm eps, RoPE (max_seq_len = max_position_embeddings)
  bool tie_word_embeddings = false;     ///< lm_head shares model.embed_tokens (no lm_head in the files); = args
  std::optional<at::ScalarType> dtype;  ///< torch_dtype / dtype, when given
};

/// @brief The HF name of a float dtype ("float32", "bfloat16", "float16");
/// titan::Error for any other.
std::string hf_dtype_name(at::ScalarType dtype);

/// @brief Parses "float32" / "bfloat16" / "float16" (also "fp32", "bf16",
/// "fp16"); titan::Error listing the valid names otherwise.
at::ScalarType parse_hf_dtype(const std::string& name);

/// @brief config.json text (indented JSON) for a LlamaForCausalLM with
/// `args` stored in `dtype`: intermediate_size is args.ffn_hidden_dim(),
/// rms_norm_eps args.norm_eps, max_position_embeddings args.max_seq_len,
/// rope_scaling {"rope_type": "llama3", ...} when args.rope_scaling.enabled
/// (null otherwise), tie_word_embeddings = args.tie_word_embeddings, no
/// biases, silu.
std::string hf_config_json(const models::llama3::ModelArgs& args, at::ScalarType dtype);

/// @brief Parses config.json text. A one-line titan::Error names the key when
/// the model is not one titan can hold: another model_type/architecture,
/// attention or MLP biases, an activation other than silu, a head_dim other
/// than hidden_size / num_attention_heads, a RoPE type other than default or
/// llama3, or a missing/mistyped required key. `what` names the file.
///
/// intermediate_size becomes (multiple_of, ffn_dim_multiplier): a flavor's
/// pair when a flavor has the same hidden_size and intermediate_size (so an
/// 8B config gives the 8B args), else a pair that reproduces it exactly.
HfLlamaConfig parse_hf_config(const std::string& json_text, const std::string& what = "config.json");

/// @brief parse_hf_config(json).args (tie_word_embeddings included).
models::llama3::ModelArgs model_args_from_hf_config(const std::string& json_text,
                                                    const std::string& what = "config.json");

}  // namespace titan::checkpoint
