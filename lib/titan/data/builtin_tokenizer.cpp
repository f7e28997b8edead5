#include "titan/data/builtin_tokenizer.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>

#include "titan/data/bpe_trainer.hpp"
#include "titan/data/documents.hpp"
#include "titan/util/files.hpp"
#include "titan/util/error.hpp"

namespace titan::data {

namespace {

// Bump when the training algorithm or the built-in recipe changes, so that
// stale cached files are not picked up.
constexpr const char* kRecipe = "titan-bpe-v1";

uint64_t fnv1a(uint64_t h, const char* data, size_t n) {
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<uint8_t>(data[i])) * 1099511628211ull;
  return h;
}

std::string corpus_hash(const std::vector<DatasetFile>& files) {
  uint64_t h = fnv1a(14695981039346656037ull, kRecipe, std::strlen(kRecipe));
  std::vector<char> buf(1 << 16);
  for (const auto& f : files) {
    const std::string name = files::base_name(f.path);
    h = fnv1a(h, name.data(), name.size() + 1);
    std::ifstream in(f.path, std::ios::binary);
    while (in.read(buf.data(), buf.size()) || in.gcount() > 0) h = fnv1a(h, buf.data(), in.gcount());
  }
  char out[17];
  std::snprintf(out, sizeof(out), "%016llx", static_cast<unsigned long long>(h));
  return out;
}

}  // namespace

std::string titan_cache_dir() {
  if (const char* d = std::getenv("TITAN_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/titan";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/titan";
  return files::temp_dir() + "/titan-cache";
}

std::shared_ptr<TiktokenTokenizer> train_tokenizer(const std::string& dataset, int64_t vocab_size, bool verbose) {
  TITAN_CHECK(vocab_size >= 256 + kNumSpecialTokens, "vocab size ", vocab_size, " is too small: ",
              256 + kNumSpecialTokens, " ids are the 256 bytes and the ", kNumSpecialTokens, " special tokens");
  const std::string path = resolve_dataset_path(dataset);
  auto start = std::chrono::steady_clock::now();
  DocumentReader reader(list_dataset_files(path));
  PieceCounts counts;
  std::string text;
  int64_t docs = 0, bytes = 0;
  while (reader.next(text)) {
    count_pieces(text, counts);
    ++docs;
    bytes += static_cast<int64_t>(text.size());
  }
  TITAN_CHECK(docs > 0, "dataset '", path, "' has no documents to train a tokenizer on");
  BpeTrainResult r = train_bpe(counts, vocab_size - kNumSpecialTokens);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (verbose)
    std::fprintf(stderr, "[tokenizer] trained %zu ranks on %lld documents (%lld bytes, %zu distinct pieces) in %.2f s%s\n",
                 r.ranks.size(), static_cast<long long>(docs), static_cast<long long>(bytes), counts.size(), secs,
                 r.exhausted ? " (stopped early: every piece became one token)" : "");
  return std::make_shared<TiktokenTokenizer>(std::move(r.ranks), llama3_special_tokens(kNumSpecialTokens),
                                             "trained on " + path);
}

std::string builtin_tokenizer_path() {
  const std::string dir = builtin_corpus_dir();
  return titan_cache_dir() + "/tokenizers/fortunes-bpe-" + std::to_string(kBuiltinVocabSize) + "-" +
         corpus_hash(list_dataset_files(dir)) + ".tiktoken";
}

std::shared_ptr<const Tokenizer> make_default_tokenizer() {
  // One per process: the trainer, the data loader and the tests may all ask.
  static std::mutex mu;
  static std::shared_ptr<const Tokenizer> cached;
  std::lock_guard<std::mutex> lock(mu);
  if (cached) return cached;
  const std::string file = builtin_tokenizer_path();
  if (files::is_regular_file(file)) {
    cached = TiktokenTokenizer::load(file, kNumSpecialTokens);
    return cached;
  }
  std::fprintf(stderr, "[tokenizer] training the built-in tokenizer on %s (once; cached as %s)\n",
               builtin_corpus_dir().c_str(), file.c_str());
  auto tok = train_tokenizer("builtin", kBuiltinVocabSize, /*verbose=*/true);
  files::make_directories(files::dir_name(file));
  try {
    tok->save(file);
    cached = TiktokenTokenizer::load(file, kNumSpecialTokens);  // so it names its file, as later runs will
  } catch (const Error& e) {
    // A read-only cache only costs the training time next run.
    std::fprintf(stderr, "[tokenizer] not cached: %s\n", e.what());
    cached = tok;
  }
  return cached;
}

void check_vocab_fits(const Tokenizer& tokenizer, int64_t model_vocab_size) {
  TITAN_CHECK(tokenizer.vocab_size() <= model_vocab_size, "the tokenizer (", tokenizer.describe(), ") has ",
              tokenizer.vocab_size(), " ids but the model's vocab_size is ", model_vocab_size,
              ": every id needs an embedding row; use a model with vocab_size >= ", tokenizer.vocab_size(),
              " or a smaller tokenizer (the built-in one has ", kBuiltinVocabSize, ")");
}

}  // namespace titan::data
