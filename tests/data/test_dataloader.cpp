// The data pipeline: file formats, the token stream and its windows,
// sharding by data-parallel rank, exact resume, epochs, and bad datasets.
// The byte tokenizer keeps expected token streams easy to write down.
#include <gtest/gtest.h>
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <set>

#include "data_test_util.hpp"
#include "titan/data/byte_tokenizer.hpp"
#include "titan/data/dataloader.hpp"
#include "titan/data/documents.hpp"
#include "titan/util/files.hpp"
#include "titan/util/error.hpp"

using namespace titan;
using namespace titan::data;
using titan::testing::TempDir;
using titan::testing::error_of;
using titan::testing::byte_stream;
using titan::testing::bytes;
using titan::testing::documents;
using titan::testing::write_file;

namespace {



std::vector<int64_t> row(const at::Tensor& t, int64_t i) {
  at::Tensor r = t[i].contiguous();
  return {r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel()};
}


// A folder of 12 short documents over three formats.
std::string make_corpus(const TempDir& dir) {
  write_file(dir / "c/a.txt", "first doc\n%\nsecond doc\nhas two lines\n%\n%\n  \n%\nthird doc\n");
  write_file(dir / "c/b/n.jsonl",
             "{\"text\": \"json one\"}\n\n{\"text\": \"json two\", \"url\": \"x\"}\n{\"text\": \"json three\"}\n");
  write_file(dir / "c/c", "a whole file is one document\n");
  write_file(dir / "c/d.md", "doc d\n%\ndoc e\n%\ndoc f\n%\ndoc g\n");
  write_file(dir / "c/skip.dat", "binary index");
  write_file(dir / "c/.hidden.txt", "hidden");
  write_file(dir / "c/.git/x.txt", "hidden folder");
  return dir / "c";
}

}  // namespace

TEST(Documents, FormatsAndFolderOrder) {
  TempDir dir;
  const auto docs = documents(make_corpus(dir));
  const std::vector<std::string> want = {"first doc", "second doc\nhas two lines", "third doc", "json one", "json two",
                                         "json three", "a whole file is one document", "doc d", "doc e", "doc f",
                                         "doc g"};
  EXPECT_EQ(docs, want);
}

TEST(Documents, PositionsResumeExactly) {
  TempDir dir;
  DocumentReader r(list_dataset_files(make_corpus(dir)));
  std::string t;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(r.next(t));
  const DocumentPosition p = r.position();
  std::vector<std::string> rest, again;
  while (r.next(t)) rest.push_back(t);
  r.seek(p);
  while (r.next(t)) again.push_back(t);
  EXPECT_EQ(rest, again);
  EXPECT_EQ(rest.front(), "json two");
}

TEST(Documents, BadJsonNamesFileAndLine) {
  TempDir dir;
  write_file(dir / "bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": oops}\n");
  std::string m = error_of([&] { documents(dir / "bad.jsonl"); });
  EXPECT_NE(m.find("bad.jsonl:2"), std::string::npos) << m;
  write_file(dir / "notext.jsonl", "{\"content\": \"ok\"}\n");
  m = error_of([&] { documents(dir / "notext.jsonl"); });
  EXPECT_NE(m.find("notext.jsonl:1: expected a JSON object with a string field \"text\""), std::string::npos) << m;
}

TEST(DataLoader, WindowsAreTheDocumentStreamCutInSeqLenPlusOne) {
  TempDir dir;
  const std::string path = make_corpus(dir);
  const auto stream = byte_stream(documents(path));
  const int64_t S = 16, B = 3;
  DataLoader dl(bytes(), {path, B, S});
  for (int step = 0; step < 2; ++step) {
    Batch b = dl.next();
    ASSERT_EQ(b.inputs.sizes(), (at::IntArrayRef{B, S}));
    ASSERT_EQ(b.labels.sizes(), (at::IntArrayRef{B, S}));
    ASSERT_EQ(b.inputs.scalar_type(), at::kLong);
    for (int64_t i = 0; i < B; ++i) {
      const int64_t w = (step * B + i) * (S + 1);
      std::vector<int64_t> in(stream.begin() + w, stream.begin() + w + S);
      std::vector<int64_t> lab(stream.begin() + w + 1, stream.begin() + w + S + 1);
      EXPECT_EQ(row(b.inputs, i), in);
      EXPECT_EQ(row(b.labels, i), lab);
    }
  }
}

