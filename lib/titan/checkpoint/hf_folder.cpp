#include "titan/checkpoint/hf_folder.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "titan/checkpoint/hf_config.hpp"
#include "titan/checkpoint/safetensors.hpp"
#include "titan/util/files.hpp"
#include "titan/util/error.hpp"
#include "titan/models/llama3/state_dict_adapter.hpp"

namespace titan::checkpoint {

using models::llama3::from_hf_state;
using models::llama3::hf_name;
using models::llama3::titan_llama_shapes;
using models::llama3::to_hf_state;

namespace {

namespace files = titan::files;
using Tensors = std::vector<std::pair<std::string, at::Tensor>>;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TITAN_CHECK(in.good(), "hf: cannot open ", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Same tmp + rename as save_safetensors: no torn config.json or index.
void write_text(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    TITAN_CHECK(out.good(), "hf: cannot open ", tmp, " for writing");
    out << text;
    out.flush();
    TITAN_CHECK(out.good(), "hf: write to ", tmp, " failed (disk full?)");
  }
  TITAN_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "hf: cannot rename ", tmp, " to ", path);
}

// HF's shard names: 1-based, five digits, "model-00001-of-00003.safetensors".
std::string shard_name(size_t k, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", k, n);
  return buf;
}

}  // namespace

bool is_hf_folder(const std::string& folder) { return files::is_regular_file(folder + "/config.json"); }

void write_hf_folder(const std::string& folder, const StateDict& titan_state,
                     const models::llama3::ModelArgs& args, at::ScalarType dtype, int64_t max_shard_bytes) {
  TITAN_CHECK(max_shard_bytes > 0, "hf: max_shard_bytes must be positive, got ", max_shard_bytes);
  const std::string config = hf_config_json(args, dtype);  // validates args and dtype first
  StateDict hf = to_hf_state(titan_state, args);
  TITAN_CHECK(files::make_directories(folder), "hf: cannot create folder ", folder);

  // Model order (embedding, layer 0, 1, ..., 10, ..., head) rather than the
  // map's alphabetical one, so that a layer's tensors share a shard. Plan by
  // name and size first and cast shard by shard when saving, so an 8B export
  // to bf16 holds one shard's copy at a time, not a second model.
  const int64_t elem = at::elementSize(dtype);
  std::vector<std::vector<std::string>> shards(1);
  int64_t shard_bytes = 0, total = 0;
  for (const auto& [name, shape] : titan_llama_shapes(args)) {
    const std::string hn = hf_name(name);
    const int64_t b = hf.at(hn).numel() * elem;
    if (!shards.back().empty() && shard_bytes + b > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(hn);
    shard_bytes += b;
    total += b;
  }
  auto shard_tensors = [&](const std::vector<std::string>& names) {
    Tensors out;
    for (const auto& n : names) out.emplace_back(n, hf.at(n).detach().to(at::kCPU).to(dtype).contiguous());
    return out;
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  if (shards.size() == 1) {
    save_safetensors(folder + "/" + kSingleFile, shard_tensors(shards[0]), metadata);
    std::remove((folder + "/" + kIndexFile).c_str());  // a stale index would shadow the new file
  } else {
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t k = 0; k < shards.size(); ++k) {
      const std::string file = shard_name(k + 1, shards.size());
      save_safetensors(folder + "/" + file, shard_tensors(shards[k]), metadata);
      for (const auto& name : shards[k]) weight_map[name] = file;
    }
    nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_text(folder + "/" + kIndexFile, index.dump(2) + "\n");
    std::remove((folder + "/" + kSingleFile).c_str());
  }
  write_text(folder + "/config.json", config);
}

HfLlamaConfig read_hf_folder_config(const std::string& folder) {
  TITAN_CHECK(files::is_directory(folder), "hf: ", folder, " is not a folder");
  const std::string config_path = folder + "/config.json";
  TITAN_CHECK(files::is_regular_file(config_path), "hf: ", folder, " has no config.json");
  return parse_hf_config(read_text(config_path), config_path);
}

std::map<std::string, std::string> hf_weight_files(const std::string& folder) {
  std::map<std::string, std::string> out;
  const std::string index_path = folder + "/" + kIndexFile, single_path = folder + "/" + kSingleFile;
  if (!files::is_regular_file(index_path)) {
    TITAN_CHECK(files::is_regular_file(single_path), "hf: ", folder, " has neither ", kSingleFile, " nor ",
                kIndexFile);
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
    TITAN_CHECK(files::is_regular_file(path), "hf: shard ", path, " (listed in ", kIndexFile, ") is missing");
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
      TITAN_CHECK(f.contains(name), "hf: tensor '", name, "' is listed in ", kIndexFile, " but not in ", path);
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
