// Dataset files as torchtitan users have them: the c4 names resolved to
// dataset_path, folders mixing JSON Lines, JSON arrays, text and their
// gzip forms (allenai/c4 ships .json.gz), exact resume over such a folder,
// and one clear line for each kind of bad file. Every fixture is written
// here; the expected documents are the strings the test wrote.
#include <gtest/gtest.h>
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include <cstdio>
#include <string>
#include <vector>

#include "data_test_util.hpp"
#include "titan/data/byte_tokenizer.hpp"
#include "titan/data/dataloader.hpp"
#include "titan/data/documents.hpp"
#include "titan/util/error.hpp"

using namespace titan::data;
using titan::testing::TempDir;
using titan::testing::error_of;
using titan::testing::byte_stream;
using titan::testing::bytes;
using titan::testing::documents;
using titan::testing::write_file;

namespace {

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "missing: " << (part) << "\n" << (text)

std::string gzip(const std::string& text) {
  uLongf n = compressBound(static_cast<uLong>(text.size())) + 32;
  std::string out(n, '\0');
  z_stream s{};
  // windowBits 15 + 16: a gzip header and trailer, as gzip(1) writes.
  EXPECT_EQ(deflateInit2(&s, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  s.avail_in = static_cast<uInt>(text.size());
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&s, Z_FINISH), Z_STREAM_END);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

// c4's record layout: text, timestamp, url (torchtitan's c4_test has the same fields).
std::string c4_line(const std::string& text) {
  return nlohmann::json{{"text", text}, {"timestamp", "2019-04-25T12:57:54Z"}, {"url", "https://example.com/x"}}
             .dump() +
         "\n";
}

std::string json_array(const std::vector<std::string>& texts) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& t : texts) a.push_back({{"text", t}, {"id", a.size()}});
  return a.dump(2);  // pretty-printed: an array spans many lines
}




// A folder mixing every format; sorted path order is the reading order.
// Returns the folder; `want` gets its documents in order.
std::string mixed_folder(const TempDir& dir, std::vector<std::string>& want) {
  write_file(dir / "m/a.jsonl", c4_line("plain jsonl one") + "\n" + c4_line("plain jsonl two"));
  write_file(dir / "m/b.json", json_array({"array one", "array\ntwo", "array three"}));
  write_file(dir / "m/c.json.gz", gzip(c4_line("gz lines one") + c4_line("gz lines two") + c4_line("gz lines three")));
  write_file(dir / "m/d.txt.gz", gzip("fortune one\n%\nfortune two\nline two\n%\n"));
  write_file(dir / "m/e.json.gz", gzip(json_array({"gz array one", "gz array two"})));
  write_file(dir / "m/f.jsonl.gz", gzip(c4_line("gz jsonl one")));
  write_file(dir / "m/g.json", c4_line("json lines in a .json") + c4_line("second"));  // c4_test's data.json kind
  write_file(dir / "m/h.gz", gzip("no format extension under the .gz: left out"));
  want = {"plain jsonl one", "plain jsonl two", "array one", "array\ntwo",    "array three",
          "gz lines one",    "gz lines two",    "gz lines three", "fortune one", "fortune two\nline two",
          "gz array one",    "gz array two",    "gz jsonl one",   "json lines in a .json", "second"};
  return dir / "m";
}

}  // namespace