TEST(DataLoader, RanksGetDisjointDocumentsThatCoverTheData) {
  TempDir dir;
  const std::string path = make_corpus(dir);
  const auto docs = documents(path);
  const int64_t world = 3, S = 7;
  std::multiset<int64_t> seen_windows;
  for (int64_t rank = 0; rank < world; ++rank) {
    std::vector<std::string> mine;
    for (size_t k = rank; k < docs.size(); k += world) mine.push_back(docs[k]);
    const auto stream = byte_stream(mine);
    DataLoader dl(bytes(), {path, 2, S, rank, world});
    const int64_t windows = static_cast<int64_t>(stream.size()) / (S + 1);
    for (int64_t w = 0; w + 1 < windows; w += 2) {  // stay inside the first epoch
      Batch b = dl.next();
      for (int64_t i = 0; i < 2; ++i) {
        std::vector<int64_t> in(stream.begin() + (w + i) * (S + 1), stream.begin() + (w + i) * (S + 1) + S);
        EXPECT_EQ(row(b.inputs, i), in) << "rank " << rank << " window " << w + i;
      }
    }
    EXPECT_EQ(dl.epoch(), 0);
  }
}

TEST(DataLoader, RestoringMidEpochAndAcrossEpochsGivesTheSameBatches) {
  TempDir dir;
  const std::string path = make_corpus(dir);
  for (int64_t rank : {0, 1}) {
    DataLoader a(bytes(), {path, 2, 9, rank, 2});
    std::vector<nlohmann::json> states;
    std::vector<Batch> batches;
    for (int i = 0; i < 12; ++i) {  // several epochs: ~11 docs of ~15 bytes, 10 tokens a window
      states.push_back(nlohmann::json::parse(a.state_dict().dump()));  // through text, as a checkpoint would
      batches.push_back(a.next());
    }
    EXPECT_GE(a.epoch(), 2) << "the test should cross epoch boundaries";
    for (int from : {0, 3, 7, 11}) {
      DataLoader b(bytes(), {path, 2, 9, rank, 2});
      b.load_state_dict(states[from]);
      for (int i = from; i < 12; ++i) {
        Batch got = b.next();
        ASSERT_TRUE(at::equal(got.inputs, batches[i].inputs)) << "rank " << rank << " from " << from << " batch " << i;
        ASSERT_TRUE(at::equal(got.labels, batches[i].labels));
      }
      EXPECT_EQ(b.epoch(), a.epoch());
    }
  }
}

TEST(DataLoader, RestoreChecksRankSeqLenAndDataset) {
  TempDir dir;
  const std::string path = make_corpus(dir);
  DataLoader a(bytes(), {path, 1, 8, 0, 2});
  a.next();
  const nlohmann::json s = a.state_dict();
  std::string m = error_of([&] { DataLoader(bytes(), {path, 1, 8, 1, 2}).load_state_dict(s); });
  EXPECT_NE(m.find("rank 0 of 2"), std::string::npos) << m;
  m = error_of([&] { DataLoader(bytes(), {path, 1, 9, 0, 2}).load_state_dict(s); });
  EXPECT_NE(m.find("seq_len 8"), std::string::npos) << m;
  write_file(dir / "one.txt", "x");
  m = error_of([&] { DataLoader(bytes(), {dir / "one.txt", 1, 8, 0, 2}).load_state_dict(s); });
  EXPECT_NE(m.find("files"), std::string::npos) << m;
  m = error_of([&] { DataLoader(bytes(), {path, 1, 8, 0, 2}).load_state_dict(nlohmann::json{{"epoch", 1}}); });
  EXPECT_NE(m.find("has no"), std::string::npos) << m;
}

