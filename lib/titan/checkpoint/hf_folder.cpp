#include "titan/checkpoint/hf_folder.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "titan/checkpoint/hf_config.hpp"
#include "titan/checkpoint/hf_sharded_save.hpp"
#include "titan/checkpoint/safetensors.hpp"
#include "titan/checkpoint/tensor_stream.hpp"
#include "titan/util/files.hpp"
#include "titan/util/error.hpp"
#include "titan/models/llama3/state_dict_adapter.hpp"

namespace titan::checkpoint {

using models::llama3::from_hf_state;

namespace {

namespace files = titan::files;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TITAN_CHECK(in.good(), "hf: cannot open ", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

bool is_hf_folder(const std::string& folder) { return files::is_regular_file(folder + "/config.json"); }

void write_hf_folder(const std::string& folder, const StateDict& titan_state,
                     const models::llama3::ModelArgs& args, at::ScalarType dtype, int64_t max_shard_bytes) {
  write_hf_folder(folder, stream_of(titan_state), args, dtype, max_shard_bytes);
}

void write_hf_folder(const std::string& folder, const TensorStream& titan_state,
                     const models::llama3::ModelArgs& args, at::ScalarType dtype, int64_t max_shard_bytes) {
  models::llama3::check_titan_state(titan_state.layout, args, "hf export");
  // Model order, the order of the files' bytes: the writes go front to
  // back, each tensor a whole box of one process.
  std::vector<HfBox> boxes;
  for (const auto& [name, shape] : models::llama3::titan_llama_shapes(args))
    boxes.push_back({name, shape, std::vector<int64_t>(shape.size(), 0), shape, true});
  save_hf_boxes(
      folder, boxes, [&](size_t i) { return titan_state.read(boxes[i].fqn); }, args, dtype, /*group=*/nullptr,
      max_shard_bytes);
}

HfLlamaConfig read_hf_folder_config(const std::string& folder) {
  TITAN_CHECK(files::is_directory(folder), "hf: ", folder, " is not a folder");
  const std::string config_path = folder + "/config.json";
  TITAN_CHECK(files::is_regular_file(config_path), "hf: ", folder, " has no config.json");
  return parse_hf_config(read_text(config_path), config_path);
}

std::map<std::string, std::string> hf_weight_files(const std::string& folder) {
  std::map<std::string, std::string> out;
  const std::string index_path = folder + "/" + kHfIndexFile, single_path = folder + "/" + kHfSingleFile;
  if (!files::is_regular_file(index_path)) {
    TITAN_CHECK(files::is_regular_file(single_path), "hf: ", folder, " has neither ", kHfSingleFile, " nor ",
                kHfIndexFile);
    for (const auto& [name, entry] : read_safetensors_header(single_path).entries) out[name] = single_path;
    return out;
  }
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(read_text(index_path));
  } catch (const nlohmann::json::exception& e) {
    throw Error("hf: " + index_path + ": not valid JSON (" + e.what() + ")");
  }
  TITAN_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(), "hf: ",
              index_path, ": no \"weight_map\" object");
  for (const auto& [name, file] : index["weight_map"].items()) {
    TITAN_CHECK(file.is_string(), "hf: ", index_path, ": weight_map entry '", name, "' is not a file name");
    const std::string path = folder + "/" + file.get<std::string>();
    TITAN_CHECK(files::is_regular_file(path), "hf: shard ", path, " (listed in ", kHfIndexFile, ") is missing");
    out[name] = path;
  }
  return out;
}

std::map<std::string, HfTensorPlace> hf_tensor_places(const std::string& folder) {
  std::map<std::string, HfTensorPlace> places;
  std::map<std::string, SafetensorsHeader> headers;
  for (const auto& [name, path] : hf_weight_files(folder)) {
    auto h = headers.find(path);
    if (h == headers.end()) h = headers.emplace(path, read_safetensors_header(path)).first;
    auto e = h->second.entries.find(name);
    TITAN_CHECK(e != h->second.entries.end(), "hf: tensor '", name, "' is listed in ", kHfIndexFile, " but not in ",
                path);
    places.emplace(name, HfTensorPlace{path, e->second});
  }
  return places;
}

HfFolderStream open_hf_folder(const std::string& folder) {
  const HfLlamaConfig config = read_hf_folder_config(folder);
  std::map<std::string, HfTensorPlace> places = hf_tensor_places(folder);
  // A tied model has one weight, the embedding's; save_pretrained drops the
  // duplicate lm_head, and where a file still has one, transformers ties
  // over it on load: so does titan (args.tie_word_embeddings: no output.weight).
  if (config.tie_word_embeddings) places.erase("lm_head.weight");

  HfFolderStream out;
  out.args = config.args;
  out.tied_embeddings = config.tie_word_embeddings;
  // The names mapped and the shapes checked on meta tensors: nothing is read
  // before the whole folder is known to be this model.
  StateDict hf_layout;
  for (const auto& [name, place] : places)
    hf_layout.emplace(name, at::empty(place.entry.shape,
                                      at::TensorOptions().dtype(place.entry.dtype).device(at::kMeta)));
  try {
    out.tensors.layout = from_hf_state(hf_layout, out.args);
  } catch (const Error& e) {
    throw Error(folder + ": " + e.what());
  }
  out.tensors.read = [places = std::move(places), args = out.args](const std::string& name) {
    const HfTensorPlace& p = places.at(models::llama3::hf_name(name));
    at::Tensor t = read_safetensors_tensor(p.path, p.entry);
    const int64_t heads = models::llama3::rope_permuted_heads(name, args);
    return heads > 0 ? models::llama3::half_to_interleaved(t, heads) : t;
  };
  return out;
}

HfCheckpoint read_hf_folder(const std::string& folder) {
  HfFolderStream hf = open_hf_folder(folder);
  return HfCheckpoint{hf.tensors.read_all(), hf.args, hf.tied_embeddings};
}

}  // namespace titan::checkpoint
