#pragma once
/// @file
/// @brief The Llama 3 state-dict adapter (torchtitan's
/// Llama3StateDictAdapter): state dicts between torchtitan's names and
/// layout and Hugging Face's LlamaForCausalLM, the name map and the q/k row
/// permutation between the two RoPE layouts. The checkpoint layer reads and
/// writes the files (checkpoint/hf_folder.hpp); what the names and rows
/// mean is the model's, so it lives here.
///
/// titan (like Meta's and torchtitan's checkpoints) rotates channel pairs
/// (2i, 2i+1) of each head; HF's LlamaAttention rotates (i, i + head_dim/2)
/// ("rotate_half"). Both compute the same attention if wq's and wk's output
/// rows are permuted per head, which is all that differs besides the names.

#include <ATen/ATen.h>

#include <map>
#include <string>
#include <vector>

#include "titan/models/llama3/model_args.hpp"

namespace titan::models::llama3 {

/// Tensors by name (torchtitan's or HF's, as the function says).
using StateDict = std::map<std::string, at::Tensor>;

/// @brief The torchtitan names of a Llama 3 with `args`, in model order
/// (tok_embeddings, layer 0..n-1, norm, output) with their shapes; no
/// output.weight when args.tie_word_embeddings (HF then has no lm_head.weight).
std::vector<std::pair<std::string, std::vector<int64_t>>> titan_llama_shapes(
    const ModelArgs& args);

/// @brief The HF name of a torchtitan name ("layers.3.attention.wq.weight" →
/// "model.layers.3.self_attn.q_proj.weight"); titan::Error for a name outside
/// the Llama 3 state dict.
std::string hf_name(const std::string& titan_name);

/// @brief The torchtitan name of an HF LlamaForCausalLM name (inverse of
/// hf_name); titan::Error naming an unknown one.
std::string titan_name(const std::string& hf_name);

/// @brief How many heads the rows of `titan_name` are permuted over between
/// the two RoPE layouts: n_heads for a wq, kv_heads() for a wk, 0 for every
/// tensor stored alike in both.
int64_t rope_permuted_heads(const std::string& titan_name, const ModelArgs& args);

/// @brief Reorders the output rows of a q or k projection [heads·head_dim, in]
/// from titan's interleaved RoPE pairs to HF's rotate-half halves: per head,
/// row 2i → i and row 2i+1 → i + head_dim/2. A pure permutation, so exact.
at::Tensor interleaved_to_half(const at::Tensor& w, int64_t heads);

/// @brief The inverse of interleaved_to_half: per head, row i → 2i and row
/// i + head_dim/2 → 2i+1.
at::Tensor half_to_interleaved(const at::Tensor& w, int64_t heads);

/// @brief Checks that `titan_state` holds exactly the tensors of a Llama 3
/// with `args`, with their shapes; a one-line titan::Error names the first
/// missing, unexpected or mis-shaped tensor (and the shapes). `what` says
/// where the tensors came from, for the message.
void check_titan_state(const StateDict& titan_state, const ModelArgs& args,
                       const std::string& what);

/// @brief torchtitan state dict → HF LlamaForCausalLM state dict (names
/// mapped, wq/wk rows permuted with n_heads/n_kv_heads). Checks the state
/// against `args` first. Tensors keep their dtype and device.
StateDict to_hf_state(const StateDict& titan_state, const ModelArgs& args);

/// @brief HF LlamaForCausalLM state dict → torchtitan state dict: the exact
/// inverse of to_hf_state (a round trip is bitwise equal). Errors name a
/// missing or unknown HF tensor; the result is checked against `args`.
StateDict from_hf_state(const StateDict& hf_state, const ModelArgs& args);

}  // namespace titan::models::llama3