TEST(DatasetNames, TorchtitanNamesReadTheFilesAtDatasetPath) {
  TempDir dir;
  // torchtitan's test dataset layout: a folder c4_test/ holding JSON Lines
  // named data.json, each record with "text" (and c4's other fields).
  std::vector<std::string> texts;
  std::string body;
  for (int i = 0; i < 6; ++i) {
    texts.push_back("c4 style document number " + std::to_string(i) + ", with \"quotes\" and a \\ backslash");
    body += c4_line(texts.back());
  }
  write_file(dir / "c4_test/data.json", body);
  for (const char* name : {"c4_test", "c4", "c4_validation"}) {
    EXPECT_EQ(resolve_dataset_path(name, dir / "c4_test"), dir / "c4_test");
    const std::string m = error_of([&] { resolve_dataset_path(name); });
    EXPECT_HAS(m, "titan downloads nothing");
    EXPECT_HAS(m, "dataset_path");
  }
  EXPECT_EQ(resolve_dataset_path("", dir / "c4_test"), dir / "c4_test");  // dataset_path alone is enough
  EXPECT_HAS(error_of([&] { resolve_dataset_path(dir / "other", dir / "c4_test"); }), "both [training] dataset");
  EXPECT_HAS(error_of([&] { resolve_dataset_path("c4_test", dir / "missing"); }), "dataset_path '" + dir / "missing");

  DataLoaderOptions o;
  o.dataset = "c4_test";
  o.dataset_path = dir / "c4_test";
  o.batch_size = 2;
  o.seq_len = 31;
  DataLoader dl(bytes(), o);
  const auto stream = byte_stream(texts);
  for (int step = 0; step < 3; ++step) {
    Batch b = dl.next();
    for (int64_t i = 0; i < 2; ++i) {
      const int64_t w = (step * 2 + i) * 32;
      at::Tensor row = b.inputs[i].contiguous();
      std::vector<int64_t> got(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + 31);
      EXPECT_EQ(got, std::vector<int64_t>(stream.begin() + w, stream.begin() + w + 31)) << "window " << step * 2 + i;
    }
  }
}

// A clone of allenai/c4 keeps variants in subfolders and both splits side
// by side: "c4" reads en/c4-train.*, "c4_validation" en/c4-validation.*,
// as torchtitan's load_dataset(path, name="en", split=...) does.
TEST(DatasetNames, C4CloneReadsTheEnglishSplitByName) {
  TempDir dir;
  write_file(dir / "c4/en/c4-train.00000-of-01024.json.gz", gzip(c4_line("train a") + c4_line("train b")));
  write_file(dir / "c4/en/c4-train.00001-of-01024.json.gz", gzip(c4_line("train c")));
  write_file(dir / "c4/en/c4-validation.00000-of-00008.json.gz", gzip(c4_line("validation a")));
  write_file(dir / "c4/realnewslike/c4-train.00000-of-00512.json.gz", gzip(c4_line("another variant")));
  auto read = [&](const std::string& name) {
    const std::string path = resolve_dataset_path(name, dir / "c4");
    DocumentReader r(list_dataset_files(path, dataset_split_prefix(name)));
    std::vector<std::string> out;
    std::string t;
    while (r.next(t)) out.push_back(t);
    return out;
  };
  EXPECT_EQ(read("c4"), (std::vector<std::string>{"train a", "train b", "train c"}));
  EXPECT_EQ(read("c4_validation"), (std::vector<std::string>{"validation a"}));
  // c4_test is torchtitan's small folder: every file in it, whatever the names.
  EXPECT_EQ(read("c4_test").size(), 5u);
}

TEST(DatasetFiles, MixedFolderOfJsonArraysTextAndGzip) {
  TempDir dir;
  std::vector<std::string> want;
  EXPECT_EQ(documents(mixed_folder(dir, want)), want);
  EXPECT_EQ(documents(dir / "m/e.json.gz"), (std::vector<std::string>{"gz array one", "gz array two"}));
}

// A long gzip member read from the middle: the resume position counts
// uncompressed bytes, so seeking there decompresses up to it.
TEST(DatasetFiles, ResumeInsideALargeGzipFile) {
  TempDir dir;
  std::string body;
  std::vector<std::string> texts;
  for (int i = 0; i < 3000; ++i) {  // ~300 KB: more than one 256 KiB read
    texts.push_back("document " + std::to_string(i) + std::string(40 + i % 50, 'x'));
    body += c4_line(texts.back());
  }
  write_file(dir / "big.jsonl.gz", gzip(body));
  DocumentReader r(list_dataset_files(dir / "big.jsonl.gz"));
  std::string t;
  for (int i = 0; i < 2500; ++i) ASSERT_TRUE(r.next(t, i % 3 != 0));
  const DocumentPosition p = r.position();
  DocumentReader again(list_dataset_files(dir / "big.jsonl.gz"));
  again.seek(p);
  std::vector<std::string> rest;
  while (again.next(t)) rest.push_back(t);
  EXPECT_EQ(rest, std::vector<std::string>(texts.begin() + 2500, texts.end()));
  EXPECT_EQ(p.line, 2501);
}

