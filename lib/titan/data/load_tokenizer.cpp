// Which tokenizer a path names: the built-in ones, an hf_assets folder, a
// Hugging Face tokenizer.json, or a tiktoken rank file.
#include <cctype>
#include <cstdio>

#include "titan/data/builtin_tokenizer.hpp"
#include "titan/data/byte_tokenizer.hpp"
#include "titan/util/files.hpp"
#include "titan/data/hf_tokenizer.hpp"
#include "titan/data/tokenizer.hpp"
#include "titan/util/error.hpp"

namespace titan::data {
namespace {

// A tokenizer.json need not be named so: what decides is a '{' first.
bool looks_like_json(const std::string& path) {
  if (files::extension(path) == ".json") return true;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  int c;
  while ((c = std::fgetc(f)) != EOF && std::isspace(c)) {
  }
  std::fclose(f);
  return c == '{';
}

std::shared_ptr<const Tokenizer> load_hf(const std::string& json_path) {
  return HfTokenizer::load(json_path, files::join(files::dir_name(json_path), "tokenizer_config.json"));
}

}  // namespace

std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& path) {
  if (path.empty() || path == "builtin") return make_default_tokenizer();
  if (path == "builtin:byte") return std::make_shared<ByteTokenizer>();
  TITAN_CHECK(files::exists(path), "tokenizer path '", path,
              "' not found: [model] tokenizer_path or hf_assets_path must name a tiktoken file (Llama 3's "
              "original/tokenizer.model), a Hugging Face tokenizer.json or an assets folder holding one "
              "(torchtitan's scripts/download_hf_assets.py fetches them); leave both empty for the built-in tokenizer");
  if (files::is_directory(path)) {
    // torchtitan's hf_assets_path: what scripts/download_hf_assets.py puts
    // there for Llama 3 holds both forms; tokenizer.json is what torchtitan reads.
    const std::string json = files::join(path, "tokenizer.json");
    const std::string tiktoken = files::join(path, "original/tokenizer.model");
    if (files::is_regular_file(json)) return load_hf(json);
    if (files::is_regular_file(tiktoken)) return TiktokenTokenizer::load(tiktoken, kNumSpecialTokens);
    throw Error("tokenizer folder '" + path +
                "' has neither tokenizer.json nor original/tokenizer.model (a Hugging Face assets folder, as "
                "torchtitan's hf_assets_path, holds one of them)");
  }
  if (files::is_regular_file(path) && looks_like_json(path)) return load_hf(path);
  return TiktokenTokenizer::load(path, kNumSpecialTokens);
}

TokenizerChoice choose_tokenizer_path(const std::string& tokenizer_path, const std::string& hf_assets_path,
                                      int64_t model_vocab_size) {
  // torchtitan's llama3 configs name a tokenizer inside its repository,
  // fetched there by its download script; a debugmodel-sized run of such a
  // config (the smoke test of a real config) has no use for it.
  const bool in_torchtitan_repo = tokenizer_path.rfind("./torchtitan/", 0) == 0;
  if (in_torchtitan_repo && model_vocab_size == kBuiltinVocabSize && !files::exists(tokenizer_path))
    return {"", "tokenizer_path = \"" + tokenizer_path + "\" (inside torchtitan's repository) is not here and the model's " +
                    std::to_string(model_vocab_size) + " ids fit the built-in tokenizer: using it"};
  if (tokenizer_path.empty()) {
    // torchtitan's configs (its debug_model.toml too) name its repository's
    // test tokenizer; outside that repository titan's demo default stands in.
    if (hf_assets_path == kTorchtitanTestAssets && !files::exists(hf_assets_path))
      return {"", "hf_assets_path = \"" + hf_assets_path +
                      "\" (torchtitan's test tokenizer folder) is not here: using the built-in tokenizer"};
    return {hf_assets_path, ""};
  }
  if (hf_assets_path.empty() || hf_assets_path == tokenizer_path) return {tokenizer_path, ""};
  return {tokenizer_path, "[model] tokenizer_path wins over hf_assets_path = \"" + hf_assets_path +
                              "\" (as in torchtitan 0.2, which uses tokenizer_path when both are set)"};
}

}  // namespace titan::data
