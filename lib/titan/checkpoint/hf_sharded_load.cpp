#include "titan/checkpoint/hf_sharded_load.hpp"

#include <ATen/ATen.h>

#include <map>
#include <sstream>

#include "titan/checkpoint/dcp.hpp"
#include "titan/checkpoint/hf_folder.hpp"
#include "titan/models/llama3/state_dict_adapter.hpp"
#include "titan/checkpoint/safetensors.hpp"
#include "titan/util/error.hpp"
#include "titan/util/strings.hpp"

namespace titan::checkpoint {

using models::llama3::half_to_interleaved;
using models::llama3::hf_name;

namespace {


// One target box and where its values are.
struct Piece {
  size_t target;
  HfTensorPlace place;  // the tensor's file and its place there
  int64_t heads = 0;    // > 0: a q/k projection stored rotate-half over this many heads
};

// The rows [begin, begin + n) of `entry`, in titan's layout: q/k rows are
// read for whole heads and permuted back to interleaved pairs.
at::Tensor read_rows_in_titan_order(const std::string& path, const SafetensorsEntry& entry, int64_t begin, int64_t n,
                                    int64_t heads) {
  if (heads == 0) return read_safetensors_rows(path, entry, begin, n);
  const int64_t head_dim = entry.shape.at(0) / heads;
  const int64_t h0 = begin / head_dim, h1 = (begin + n + head_dim - 1) / head_dim;
  at::Tensor whole_heads = read_safetensors_rows(path, entry, h0 * head_dim, (h1 - h0) * head_dim);
  return half_to_interleaved(whole_heads, h1 - h0).narrow(0, begin - h0 * head_dim, n);
}

}  // namespace

void load_hf_shards(const std::string& folder, ShardedState& targets, const models::llama3::ModelArgs& args,
                    const dist::ProcessGroup* group) {
  std::vector<Piece> pieces;
  std::string error;
  try {
    const HfLlamaConfig config = read_hf_folder_config(folder);
    const models::llama3::ModelArgs& saved = config.args;
    TITAN_CHECK(saved.n_heads == args.n_heads && saved.kv_heads() == args.kv_heads(), "hf: ", folder,
                " has ", saved.n_heads, " query and ", saved.kv_heads(), " key/value heads, the model ", args.n_heads,
                " and ", args.kv_heads(), " (another flavor?)");
    TITAN_CHECK(config.tie_word_embeddings == args.tie_word_embeddings, "hf: ", folder,
                config.tie_word_embeddings ? " ties lm_head to the embedding, the model does not"
                                           : " has its own lm_head, the model ties its output to the embedding",
                " (tie_word_embeddings; another flavor?)");
    const std::map<std::string, HfTensorPlace> places = hf_tensor_places(folder);
    for (size_t i = 0; i < targets.size(); ++i) {
      const TensorShard& t = targets[i];
      const std::string hf = hf_name(t.fqn);
      auto f = places.find(hf);
      TITAN_CHECK(f != places.end(), "hf: ", folder, " has no tensor ", hf, " (titan's ", t.fqn, ")");
      const HfTensorPlace& place = f->second;
      TITAN_CHECK(place.entry.shape == t.global_shape, "hf: ", place.path, ": ", hf, " has shape ",
                  shape_text(place.entry.shape), ", the model's ", t.fqn, " ", shape_text(t.global_shape),
                  " (another flavor?)");
      if (t.numel() == 0) continue;
      pieces.push_back({i, place, models::llama3::rope_permuted_heads(t.fqn, args)});
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_errors(group, error, "initial load");

  try {
    at::NoGradGuard no_grad;
    for (const Piece& p : pieces) {
      TensorShard& t = targets[p.target];
      // Rows along dim 0, then the box's cut along the others (TP's
      // column-wise wo and w2): whole rows of the box are read.
      at::Tensor src =
          read_rows_in_titan_order(p.place.path, p.place.entry, t.offsets.at(0), t.local.size(0), p.heads);
      for (int64_t d = 1; d < t.local.dim(); ++d) src = src.narrow(d, t.offsets[d], t.local.size(d));
      t.local.copy_(src);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_errors(group, error, "initial load");
}

}  // namespace titan::checkpoint
