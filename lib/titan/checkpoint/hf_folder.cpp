#include "titan/checkpoint/hf_folder.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "titan/checkpoint/dcp.hpp"
#include "titan/checkpoint/hf_config.hpp"
#include "titan/checkpoint/hf_sharded_save.hpp"
#include "titan/checkpoint/safetensors.hpp"
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
  models::llama3::check_titan_state(titan_state, args, "hf export");
  ShardedState whole;
  for (const auto& [name, t] : titan_state)
    whole.push_back({name, t, t.sizes().vec(), std::vector<int64_t>(static_cast<size_t>(t.dim()), 0)});
  save_hf_shards(folder, whole, args, dtype, /*group=*/nullptr, max_shard_bytes);
}

void write_hf_folder_from_checkpoint(const CheckpointInfo& ckpt, const std::string& folder,
                                     const models::llama3::ModelArgs& args, at::ScalarType dtype,
                                     int64_t max_shard_bytes) {
  const std::map<std::string, SavedTensor> saved = model_tensor_index(ckpt);
  StateDict shapes;  // meta tensors: names and shapes, no data
  for (const auto& [name, t] : saved) shapes[name] = at::empty(t.shape, at::TensorOptions().device(at::kMeta));
  models::llama3::check_titan_state(shapes, args, ckpt.dir);
  check_checkpoint_files(ckpt);
  // Model order, the order of the files' bytes: the writes go front to back.
  std::vector<HfBox> boxes;
  for (const auto& [name, shape] : models::llama3::titan_llama_shapes(args))
    boxes.push_back({name, shape, std::vector<int64_t>(shape.size(), 0), shape, true});
  save_hf_boxes(
      folder, boxes, [&](size_t i) { return read_model_tensor(ckpt, boxes[i].fqn, saved.at(boxes[i].fqn)); }, args,
      dtype, /*group=*/nullptr, max_shard_bytes);
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

HfCheckpoint read_hf_folder(const std::string& folder) {
  HfLlamaConfig config = read_hf_folder_config(folder);
  // Each file once, however many tensors it holds.
  std::map<std::string, std::vector<std::string>> by_file;
  for (const auto& [name, path] : hf_weight_files(folder)) by_file[path].push_back(name);
  StateDict hf;
  for (const auto& [path, names] : by_file) {
    SafetensorsFile f = load_safetensors(path);
    for (const auto& name : names) {
      TITAN_CHECK(f.contains(name), "hf: tensor '", name, "' is listed in ", kHfIndexFile, " but not in ", path);
      hf[name] = f.at(name);
    }
  }

  HfCheckpoint out;
  out.args = config.args;
  out.tied_embeddings = config.tie_word_embeddings;
  // A tied model has one weight, the embedding's; save_pretrained drops the
  // duplicate lm_head, and where a file still has one, transformers ties
  // over it on load: so does titan (args.tie_word_embeddings: no output.weight).
  if (config.tie_word_embeddings) hf.erase("lm_head.weight");
  try {
    out.titan_state = from_hf_state(hf, out.args);
  } catch (const Error& e) {
    throw Error(folder + ": " + e.what());
  }
  return out;
}

}  // namespace titan::checkpoint
