// A seeded mutation fuzzer for every reader of outside input: job TOML and
// command-line overrides, tiktoken files, tokenizer.json and
// tokenizer_config.json, datasets (.jsonl, .json, .txt, .gz), safetensors
// files, a checkpoint's metadata.json and Hugging Face config.json.
//
// Each target starts from a small corpus of valid inputs this program
// writes, and feeds the reader mutants of them (bit flips, bytes set to
// edge values, inserted JSON/TOML tokens, cut, repeated or deleted ranges,
// truncation), 1 to 4 mutations each; mutants a reader accepts join the
// corpus. A reader may accept an input or refuse it with a titan::Error;
// anything else is a finding:
//   - another exception type escaping (std::out_of_range, a JSON library
//     error, std::bad_alloc: the user would see an internal message);
//   - an error message of more than one line, or one that does not name
//     the file it is about (or, for overrides, the option);
//   - a crash or a hang: a fatal signal or an input running past its time
//     limit prints the target and input number and ends the program.
// The findings' inputs are saved beside the scratch folder.
//
// Also counted, not required: refusals that say where in the file
// ("located": a line, column or byte offset, or the key, entry or token
// the refusal is about).
//
//   fuzz_readers [--inputs N] [--seed S] [--only TARGET] [--time-limit SECONDS] [--show-unlocated]
// Prints one line per target: inputs, accepted, refused, located,
// findings; exits 1 on any finding.
#include <ATen/ATen.h>
#include <zlib.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <regex>
#include <string>
#include <unistd.h>
#include <vector>

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

namespace {

using json = nlohmann::json;
namespace ck = titan::checkpoint;

// ------------------------------------------------------------ crash report
// What runs now, for the fatal-signal and time-limit handlers (plain
// buffers: they are read from a signal handler).
char g_current[256] = "starting";

void write_current(const char* why) {
  const char* parts[] = {"fuzz_readers: ", why, " while running ", g_current, "\n"};
  for (const char* p : parts) (void)!::write(2, p, std::strlen(p));
}

void on_fatal(int sig) {
  write_current(sig == SIGALRM ? "time limit exceeded (a hang)" : "fatal signal (a crash)");
  std::signal(sig, SIG_DFL);
  if (sig == SIGALRM) ::_exit(3);
  std::raise(sig);
}

// ------------------------------------------------------------ files
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

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

// ------------------------------------------------------------ mutations
struct Mutator {
  std::mt19937_64 rng;
  std::vector<std::string> tokens;  ///< the format's own words and edge values

  size_t pick(size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng); }

  std::string operator()(std::string s) {
    const int rounds = 1 + static_cast<int>(pick(4));
    for (int i = 0; i < rounds; ++i) {
      const size_t at = pick(s.size() + 1);
      switch (pick(8)) {
        case 0:  // flip a bit
          if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1u << pick(8));
          break;
        case 1: {  // an edge byte
          static const unsigned char edges[] = {0, 1, 0x7f, 0x80, 0xff, '"', '\\', '\n', '[', '{', '-', '9'};
          if (!s.empty()) s[pick(s.size())] = static_cast<char>(edges[pick(sizeof edges)]);
          break;
        }
        case 2:  // insert a token of the format
          s.insert(at, tokens[pick(tokens.size())]);
          break;
        case 3:  // delete a range
          if (!s.empty()) s.erase(at > 0 ? at - 1 : 0, 1 + pick(16));
          break;
        case 4: {  // repeat a range
          if (s.empty()) break;
          const size_t from = pick(s.size()), len = 1 + pick(std::min<size_t>(64, s.size() - from));
          s.insert(at, s.substr(from, len));
          break;
        }
        case 5:  // truncate
          s.resize(pick(s.size() + 1));
          break;
        case 6: {  // replace a number with an edge value
          const size_t d = s.find_first_of("0123456789", pick(s.size() + 1));
          if (d == std::string::npos) break;
          size_t e = d;
          while (e < s.size() && std::isdigit(static_cast<unsigned char>(s[e]))) ++e;
          static const char* numbers[] = {"0", "-1", "99999999999999999999", "4294967296", "1e308", "-0", "2147483648"};
          s.replace(d, e - d, numbers[pick(7)]);
          break;
        }
        default:  // swap two bytes
          if (s.size() > 1) std::swap(s[pick(s.size())], s[pick(s.size())]);
      }
    }
    return s;
  }
};

// ------------------------------------------------------------ targets
// A reader of one kind of input: `run` writes the input where the reader
// expects it and reads it; `names` is what a refusal must mention.
struct Target {
  std::string name;
  std::vector<std::string> seeds;
  std::vector<std::string> tokens;
  std::function<void(const std::string& input)> run;
  std::function<std::string()> names;  ///< the file (or option) a message must name; "" = no check
};

const std::vector<std::string> kJsonTokens = {"\"", "{", "}", "[", "]", ",", ":", "null", "true", "-1", "1e999",
                                              "\"\\u0000\"", "99999999999999999999", "[[[[", "\"text\"", "0.5"};

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

// ------------------------------------------------------------ the loop
struct Tally {
  int64_t inputs = 0, accepted = 0, refused = 0, findings = 0;
  /// Refusals whose message also says where in the file: a line, column
  /// or byte offset, or the key, entry or token it is about (not
  /// required: reported).
  int64_t located = 0;
  std::vector<std::string> unlocated;  ///< a few refusals that do not
  double seconds = 0;
  std::vector<std::string> examples;
};

