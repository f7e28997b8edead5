// `titan tokenizer`: train a byte-level BPE on a corpus into a tiktoken
// rank file, look at what a tokenizer does to a piece of text, and time it
// on a file.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "commands.hpp"
#include "titan/data/builtin_tokenizer.hpp"
#include "titan/data/documents.hpp"
#include "titan/util/files.hpp"
#include "titan/data/tokenizer.hpp"
#include "titan/launch/program.hpp"
#include "titan/util/error.hpp"

namespace titan::cli {
namespace {

constexpr const char* kTokenizerUsage =
    "usage: titan tokenizer train [--input PATH] [--vocab-size N] --output FILE\n"
    "       titan tokenizer encode [--tokenizer PATH] TEXT...\n"
    "       titan tokenizer encode [--tokenizer PATH] --file FILE\n"
    "\n"
    "train   byte-level BPE over Llama 3's pre-tokenisation; writes a tiktoken rank file\n"
    "        of N - 256 ranks (N ids with Llama 3's 256 special tokens)\n"
    "  --input PATH       text file, .jsonl file or folder (default: the built-in corpus)\n"
    "  --vocab-size N     ids including the 256 special tokens (default 2048)\n"
    "  --output FILE      where to write the rank file\n"
    "encode  prints the ids and pieces of TEXT (special-token text becomes special tokens; no BOS/EOS)\n"
    "  --tokenizer PATH   a tiktoken file, a Hugging Face tokenizer.json or assets folder (tokenizer.json,\n"
    "                     else original/tokenizer.model), 'builtin:byte', or empty/omitted for the built-in\n"
    "  --file FILE        encode the whole file as the data loader does (special-token text as text) and\n"
    "                     print the token count and the encoding speed instead\n";

struct Args {
  std::string input, output, tokenizer, file;
  int64_t vocab_size = data::kBuiltinVocabSize;
  std::vector<std::string> rest;
};

Args parse(int argc, char** argv, int first) {
  Args a;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i], value;
    const size_t eq = arg.find('=');
    const bool is_flag = arg.rfind("--", 0) == 0;
    if (is_flag && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (is_flag) {
      TITAN_CHECK(i + 1 < argc, arg, " needs a value");
      value = argv[++i];
    }
    if (!is_flag) a.rest.push_back(arg);
    else if (arg == "--input") a.input = value;
    else if (arg == "--output") a.output = value;
    else if (arg == "--tokenizer") a.tokenizer = value;
    else if (arg == "--file") a.file = value;
    else if (arg == "--vocab-size") {
      char* end = nullptr;
      a.vocab_size = std::strtoll(value.c_str(), &end, 10);
      TITAN_CHECK(!value.empty() && *end == '\0', "--vocab-size must be an integer, got '", value, "'");
    } else {
      throw Error("unknown option '" + arg + "' for titan tokenizer (run 'titan tokenizer --help')");
    }
  }
  return a;
}

int train(const Args& a) {
  TITAN_CHECK(!a.output.empty(), "titan tokenizer train needs --output FILE");
  auto start = std::chrono::steady_clock::now();
  auto tok = data::train_tokenizer(a.input, a.vocab_size, /*verbose=*/true);
  tok->save(a.output);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // How well it compresses its own corpus: the number that decides how much
  // text a training step sees.
  data::DocumentReader reader(data::list_dataset_files(data::resolve_dataset_path(a.input)));
  std::string text;
  int64_t bytes = 0, tokens = 0;
  while (reader.next(text)) {
    bytes += static_cast<int64_t>(text.size());
    tokens += static_cast<int64_t>(tok->encode(text).size());
  }
  std::printf("wrote %s: %lld ranks + %d special tokens = %lld ids (trained in %.2f s); %.2f bytes per token on the corpus\n",
              a.output.c_str(), static_cast<long long>(tok->num_base_tokens()), data::kNumSpecialTokens,
              static_cast<long long>(tok->vocab_size()), secs, tokens ? double(bytes) / double(tokens) : 0.0);
  return 0;
}

// Encodes FILE a few times (at least 3 passes and half a second) and
// prints the median pass: the number bench/tokenizer compares.
int encode_file(const Args& a, const data::Tokenizer& tok) {
  TITAN_CHECK(a.rest.empty(), "titan tokenizer encode takes --file or TEXT, not both");
  const std::string text = files::read_file(a.file, "text file");
  std::vector<double> secs;
  size_t tokens = 0;
  const auto begin = std::chrono::steady_clock::now();
  while (secs.size() < 3 || std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count() < 0.5) {
    const auto t0 = std::chrono::steady_clock::now();
    tokens = tok.encode(text).size();
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(secs.begin(), secs.end());
  const double median = secs[secs.size() / 2];
  std::printf("%s\n%zu tokens for %zu bytes (%.2f bytes/token); median of %zu passes %.4f s: %.2f MB/s, %.0f tokens/s\n",
              tok.describe().c_str(), tokens, text.size(), tokens ? double(text.size()) / double(tokens) : 0.0,
              secs.size(), median, double(text.size()) / median / 1e6, double(tokens) / median);
  return 0;
}

int encode(const Args& a) {
  auto tok = data::load_tokenizer(a.tokenizer);
  if (!a.file.empty()) return encode_file(a, *tok);
  TITAN_CHECK(!a.rest.empty(), "titan tokenizer encode needs TEXT (or --file FILE)");
  std::string text;
  for (size_t i = 0; i < a.rest.size(); ++i) text += (i ? " " : "") + a.rest[i];
  std::vector<int64_t> ids = tok->encode(text, /*bos=*/false, /*eos=*/false, /*allow_special=*/true);
  std::printf("%s\n%zu tokens for %zu bytes:", tok->describe().c_str(), ids.size(), text.size());
  for (int64_t id : ids) std::printf(" %lld", static_cast<long long>(id));
  std::printf("\n");
  for (int64_t id : ids) std::printf("[%s]", tok->decode({id}).c_str());
  std::printf("\n");
  return 0;
}

}  // namespace

static int cmd_tokenizer(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    if (argc < 3 || !std::strcmp(argv[2], "--help") || !std::strcmp(argv[2], "-h")) {
      std::fputs(kTokenizerUsage, argc < 3 ? stderr : stdout);
      return argc < 3 ? 2 : 0;
    }
    const std::string sub = argv[2];
    const Args a = parse(argc, argv, 3);
    if (sub == "train") return train(a);
    if (sub == "encode") return encode(a);
    throw Error("unknown tokenizer command '" + sub + "' (train or encode)");
  });
}

}  // namespace titan::cli

TITAN_COMMAND("tokenizer", titan::cli::cmd_tokenizer, "train a BPE tokenizer on a corpus, or show how text encodes");
