// The readers as fuzz targets and the rule they are held to
// (reader_targets.hpp).
#include "reader_targets.hpp"

#include <ATen/ATen.h>
#include <zlib.h>

#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "titan/checkpoint/dcp.hpp"
#include "titan/checkpoint/hf_config.hpp"
#include "titan/checkpoint/safetensors.hpp"
#include "titan/config/load.hpp"
#include "titan/data/byte_level.hpp"
#include "titan/data/documents.hpp"
#include "titan/data/hf_tokenizer.hpp"
#include "titan/data/tiktoken_tokenizer.hpp"
#include "titan/data/tokenizer.hpp"
#include "titan/util/error.hpp"
#include "titan/util/files.hpp"

namespace titan_fuzz {

using json = nlohmann::json;
namespace ck = titan::checkpoint;

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string gzip(const std::string& bytes) {
  z_stream z{};
  deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, bytes.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

const std::vector<std::string> kJsonTokens = {"\"", "{", "}", "[", "]", ",", ":", "null", "true", "-1", "1e999",
                                              "\"\\u0000\"", "99999999999999999999", "[[[[", "\"text\"", "0.5"};

}  // namespace

std::vector<Target> make_targets(const std::string& dir, const std::string& source_dir) {
  std::vector<Target> t;

  // Job TOML, through load_job_config (parse, aliases, validate).
  {
    const std::string path = dir + "/job.toml";
    std::string debug = read_bytes(source_dir + "/train_configs/debug_model.toml");
    t.push_back({"toml",
                 {debug, "[training]\nsteps = 3\nseq_len = 16\n[model]\nflavor = \"debugmodel\"\n",
                  "[training]\ndata_parallel_shard_degree = 2\ntensor_parallel_degree = 1\n[checkpoint]\n"
                  "enable_checkpoint = true\ninterval = 5\n"},
                 {"[", "]", "=", "\"", "[[x]]", "= -1", "= 1e999", "[training]\n", "steps = ", "\n", "'''", "inf",
                  "nan", "true", "= \"float64\"", "[model]\nn_layers = 0\n"},
                 [path](const std::string& in) {
                   write_bytes(path, in);
                   (void)titan::config::load_job_config(path);
                 },
                 [path] { return path; }});
  }
  // Command-line overrides: one argument per line.
  t.push_back({"cli_overrides",
               {"--training.steps\n10\n--model.flavor=debugmodel", "--training.steps=3\n--checkpoint.enable_checkpoint",
                "--training.tensor_parallel_degree\n2\n--training.mixed_precision_param=bfloat16"},
               {"--", "=", "\n", "training.", "steps", ".", "-1", "--job.config_file\n", "true", "\n--x"},
               [](const std::string& in) {
                 std::vector<std::string> args;
                 size_t b = 0;
                 for (size_t e; (e = in.find('\n', b)) != std::string::npos; b = e + 1) args.push_back(in.substr(b, e - b));
                 args.push_back(in.substr(b));
                 titan::config::JobConfig cfg;
                 titan::config::apply_overrides(cfg, args);
               },
               [] { return std::string(); }});
  // tiktoken: base64 token, space, rank, per line.
  {
    const std::string path = dir + "/tok.tiktoken";
    std::vector<std::string> ranks;
    for (int b = 0; b < 256; ++b) ranks.push_back(std::string(1, static_cast<char>(b)));
    ranks.push_back("ab");
    ranks.push_back(" the");
    titan::data::write_tiktoken_file(path, ranks);
    t.push_back({"tiktoken",
                 {read_bytes(path)},
                 {"=", " ", "\n", "==", "-1", " 99999999999", "!!", "YQ== 0\n"},
                 [path](const std::string& in) {
                   write_bytes(path, in);
                   auto tok = titan::data::load_tokenizer(path);
                   (void)tok->encode("hello the world", true, true);
                 },
                 [path] { return path; }});
  }
  // tokenizer.json (with a fixed tokenizer_config.json) and
  // tokenizer_config.json (with a fixed tokenizer.json).
  {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[titan::data::byte_level_text(std::string(1, static_cast<char>(b)))] = b;
    vocab["ab"] = 256;
    const json tj = {
        {"version", "1.0"},
        {"added_tokens", json::array({{{"id", 257}, {"content", "<|bos|>"}, {"special", true}},
                                      {{"id", 258}, {"content", "<|eos|>"}, {"special", true}}})},
        {"normalizer", nullptr},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
        {"post_processor", nullptr},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({json::array({"a", "b"})})}}}};
    const std::string tj_path = dir + "/hf/tokenizer.json", tc_path = dir + "/hf/tokenizer_config.json";
    titan::files::make_directories(dir + "/hf");
    const std::string good_json = tj.dump(1);
    const std::string good_config = R"({"bos_token": "<|bos|>", "eos_token": "<|eos|>", "add_bos_token": true})";
    t.push_back({"tokenizer_json",
                 {good_json, json(tj).dump()},
                 kJsonTokens,
                 [=](const std::string& in) {
                   write_bytes(tj_path, in);
                   write_bytes(tc_path, good_config);
                   auto tok = titan::data::HfTokenizer::load(tj_path, tc_path);
                   (void)tok->encode("hello ab world", true, true);
                 },
                 [tj_path] { return tj_path; }});
    t.push_back({"tokenizer_config",
                 {good_config, R"({"bos_token": {"content": "<|bos|>"}, "added_tokens_decoder": {"257": {"content": "<|bos|>"}}})"},
                 kJsonTokens,
                 [=](const std::string& in) {
                   write_bytes(tj_path, good_json);
                   write_bytes(tc_path, in);
                   auto tok = titan::data::HfTokenizer::load(tj_path, tc_path);
                   (void)tok->encode("hello ab world", true, true);
                 },
                 [tc_path] { return tc_path; }});
  }
  // Datasets: read every document (at most 10,000) of one file.
  auto dataset = [&](const std::string& name, const std::string& file, std::vector<std::string> seeds, bool gz) {
    const std::string path = dir + "/" + file;
    t.push_back({name, std::move(seeds), kJsonTokens,
                 [path, gz](const std::string& in) {
                   write_bytes(path, gz ? gzip(in) : in);
                   titan::data::DocumentReader reader(titan::data::list_dataset_files(path));
                   std::string text;
                   for (int i = 0; i < 10000 && reader.next(text, i % 3 == 1); ++i) {
                   }
                 },
                 [path] { return path; }});
  };
  const std::string jsonl = "{\"text\": \"one document\"}\n{\"text\": \"two\", \"meta\": 1}\n\n{\"text\": \"\\u00e9t\\u00e9\"}\n";
  dataset("dataset_jsonl", "data.jsonl", {jsonl}, false);
  dataset("dataset_json", "data.json", {R"([{"text": "a"}, {"text": "b c", "id": 2}])", jsonl}, false);
  dataset("dataset_txt", "data.txt", {"a fortune\n%\nanother one\nwith two lines\n%\n", "plain text, one document"}, false);
  dataset("dataset_gz", "data.jsonl.gz", {jsonl}, true);
  // The compressed bytes themselves mutated (corrupt or cut gzip streams).
  {
    const std::string path = dir + "/raw.jsonl.gz";
    t.push_back({"dataset_gz_bytes",
                 {gzip(jsonl)},
                 {"\x1f\x8b", std::string(4, '\0'), "\xff\xff"},
                 [path](const std::string& in) {
                   write_bytes(path, in);
                   titan::data::DocumentReader reader(titan::data::list_dataset_files(path));
                   std::string text;
                   for (int i = 0; i < 10000 && reader.next(text); ++i) {
                   }
                 },
                 [path] { return path; }});
  }
  // safetensors: header and data, read whole.
  {
    const std::string path = dir + "/model.safetensors";
    ck::save_safetensors(path, {{"a", at::arange(6, at::kFloat).reshape({2, 3})}, {"b", at::ones({4}, at::kBFloat16)}});
    t.push_back({"safetensors",
                 {read_bytes(path)},
                 kJsonTokens,
                 [path](const std::string& in) {
                   write_bytes(path, in);
                   (void)ck::load_safetensors(path);
                 },
                 [path] { return path; }});
  }
  // A checkpoint's metadata.json (the rank file stays good).
  {
    const std::string ckpt = dir + "/checkpoint/step-3";
    ck::write_model_checkpoint(ckpt, {{"w", at::arange(8, at::kFloat).reshape({4, 2})}, {"b", at::ones({3})}}, 3);
    const std::string meta = ckpt + "/metadata.json";
    t.push_back({"checkpoint_metadata",
                 {read_bytes(meta)},
                 kJsonTokens,
                 [ckpt, meta](const std::string& in) {
                   write_bytes(meta, in);
                   const ck::CheckpointInfo info = ck::open_checkpoint(ckpt);
                   (void)ck::read_model_tensors(ckpt);
                 },
                 [ckpt] { return ckpt; }});
  }
  // Hugging Face config.json.
  t.push_back({"hf_config",
               {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 160,
                   "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 131,
                   "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": false,
                   "max_position_embeddings": 2048, "torch_dtype": "bfloat16",
                   "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})"},
               kJsonTokens,
               [](const std::string& in) { (void)ck::parse_hf_config(in, "fuzz/config.json"); },
               [] { return std::string("fuzz/config.json"); }});
  return t;
}


