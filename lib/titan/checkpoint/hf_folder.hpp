#pragma once
/// @file
/// @brief A Llama 3 as a Hugging Face model folder (what
/// LlamaForCausalLM.from_pretrained reads and save_pretrained writes):
/// config.json plus model.safetensors, or numbered shards and
/// model.safetensors.index.json once the weights exceed the shard size.

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>

#include "titan/checkpoint/hf_config.hpp"
#include "titan/checkpoint/safetensors.hpp"
#include "titan/checkpoint/tensor_stream.hpp"
#include "titan/models/llama3/state_dict_adapter.hpp"
#include "titan/models/llama3/model_args.hpp"

namespace titan::checkpoint {

using models::llama3::StateDict;

/// Hugging Face's default shard size (save_pretrained's max_shard_size="5GB").
inline constexpr int64_t kHfDefaultShardBytes = 5'000'000'000;
/// The weights of a folder that fits in one file.
inline constexpr const char* kHfSingleFile = "model.safetensors";
/// Which shard holds each tensor, in a folder of several.
inline constexpr const char* kHfIndexFile = "model.safetensors.index.json";

/// @brief Writes `titan_state` (torchtitan names, checked against `args`) as
/// an HF folder: tensors converted with to_hf_state and cast to `dtype`
/// (float32, bfloat16 or float16), in model order, each file with
/// __metadata__ {"format": "pt"} (what transformers expects of PyTorch
/// weights). One model.safetensors when the total fits in max_shard_bytes,
/// else model-0000k-of-0000n.safetensors, each filled up to the limit (a
/// tensor larger than it gets a shard of its own), plus the index
/// {"metadata": {"total_size": bytes}, "weight_map": {name: file}}.
/// config.json is written last, so a folder that has one is complete; the
/// other layout's stale index or single file is removed. Creates `folder`.
/// One process's save_hf_shards, every tensor a whole box.
void write_hf_folder(const std::string& folder, const StateDict& titan_state,
                     const models::llama3::ModelArgs& args, at::ScalarType dtype,
                     int64_t max_shard_bytes = kHfDefaultShardBytes);

/// @brief write_hf_folder with each tensor read from `titan_state` when the
/// writer reaches it and dropped after: one tensor (and its cast copy) in
/// memory at a time, so a 405B checkpoint (checkpoint_stream) converts on
/// a machine that holds its largest tensor, not the model. The names and
/// shapes are checked against `args` before anything is written.
void write_hf_folder(const std::string& folder, const TensorStream& titan_state,
                     const models::llama3::ModelArgs& args, at::ScalarType dtype,
                     int64_t max_shard_bytes = kHfDefaultShardBytes);

/// @brief A Llama 3 read back from an HF folder.
struct HfCheckpoint {
  StateDict titan_state;           ///< torchtitan names and layout, the files' dtype, CPU
  models::llama3::ModelArgs args;  ///< from config.json (see parse_hf_config)
  bool tied_embeddings = false;    ///< config.json ties lm_head to the embedding (args too: no output.weight)
};

/// @brief Reads an HF Llama folder (single file or sharded through the
/// index). Tied embeddings stay tied: the state has tok_embeddings.weight
/// and no output.weight (an lm_head.weight in the files is dropped, as
/// transformers ties over it). A missing folder, config.json, shard or tensor, an
/// unexpected tensor or a config titan cannot represent is a one-line
/// titan::Error naming it.
HfCheckpoint read_hf_folder(const std::string& folder);

/// @brief An HF Llama folder opened for reading one tensor at a time.
struct HfFolderStream {
  /// torchtitan names and layout (q/k rows back in interleaved RoPE pairs
  /// when read), the files' dtypes; tied embeddings stay tied as in
  /// read_hf_folder.
  TensorStream tensors;
  models::llama3::ModelArgs args;  ///< from config.json (see parse_hf_config)
  bool tied_embeddings = false;    ///< config.json ties lm_head to the embedding
};

/// @brief Opens an HF Llama folder (single file or sharded through the
/// index): config.json and every file's header are read and every tensor's
/// name and shape checked against the config (the errors of
/// read_hf_folder); the values are read when asked for.
HfFolderStream open_hf_folder(const std::string& folder);

/// @brief config.json of the HF folder `folder`, parsed (parse_hf_config);
/// a missing folder or file is a one-line titan::Error naming it.
HfLlamaConfig read_hf_folder_config(const std::string& folder);

/// @brief Which file of the HF folder `folder` holds each tensor (HF name →
/// path): model.safetensors.index.json's weight_map, or else every tensor of
/// model.safetensors (its header only is read). A folder with neither, a bad
/// index or a listed shard that is missing is a one-line titan::Error.
std::map<std::string, std::string> hf_weight_files(const std::string& folder);

/// @brief Where one tensor of an HF folder lies.
struct HfTensorPlace {
  std::string path;        ///< the safetensors file
  SafetensorsEntry entry;  ///< its place in that file
};

/// @brief Every tensor of the HF folder `folder` (HF name → place), each
/// file's header read once: hf_weight_files with the headers checked. A
/// tensor the index lists but its file lacks is a one-line titan::Error.
std::map<std::string, HfTensorPlace> hf_tensor_places(const std::string& folder);

/// @brief True when `folder` has a config.json (how `titan convert` tells an
/// HF folder from a titan checkpoint).
bool is_hf_folder(const std::string& folder);

}  // namespace titan::checkpoint