TEST(DataLoader, BadDatasetsAndOptionsGiveOneLineErrors) {
  TempDir dir;
  titan::files::make_directories(dir / "empty");
  std::string m = error_of([&] { DataLoader(bytes(), {dir / "empty", 1, 8}); });
  EXPECT_NE(m.find("holds no dataset files"), std::string::npos) << m;

  write_file(dir / "blank.txt", "  \n%\n\n");
  m = error_of([&] { DataLoader(bytes(), {dir / "blank.txt", 1, 8}).next(); });
  EXPECT_NE(m.find("is empty"), std::string::npos) << m;

  write_file(dir / "tiny.txt", "abc");  // BOS a b c EOS: 5 tokens
  m = error_of([&] { DataLoader(bytes(), {dir / "tiny.txt", 1, 8}).next(); });
  EXPECT_NE(m.find("too small"), std::string::npos) << m;
  EXPECT_NE(m.find("5 tokens"), std::string::npos) << m;
  EXPECT_NO_THROW(DataLoader(bytes(), {dir / "tiny.txt", 1, 4}).next());  // exactly one window

  write_file(dir / "two.txt", "a\n%\nb\n");
  m = error_of([&] { DataLoader(bytes(), {dir / "two.txt", 1, 2, 2, 3}).next(); });
  EXPECT_NE(m.find("none for this rank"), std::string::npos) << m;

  m = error_of([&] { DataLoader(bytes(), {dir / "tiny.txt", 1, 0}); });
  EXPECT_NE(m.find("seq_len must be positive"), std::string::npos) << m;
  m = error_of([&] { DataLoader(bytes(), {dir / "nothing_here", 1, 8}); });
  EXPECT_NE(m.find("does not exist"), std::string::npos) << m;
  m = error_of([&] { DataLoader(bytes(), {"c4", 1, 8}); });
  EXPECT_NE(m.find("titan downloads nothing"), std::string::npos) << m;
  m = error_of([&] { DataLoader(bytes(), {dir / "tiny.txt", 1, 8, 2, 2}); });
  EXPECT_NE(m.find("rank 2"), std::string::npos) << m;
}

TEST(DataLoader, BuiltinCorpusWithTheBuiltinTokenizer) {
  try {
    builtin_corpus_dir();
  } catch (const titan::Error&) {
    GTEST_SKIP() << "no fortunes corpus";
  }
  TempDir cache;
  ::setenv("TITAN_CACHE_DIR", cache.path().c_str(), 1);
  auto tok = load_tokenizer("");
  check_vocab_fits(*tok, 2048);
  DataLoader dl(tok, {"", 8, 256});
  auto start = std::chrono::steady_clock::now();
  int64_t tokens = 0;
  for (int i = 0; i < 50; ++i) {
    Batch b = dl.next();
    ASSERT_LT(b.inputs.max().item<int64_t>(), tok->vocab_size());
    ASSERT_GE(b.inputs.min().item<int64_t>(), 0);
    tokens += b.inputs.numel();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("built-in corpus loader: %.0f tokens/s (batch 8 x 256)\n", tokens / secs);
  EXPECT_EQ(dl.dataset_path(), builtin_corpus_dir());
}

// Document masking (attn_mask_type = "block_causal"): every batch carries
// doc_start — worked out here by walking each window for its last BOS — and
// a target that is the next document's BOS is -100, every other target as
// without masking; the inputs stay those without masking. Also with one
// sequence per batch, where the inputs and labels once were views of one
// window, so hiding a target overwrote the next input with -100.
TEST(DataLoader, DocumentMaskingCarriesStartsAndHidesTheBoundaryTarget) {
  TempDir dir;
  const std::string path = make_corpus(dir);
  const int64_t S = 24;
  for (const int64_t B : {3, 1}) {
    DataLoaderOptions plain_opts{path, B, S};
    DataLoaderOptions masked_opts = plain_opts;
    masked_opts.document_masking = true;
    DataLoader plain(bytes(), plain_opts), masked(bytes(), masked_opts);
    const int64_t bos = bytes()->bos_id();
    int64_t hidden = 0, boundaries = 0;
    for (int step = 0; step < 12 / B; ++step) {
      const Batch p = plain.next(), m = masked.next();
      EXPECT_FALSE(p.doc_start.defined());
      ASSERT_TRUE(m.doc_start.defined());
      EXPECT_TRUE(at::equal(p.inputs, m.inputs)) << "batch of " << B;
      for (int64_t i = 0; i < B; ++i) {
        const std::vector<int64_t> in = row(m.inputs, i), starts = row(m.doc_start, i), lab = row(m.labels, i),
                                   plain_lab = row(p.labels, i);
        int64_t last_bos = 0;
        for (int64_t t = 0; t < S; ++t) {
          if (in[t] == bos) last_bos = t, ++boundaries;
          EXPECT_EQ(starts[t], last_bos) << "row " << i << " position " << t;
          const bool crosses = plain_lab[t] == bos;
          EXPECT_EQ(lab[t], crosses ? -100 : plain_lab[t]) << "row " << i << " position " << t;
          hidden += crosses;
        }
      }
    }
    std::printf("document masking, batches of %lld: %lld document starts seen, %lld boundary targets hidden\n",
                static_cast<long long>(B), static_cast<long long>(boundaries), static_cast<long long>(hidden));
    EXPECT_GT(boundaries, 0);
    EXPECT_GT(hidden, 0);
  }
}