TEST(DatasetFiles, RestoringOverAMixedFolderGivesTheSameBatches) {
  TempDir dir;
  std::vector<std::string> want;
  const std::string path = mixed_folder(dir, want);
  for (int64_t rank : {0, 1}) {
    DataLoader a(bytes(), {path, 2, 11, rank, 2});
    std::vector<nlohmann::json> states;
    std::vector<Batch> batches;
    for (int i = 0; i < 14; ++i) {  // ~15 docs of ~14 bytes: crosses two epochs per rank
      states.push_back(nlohmann::json::parse(a.state_dict().dump()));
      batches.push_back(a.next());
    }
    EXPECT_GE(a.epoch(), 2) << "the test should cross epoch boundaries";
    for (int from = 0; from < 14; from += 3) {  // positions in arrays, gzip, text and plain files alike
      DataLoader b(bytes(), {path, 2, 11, rank, 2});
      b.load_state_dict(states[from]);
      for (int i = from; i < 14; ++i) {
        Batch got = b.next();
        ASSERT_TRUE(at::equal(got.inputs, batches[i].inputs)) << "rank " << rank << " from " << from << " batch " << i;
        ASSERT_TRUE(at::equal(got.labels, batches[i].labels));
      }
    }
  }
}

TEST(DatasetFiles, BadFilesNameTheFileAndWhere) {
  TempDir dir;
  std::string body;
  for (int i = 0; i < 400; ++i) body += c4_line("a document that compresses poorly " + std::to_string(i * 7919));
  const std::string gz = gzip(body);
  write_file(dir / "cut.jsonl.gz", gz.substr(0, gz.size() / 2));  // an interrupted download
  std::string m = error_of([&] { documents(dir / "cut.jsonl.gz"); });
  EXPECT_HAS(m, "cut.jsonl.gz:");
  EXPECT_HAS(m, "the gzip data ends early");
  write_file(dir / "cut2.json.gz", gz.substr(0, gz.size() - 4));  // only the trailer's length is missing
  EXPECT_HAS(error_of([&] { documents(dir / "cut2.json.gz"); }), "cut2.json.gz:401: the gzip data ends early");

  write_file(dir / "fake.jsonl.gz", c4_line("plain text under a .gz name"));
  EXPECT_HAS(error_of([&] { documents(dir / "fake.jsonl.gz"); }), "fake.jsonl.gz: not a gzip file");

  write_file(dir / "notext.json", "[{\"text\": \"ok\"}, {\"content\": \"no text\"}]");
  EXPECT_HAS(error_of([&] { documents(dir / "notext.json"); }),
             "notext.json: record 2: expected a JSON object with a string field \"text\"");
  write_file(dir / "broken.json", "[{\"text\": \"ok\"},\n {\"text\": oops}]");
  m = error_of([&] { documents(dir / "broken.json"); });
  EXPECT_HAS(m, "broken.json: not a valid JSON array");
  EXPECT_HAS(m, "line 2");
  write_file(dir / "badline.jsonl.gz", gzip(c4_line("fine") + "{\"text\": \n"));
  EXPECT_HAS(error_of([&] { documents(dir / "badline.jsonl.gz"); }), "badline.jsonl.gz:2: not a JSON object");

  write_file(dir / "pq/train-00000.parquet", "PAR1");
  write_file(dir / "pq/readme.txt", "a readme");
  for (const std::string p : {dir / "pq/train-00000.parquet", dir / "pq"}) {
    m = error_of([&] { list_dataset_files(p); });
    EXPECT_HAS(m, "train-00000.parquet: titan reads no Parquet");
    EXPECT_HAS(m, "pq.read_table");
  }
  // One line each, so that the trainer prints them as one.
  for (const std::string& file : {"cut.jsonl.gz", "cut2.json.gz", "fake.jsonl.gz", "notext.json", "broken.json"}) {
    m = error_of([&] { documents(dir / file); });
    std::printf("%s -> %s\n", file.c_str(), m.c_str());
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}
