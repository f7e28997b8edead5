// The BPE trainer: the incremental C++ trainer makes exactly the merges of
// the naive Python reference; Python's tiktoken reads what it writes and
// encodes like the C++ tokenizer; `titan tokenizer train` works from the
// command line; the built-in tokenizer trains fast, caches, and round-trips.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "data_test_util.hpp"
#include "support/run_command.hpp"
#include "titan/data/bpe_trainer.hpp"
#include "titan/data/builtin_tokenizer.hpp"
#include "titan/data/documents.hpp"
#include "titan/util/files.hpp"
#include "titan/data/tiktoken_tokenizer.hpp"
#include "titan/util/error.hpp"

using namespace titan;
using namespace titan::data;
using titan::testing::TempDir;

namespace {
#define SKIP_WITHOUT_PYTHON() \
  if (titan::testing::ctest_python().empty()) GTEST_SKIP() << "TITAN_PYTHON is not set (run through ctest)"

bool have_fortunes() {
  try {
    builtin_corpus_dir();
    return true;
  } catch (const titan::Error&) {
    return false;
  }
}
}  // namespace

TEST(BpeTrain, SameMergesAsTheNaiveReferenceAndTiktokenAgrees) {
  SKIP_WITHOUT_PYTHON();
  TempDir dir;
  const std::string text = dir / "sample.txt";
  ASSERT_TRUE(titan::testing::run_reference("sample-text " + text));
  ASSERT_TRUE(titan::testing::run_reference("train " + text + " 900 " + (dir / "py.tiktoken")));

  auto tok = train_tokenizer(text, 900 + kNumSpecialTokens);
  ASSERT_EQ(tok->num_base_tokens(), 900);
  tok->save(dir / "cpp.tiktoken");
  EXPECT_EQ(titan::testing::read_file(dir / "cpp.tiktoken"), titan::testing::read_file(dir / "py.tiktoken"))
      << "the C++ trainer chose other merges than tests/reference/tiktoken_reference.py";

  // Python's tiktoken on the C++-written file gives the C++ ids.
  ASSERT_TRUE(titan::testing::run_reference("encode " + (dir / "cpp.tiktoken") + " " + (dir / "expected.json")));
  const auto want = nlohmann::json::parse(titan::testing::read_file(dir / "expected.json"));
  auto loaded = TiktokenTokenizer::load(dir / "cpp.tiktoken");
  for (const auto& c : want["cases"]) {
    const std::string s = c["text"].get<std::string>();
    EXPECT_EQ(loaded->encode(s), c["ordinary"].get<std::vector<int64_t>>()) << nlohmann::json(s).dump();
    EXPECT_EQ(loaded->decode(loaded->encode(s)), s);
  }
}

TEST(BpeTrain, StopsWhenEveryPieceIsOneToken) {
  PieceCounts counts;
  count_pieces("ab ab ab", counts);
  BpeTrainResult r = train_bpe(counts, 1000);
  EXPECT_TRUE(r.exhausted);
  EXPECT_EQ(r.ranks.size(), 256u + 2u);  // "ab", then " ab": every piece is one token
  EXPECT_THROW(train_bpe(counts, 100), titan::Error);
}

TEST(BpeTrain, CommandLineTrainsAFileThatLoads) {
  TempDir dir;
  titan::testing::write_file(dir / "corpus/a.txt", "one fish two fish\n%\nred fish blue fish\n");
  titan::testing::write_file(dir / "corpus/b.jsonl", "{\"text\": \"the fish swims\"}\n{\"text\": \"fish and chips\"}\n");
  const std::string titan_bin = titan::testing::bin_path("titan");
  auto r = titan::testing::run_command(titan_bin + " tokenizer train --input " + (dir / "corpus") +
                                       " --vocab-size 530 --output " + (dir / "out.tiktoken"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ranks + 256 special tokens"), std::string::npos) << r.output;
  auto tok = TiktokenTokenizer::load(dir / "out.tiktoken");
  EXPECT_EQ(tok->decode(tok->encode("red fish")), "red fish");
  EXPECT_LT(tok->encode(" fish").size(), 2u);

  // Bad input: one line, exit 1.
  r = titan::testing::run_command(titan_bin + " tokenizer train --vocab-size 300 --output " + (dir / "x"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("error: vocab size 300 is too small"), std::string::npos) << r.output;
  r = titan::testing::run_command(titan_bin + " tokenizer encode --tokenizer " + (dir / "missing.model") + " hi");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("missing.model' not found"), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

TEST(BuiltinTokenizer, TrainsFastCachesAndRoundTrips) {
  if (!have_fortunes()) GTEST_SKIP() << "no fortunes corpus";
  TempDir cache;
  ::setenv("TITAN_CACHE_DIR", cache.path().c_str(), 1);
  const std::string path = builtin_tokenizer_path();
  auto start = std::chrono::steady_clock::now();
  auto tok = make_default_tokenizer();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("built-in tokenizer: trained in %.2f s -> %s\n", secs, path.c_str());
  EXPECT_LT(secs, 30.0);
  EXPECT_EQ(tok->vocab_size(), kBuiltinVocabSize);
  EXPECT_TRUE(titan::files::is_regular_file(path));
  EXPECT_EQ(make_default_tokenizer(), tok);  // one per process

  // The cached file holds the same tokenizer a fresh training makes.
  auto again = TiktokenTokenizer::load(path);
  auto fresh = train_tokenizer("builtin", kBuiltinVocabSize);
  for (int64_t id = 0; id < fresh->num_base_tokens(); ++id) ASSERT_EQ(fresh->token_bytes(id), again->token_bytes(id));

  // Compression on the corpus itself, and a round trip of every document.
  DocumentReader reader(list_dataset_files(builtin_corpus_dir()));
  std::string text;
  int64_t bytes = 0, tokens = 0;
  start = std::chrono::steady_clock::now();
  while (reader.next(text)) {
    auto ids = tok->encode(text);
    ASSERT_EQ(tok->decode(ids), text);
    bytes += static_cast<int64_t>(text.size());
    tokens += static_cast<int64_t>(ids.size());
  }
  secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("built-in corpus: %lld bytes -> %lld tokens (%.2f bytes/token), encode+decode %.1f MB/s\n",
              (long long)bytes, (long long)tokens, double(bytes) / tokens, bytes / secs / 1e6);
  EXPECT_GT(double(bytes) / tokens, 2.4);  // measured 2.67 with 1792 ranks
}