Tally fuzz(Target& target, int64_t inputs, uint64_t seed, unsigned time_limit_s, const std::string& findings_dir) {
  Tally tally;
  Mutator mutate{std::mt19937_64(seed), target.tokens};
  mutate.tokens.push_back("");
  std::vector<std::string> corpus = target.seeds;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < inputs; ++i) {
    // The seeds themselves first: they must be accepted.
    const bool is_seed = i < static_cast<int64_t>(target.seeds.size());
    const std::string input = is_seed ? target.seeds[i] : mutate(corpus[mutate.pick(corpus.size())]);
    std::snprintf(g_current, sizeof g_current, "target %s, input %lld (seed %llu)", target.name.c_str(),
                  static_cast<long long>(i), static_cast<unsigned long long>(seed));
    std::string finding;
    ::alarm(time_limit_s);
    try {
      target.run(input);
      ++tally.accepted;
      if (corpus.size() < 256 && !is_seed) corpus.push_back(input);
    } catch (const titan::Error& e) {
      ++tally.refused;
      const std::string what = e.what();
      const std::string must = target.names();
      // A position (FILE:LINE[:COLUMN], "line 3", "byte 12", ...) or the
      // key, entry or token the refusal is about, quoted.
      static const std::regex where(
          "(\\.[A-Za-z0-9]+:[0-9]+)|((line|column|offset|bytes?|entry|position|index|rank) [0-9])|"
          "((key|field|tensor|token|tokens|id of|option|file) ['\"-])|(\\[\")",
          std::regex::icase);
      if (std::regex_search(what, where)) ++tally.located;
      else if (tally.unlocated.size() < 3) tally.unlocated.push_back(what.substr(0, 200));
      if (is_seed) finding = "a seed was refused: " + what;
      else if (what.find('\n') != std::string::npos) finding = "a message of more than one line: " + what;
      else if (!must.empty() && what.find(must) == std::string::npos && what.find(titan::files::base_name(must)) == std::string::npos)
        finding = "the message does not name " + titan::files::base_name(must) + ": " + what;
    } catch (const std::bad_alloc&) {
      finding = "std::bad_alloc escaped (a size taken from the input?)";
    } catch (const std::exception& e) {
      finding = std::string("not a titan::Error: ") + e.what();
    }
    ::alarm(0);
    ++tally.inputs;
    if (!finding.empty()) {
      ++tally.findings;
      const std::string saved = findings_dir + "/" + target.name + "-" + std::to_string(i);
      write_bytes(saved, input);
      if (tally.examples.size() < 5) tally.examples.push_back(finding.substr(0, 300) + " [input: " + saved + "]");
    }
  }
  tally.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return tally;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t inputs = 2000;
  uint64_t seed = 1;
  unsigned time_limit_s = 20;
  std::string only;
  bool show_unlocated = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "fuzz_readers: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--inputs") inputs = std::stoll(value());
    else if (a == "--seed") seed = std::stoull(value());
    else if (a == "--only") only = value();
    else if (a == "--time-limit") time_limit_s = static_cast<unsigned>(std::stoul(value()));
    else if (a == "--show-unlocated") show_unlocated = true;
    else {
      std::fprintf(stderr,
                   "usage: fuzz_readers [--inputs N] [--seed S] [--only TARGET] [--time-limit SECONDS] [--show-unlocated]\n");
      return 2;
    }
  }
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM}) std::signal(sig, on_fatal);
  const char* src = std::getenv("TITAN_SOURCE_DIR");
  const std::string dir = titan::files::temp_dir() + "/titan-fuzz-" + std::to_string(::getpid());
  const std::string findings_dir = dir + "-findings";
  titan::files::make_directories(dir);
  titan::files::make_directories(findings_dir);
  std::vector<Target> targets = make_targets(dir, src && *src ? src : ".");

  std::printf("%-20s %8s %9s %8s %8s %9s %8s\n", "reader", "inputs", "accepted", "refused", "located", "findings",
              "seconds");
  int64_t total_findings = 0;
  std::vector<std::string> examples;
  for (size_t k = 0; k < targets.size(); ++k) {
    Target& target = targets[k];
    if (!only.empty() && target.name != only) continue;
    const Tally t = fuzz(target, inputs, seed * 1000 + k, time_limit_s, findings_dir);
    std::printf("%-20s %8lld %9lld %8lld %8lld %9lld %8.1f\n", target.name.c_str(), static_cast<long long>(t.inputs),
                static_cast<long long>(t.accepted), static_cast<long long>(t.refused), static_cast<long long>(t.located),
                static_cast<long long>(t.findings), t.seconds);
    if (show_unlocated)
      for (const auto& u : t.unlocated) std::printf("    unlocated: %s\n", u.c_str());
    std::fflush(stdout);
    total_findings += t.findings;
    for (const auto& e : t.examples) examples.push_back(target.name + ": " + e);
  }
  for (const auto& e : examples) std::printf("  ! %s\n", e.c_str());
  std::printf("%lld findings (inputs of findings kept in %s)\n", static_cast<long long>(total_findings),
              findings_dir.c_str());
  titan::files::remove_all(dir);
  if (total_findings == 0) titan::files::remove_all(findings_dir);
  return total_findings == 0 ? 0 : 1;
}