Outcome run_input(const Target& target, const std::string& input, bool is_seed) {
  Outcome out;
  try {
    target.run(input);
    out.accepted = true;
  } catch (const titan::Error& e) {
    out.refused = true;
    out.message = e.what();
    const std::string& what = out.message;
    const std::string must = target.names();
    // A position (FILE:LINE[:COLUMN], "line 3", "byte 12", ...) or the
    // key, entry or token the refusal is about, quoted.
    static const std::regex where(
        "(\\.[A-Za-z0-9]+:[0-9]+)|((line|column|offset|bytes?|entry|position|index|rank) [0-9])|"
        "((key|field|tensor|token|tokens|id of|option|file) ['\"-])|(\\[\")",
        std::regex::icase);
    out.located = std::regex_search(what, where);
    if (is_seed) out.finding = "a seed was refused: " + what;
    else if (what.find('\n') != std::string::npos) out.finding = "a message of more than one line: " + what;
    else if (!must.empty() && what.find(must) == std::string::npos &&
             what.find(titan::files::base_name(must)) == std::string::npos)
      out.finding = "the message does not name " + titan::files::base_name(must) + ": " + what;
  } catch (const std::bad_alloc&) {
    out.finding = "std::bad_alloc escaped (a size taken from the input?)";
  } catch (const std::exception& e) {
    out.finding = std::string("not a titan::Error: ") + e.what();
  }
  return out;
}

}  // namespace titan_fuzz
