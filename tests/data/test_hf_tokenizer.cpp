// The Hugging Face tokenizer.json reader against the Python `tokenizers`
// package: tests/reference/hf_tokenizer_reference.py trains byte-level BPEs
// of a few sizes and layouts (GPT-2's ByteLevel, Llama 3's Split +
// ByteLevel, with added and special tokens), loads them as torchtitan does
// and writes the ids and decodes of a battery of strings; titan must agree
// on every one. Also: a tiktoken file and its tokenizer.json form give the
// same ids, GPT-2's pre-tokenizer by hand, the byte-level table, the ways
// load_tokenizer finds a tokenizer, and every way a tokenizer.json is refused.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "data_test_util.hpp"
#include "support/run_command.hpp"
#include "titan/data/builtin_tokenizer.hpp"
#include "titan/data/byte_level.hpp"
#include "titan/util/files.hpp"
#include "titan/data/hf_tokenizer.hpp"
#include "titan/data/pretokenize.hpp"
#include "titan/data/tiktoken_tokenizer.hpp"
#include "titan/util/error.hpp"

using namespace titan;
using namespace titan::data;
using nlohmann::json;
using titan::testing::TempDir;
using titan::testing::error_of;

namespace {

#define SKIP_WITHOUT_PYTHON() \
  if (titan::testing::ctest_python().empty()) GTEST_SKIP() << "TITAN_PYTHON is not set (run through ctest)"

std::vector<std::string> split_gpt2(const std::string& text) {
  std::vector<std::string> out;
  pretokenize_gpt2(text, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

std::string hex(const std::string& bytes) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) out += d[c >> 4], out += d[c & 15];
  return out;
}

std::string ids_text(const std::vector<int64_t>& ids) { return json(ids).dump(); }

// Trains (or converts) a tokenizer with the reference and writes what the
// package and torchtitan make of the battery; returns that.
json make_fixture(const TempDir& dir, const std::string& make_args, const std::string& folder) {
  const std::string sample = dir / "sample.txt";
  if (!titan::testing::run_reference("sample-text " + titan::testing::quote(sample))) return json();
  if (!titan::testing::run_reference(make_args, "hf_tokenizer_reference.py")) return json();
  const std::string expect = dir / (folder + ".expect.json");
  if (!titan::testing::run_reference("expect " + titan::testing::quote(dir / folder) + " " + titan::testing::quote(expect),
                                     "hf_tokenizer_reference.py"))
    return json();
  return json::parse(titan::testing::read_file(expect));
}

// Every encoding and decoding of the battery against the reference; prints
// how many differed and the first few differences.
void expect_parity(const Tokenizer& tok, const json& want, const std::string& name) {
  ASSERT_TRUE(want.is_object()) << "no reference output";
  int encodings = 0, encode_diffs = 0, decodes = 0, decode_diffs = 0, cuts = 0, cut_diffs = 0;
  std::vector<std::string> shown;
  auto note = [&](const std::string& what) {
    if (shown.size() < 8) shown.push_back(what);
  };
  for (const auto& c : want["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const std::string label = json(text).dump().substr(0, 70);
    struct Mode {
      const char* key;
      std::vector<int64_t> got;
    } modes[] = {{"special", tok.encode(text, false, false, /*allow_special=*/true)},
                 {"plain", tok.encode(text)},
                 {"document", tok.encode(text, /*bos=*/true, /*eos=*/true, /*allow_special=*/true)}};
    for (const Mode& m : modes) {
      const auto expected = c[m.key].get<std::vector<int64_t>>();
      ++encodings;
      if (m.got != expected) {
        ++encode_diffs;
        note(std::string(m.key) + " " + label + ": titan " + ids_text(m.got) + " vs tokenizers " + ids_text(expected));
      }
    }
    for (const char* key : {"special", "plain"}) {
      // As bytes: titan decodes to bytes, the package to their UTF-8 reading
      // (the reference checks the two agree).
      const std::string got = hex(tok.decode(c[key].get<std::vector<int64_t>>()));
      const std::string expected = c[std::string("decoded") + (key[0] == 'p' ? "_plain" : "") + "_hex"].get<std::string>();
      ++decodes;
      if (got != expected) {
        ++decode_diffs;
        note(std::string("decode ") + key + " " + label + ": titan " + got.substr(0, 60) + " vs " + expected.substr(0, 60));
      }
    }
  }
  for (const auto& c : want["cuts"]) {
    const std::string got = hex(tok.decode(c["ids"].get<std::vector<int64_t>>()));
    ++cuts;
    if (got != c["hex"].get<std::string>()) {
      ++cut_diffs;
      note("cut decode " + c["ids"].dump() + ": titan " + got + " vs " + c["hex"].get<std::string>());
    }
  }
  std::printf("[hf parity] %s: %d encodings, %d differ; %d decodes, %d differ; %d decodes cutting characters, %d differ\n",
              name.c_str(), encodings, encode_diffs, decodes, decode_diffs, cuts, cut_diffs);
  for (const std::string& s : shown) std::printf("  %s\n", s.c_str());
  EXPECT_GT(encodings, 300);
  EXPECT_GT(cuts, 20);
  EXPECT_EQ(encode_diffs, 0);
  EXPECT_EQ(decode_diffs, 0);
  EXPECT_EQ(cut_diffs, 0);
}

// Vocabulary size, BOS/EOS and the ids of added tokens.
void expect_same_ids(const HfTokenizer& tok, const json& want) {
  EXPECT_EQ(tok.vocab_size(), want["max_id"].get<int64_t>() + 1);
  EXPECT_EQ(tok.bos_id(), want["bos_id"].is_null() ? -1 : want["bos_id"].get<int64_t>());
  EXPECT_EQ(tok.eos_id(), want["eos_id"].is_null() ? -1 : want["eos_id"].get<int64_t>());
  EXPECT_EQ(tok.num_added_tokens(), want["added"].size());
  for (const auto& [content, id] : want["added"].items()) EXPECT_EQ(tok.token_to_id(content), id.get<int64_t>()) << content;
}

// The small valid tokenizer.json the hand-made cases start from.
json small_tokenizer_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_text(std::string(1, static_cast<char>(b)))] = b;
  vocab["ab"] = 256;
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({json::array({"a", "b"})})}}}};
}

struct Kind {
  const char* kind;
  int vocab;
};

}  // namespace

TEST(ByteLevel, GptTwoTableRoundTrips) {
  EXPECT_EQ(byte_level_char('!'), uint32_t('!'));
  EXPECT_EQ(byte_level_char(' '), 0x120u);   // "Ġ"
  EXPECT_EQ(byte_level_char('\n'), 0x10Au);  // "Ċ"
  EXPECT_EQ(byte_level_char(0x00), 0x100u);
  EXPECT_EQ(byte_level_char(0x7F), 0x121u);
  EXPECT_EQ(byte_level_char(0xAD), 0x143u);  // soft hyphen: the last of the 68 unprintable bytes
  EXPECT_EQ(byte_level_char(0xFF), 0xFFu);
  EXPECT_EQ(byte_level_text("a b\n"), "a\xc4\xa0" "b\xc4\x8a");
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  EXPECT_EQ(byte_level_bytes(byte_level_text(all)), all);
  EXPECT_FALSE(byte_level_bytes(" ").has_value());          // a space is written "Ġ"
  EXPECT_FALSE(byte_level_bytes("\xe2\x96\x81").has_value());  // "▁" (SentencePiece), not byte-level
  EXPECT_FALSE(byte_level_bytes("\xff").has_value());       // not UTF-8 at all
}

TEST(Pretokenize, SplitsLikeTheGptTwoPattern) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split_gpt2("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split_gpt2("1234567 x"), (V{"1234567", " x"}));  // no 3-digit groups
  EXPECT_EQ(split_gpt2("I'll they're IT'S"), (V{"I", "'ll", " they", "'re", " IT", "'", "S"}));  // case-sensitive
  EXPECT_EQ(split_gpt2("  x"), (V{" ", " x"}));
  EXPECT_EQ(split_gpt2("a\n\nb"), (V{"a", "\n", "\n", "b"}));  // no newline alternative: \s+(?!\S) then \s+
  EXPECT_EQ(split_gpt2("a \n b"), (V{"a", " \n", " b"}));
  EXPECT_EQ(split_gpt2("x   "), (V{"x", "   "}));
  EXPECT_EQ(split_gpt2("(hi)!"), (V{"(", "hi", ")!"}));
  EXPECT_EQ(split_gpt2(" !? a"), (V{" !?", " a"}));
  EXPECT_EQ(split_gpt2("Привет, мир"), (V{"Привет", ",", " мир"}));
  EXPECT_EQ(split_gpt2(""), V{});
  std::string joined;
  const std::string odd = std::string("ok \xff\xfe bad \xe2\x82 cut") + '\0' + "\xf0\x9f\x98\x80";
  for (const auto& p : split_gpt2(odd)) joined += p;
  EXPECT_EQ(joined, odd);
}

TEST(HfTokenizer, MatchesTheTokenizersPackage) {
  SKIP_WITHOUT_PYTHON();
  for (const Kind k : {Kind{"gpt2", 300}, Kind{"gpt2", 1200}, Kind{"gpt2-prefix", 600}, Kind{"llama3", 700},
                      Kind{"llama3-prefix", 400}}) {
    SCOPED_TRACE(std::string(k.kind) + " " + std::to_string(k.vocab));
    TempDir dir;
    const std::string folder = k.kind;
    const json want = make_fixture(dir,
                                   std::string("make ") + k.kind + " " + titan::testing::quote(dir / "sample.txt") + " " +
                                       std::to_string(k.vocab) + " " + titan::testing::quote(dir / folder),
                                   folder);
    ASSERT_FALSE(want.is_null());
    auto tok = HfTokenizer::load(dir / folder + "/tokenizer.json", dir / folder + "/tokenizer_config.json");
    expect_same_ids(*tok, want);
    expect_parity(*tok, want, std::string(k.kind) + " " + std::to_string(k.vocab) + " (" + tok->describe() + ")");
  }
}

// Vocabularies with holes (no token for ' ' or 'e'): the package drops such
// a byte, so its neighbours merge as if adjacent, or writes its unk_token,
// one per byte or, with fuse_unk, one per run. Every case of the battery
// must give the package's ids.
TEST(HfTokenizer, VocabularyWithByteHolesEncodesAsTheTokenizersPackage) {
  SKIP_WITHOUT_PYTHON();
  for (const char* kind : {"holes", "holes-unk", "holes-unk-fused"}) {
    SCOPED_TRACE(kind);
    TempDir dir;
    const json want = make_fixture(
        dir, std::string("make ") + kind + " " + titan::testing::quote(dir / "sample.txt") + " 400 " +
                 titan::testing::quote(dir / kind),
        kind);
    ASSERT_FALSE(want.is_null());
    auto tok = HfTokenizer::load(dir / kind + "/tokenizer.json", dir / kind + "/tokenizer_config.json");
    expect_same_ids(*tok, want);
    expect_parity(*tok, want, std::string(kind) + " 400 (" + tok->describe() + ")");
  }
}

TEST(HfTokenizer, SameIdsAsTheTiktokenFormOfTheSameVocabulary) {
  SKIP_WITHOUT_PYTHON();
  TempDir dir;
  const std::string ranks = dir / "ranks.tiktoken";
  ASSERT_TRUE(titan::testing::run_reference("sample-text " + titan::testing::quote(dir / "sample.txt")));
  ASSERT_TRUE(titan::testing::run_reference("train " + titan::testing::quote(dir / "sample.txt") + " 700 " +
                                            titan::testing::quote(ranks)));
  const json want = make_fixture(dir, "convert " + titan::testing::quote(ranks) + " " + titan::testing::quote(dir / "hf"), "hf");
  ASSERT_FALSE(want.is_null());
  auto tiktoken = TiktokenTokenizer::load(ranks);
  auto hf = load_tokenizer(dir / "hf");  // the folder, as hf_assets_path names it
  EXPECT_NE(hf->describe().find("Hugging Face BPE"), std::string::npos) << hf->describe();
  expect_same_ids(dynamic_cast<const HfTokenizer&>(*hf), want);
  expect_parity(*hf, want, "tiktoken file converted by transformers");

  EXPECT_EQ(hf->vocab_size(), tiktoken->vocab_size());
  EXPECT_EQ(hf->bos_id(), tiktoken->bos_id());
  EXPECT_EQ(hf->eos_id(), tiktoken->eos_id());
  int checked = 0, differ = 0;
  std::vector<std::string> texts;
  for (const auto& c : want["cases"]) texts.push_back(c["text"].get<std::string>());
  // Bytes no Python string holds: both forms see them as the same "other" characters.
  texts.push_back("bad \xff\xfe bytes \xe2\x82 and \xc0\x80 overlong, \xed\xa0\x80 surrogate");
  for (const std::string& t : texts) {
    for (bool special : {false, true}) {
      const auto a = tiktoken->encode(t, true, true, special), b = hf->encode(t, true, true, special);
      ++checked;
      if (a != b) {
        ++differ;
        ADD_FAILURE() << json(t).dump().substr(0, 60) << ": tiktoken " << ids_text(a) << " vs tokenizer.json " << ids_text(b);
      }
      EXPECT_EQ(hf->decode(b), tiktoken->decode(a));
    }
  }
  std::printf("[hf parity] tiktoken vs tokenizer.json forms: %d encodings, %d differ\n", checked, differ);
  const std::string invalid = texts.back();
  EXPECT_EQ(hf->decode(hf->encode(invalid)), invalid);
}

TEST(HfTokenizer, LoadTokenizerFindsEveryForm) {
  TempDir dir;
  // A tiny byte-level BPE written by hand: all 256 bytes, one merge, one added token.
  json tj = small_tokenizer_json();
  tj["added_tokens"] = json::array({{{"id", 257}, {"content", "<|eos|>"}, {"special", true}, {"normalized", false}}});
  titan::testing::write_file(dir / "assets/tokenizer.json", tj.dump());
  titan::testing::write_file(dir / "assets/tokenizer_config.json", R"({"eos_token": "<|eos|>", "bos_token": "<|bos|>"})");
  auto tok = load_tokenizer(dir / "assets");
  EXPECT_EQ(tok->vocab_size(), 259);  // <|bos|> is new: after the vocabulary and <|eos|>
  EXPECT_EQ(tok->bos_id(), 258);
  EXPECT_EQ(tok->eos_id(), 257);
  EXPECT_EQ(tok->encode("abc", true, true), (std::vector<int64_t>{258, 256, 'c', 257}));
  EXPECT_EQ(tok->encode("ab<|eos|>", false, false, true), (std::vector<int64_t>{256, 257}));
  EXPECT_EQ(tok->encode("<|eos|>").size(), 7u);  // without allow_special: text
  // The file itself, under any name: its tokenizer_config.json comes along.
  titan::testing::write_file(dir / "assets/renamed.txt", tj.dump(1));
  EXPECT_EQ(load_tokenizer(dir / "assets/renamed.txt")->bos_id(), 258);
  // No tokenizer_config.json: no BOS or EOS, as torchtitan.
  titan::testing::write_file(dir / "bare/tokenizer.json", tj.dump());
  auto bare = load_tokenizer(dir / "bare/tokenizer.json");
  EXPECT_EQ(bare->bos_id(), -1);
  EXPECT_EQ(bare->encode("ab", true, true), (std::vector<int64_t>{256}));
  EXPECT_NE(bare->describe().find("no BOS/EOS"), std::string::npos) << bare->describe();
  EXPECT_NE(error_of([&] { bare->decode({300}); }).find("outside the vocabulary"), std::string::npos);

  // A folder with only the tiktoken form; a folder with neither.
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  titan::testing::write_file(dir / "tt/original/README", "Meta's layout\n");
  write_tiktoken_file(dir / "tt/original/tokenizer.model", bytes);
  auto tt = load_tokenizer(dir / "tt");
  EXPECT_NE(tt->describe().find("tiktoken"), std::string::npos) << tt->describe();
  EXPECT_EQ(tt->vocab_size(), 512);
  titan::testing::write_file(dir / "empty/README", "nothing here\n");
  const std::string m = error_of([&] { load_tokenizer(dir / "empty"); });
  EXPECT_NE(m.find("neither tokenizer.json nor original/tokenizer.model"), std::string::npos) << m;
}

TEST(HfTokenizer, BadFilesGiveOneLineErrorsNamingTheFile) {
  TempDir dir;
  int n = 0;
  // Writes `text` as a tokenizer.json of its own folder and loads it the
  // way titan train does; returns the error.
  auto load_error = [&](const std::string& text, const std::string& config = "") {
    const std::string folder = dir / ("case" + std::to_string(n++));
    titan::testing::write_file(folder + "/tokenizer.json", text);
    if (!config.empty()) titan::testing::write_file(folder + "/tokenizer_config.json", config);
    const std::string msg = error_of([&] { load_tokenizer(folder); });
    EXPECT_FALSE(msg.empty()) << "no error for: " << text.substr(0, 200);
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find(folder), std::string::npos) << "does not name the file: " << msg;
    return msg;
  };
  auto with = [](const std::function<void(json&)>& change) {
    json j = small_tokenizer_json();
    change(j);
    return j.dump();
  };
  EXPECT_NO_THROW(load_tokenizer((titan::testing::write_file(dir / "good/tokenizer.json", with([](json&) {})),
                                  dir / "good")));
#define EXPECT_ERROR(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)
  const std::string full = with([](json&) {});
  EXPECT_ERROR(load_error(full.substr(0, full.size() / 2)), "not valid JSON");
  EXPECT_ERROR(load_error("[1, 2]"), "is a JSON object");
  EXPECT_ERROR(load_error(with([](json& j) { j.erase("model"); })), "no \"model\"");
  EXPECT_ERROR(load_error(with([](json& j) { j["model"]["type"] = "WordPiece"; })), "type 'WordPiece' is not supported");
  EXPECT_ERROR(load_error(with([](json& j) { j["model"].erase("type"); })), "has no \"type\"");
  EXPECT_ERROR(load_error(with([](json& j) { j["model"].erase("vocab"); })), "no \"vocab\"");
  EXPECT_ERROR(load_error(with([](json& j) { j["model"]["merges"] = json::array({"a zz"}); })),
               "references token 'zz', which is not in the vocabulary");
  EXPECT_ERROR(load_error(with([](json& j) { j["model"]["merges"] = json::array({json::array({"b", "c"})}); })),
               "the merged token 'bc'");
  EXPECT_ERROR(load_error(with([](json& j) { j["model"]["merges"] = json::array({"abc"}); })),
               "not two tokens separated by one space");
  EXPECT_ERROR(load_error(with([](json& j) { j["model"]["merges"] = json::array({7}); })), "must be \"a b\"");
  // A vocabulary without the space byte loads (the package drops the byte,
  // HfTokenizer.VocabularyWithByteHolesEncodesAsTheTokenizersPackage); an
  // unk_token it does not hold, or byte_fallback, is refused.
  EXPECT_NO_THROW(load_tokenizer((titan::testing::write_file(
                                      dir / "holes/tokenizer.json",
                                      with([](json& j) { j["model"]["vocab"].erase("\xc4\xa0"); })),
                                  dir / "holes")));
  EXPECT_ERROR(load_error(with([](json& j) { j["model"]["unk_token"] = "<unk>"; })),
               "unk_token '<unk>' is not in the vocabulary");
  EXPECT_ERROR(load_error(with([](json& j) { j["model"]["byte_fallback"] = true; })), "byte_fallback = true");
  EXPECT_ERROR(load_error(with([](json& j) { j["model"]["vocab"]["zz"] = 5; })), "both have id 5");
  EXPECT_ERROR(load_error(with([](json& j) { j["model"]["vocab"]["zz"] = -1; })), "must be an integer");
  EXPECT_ERROR(load_error(with([](json& j) { j["model"]["dropout"] = 0.1; })), "'dropout' = 0.1 is not supported");
  EXPECT_ERROR(load_error(with([](json& j) { j["normalizer"] = {{"type", "NFC"}}; })), "normalizer 'NFC'");
  EXPECT_ERROR(load_error(with([](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; })), "'Metaspace'");
  EXPECT_ERROR(load_error(with([](json& j) { j["pre_tokenizer"] = nullptr; })), "pre_tokenizer is null");
  EXPECT_ERROR(load_error(with([](json& j) {
                 j["pre_tokenizer"] = {{"type", "Sequence"},
                                       {"pretokenizers",
                                        json::array({{{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}},
                                                      {"behavior", "Isolated"}, {"invert", false}},
                                                     {{"type", "ByteLevel"}, {"use_regex", false}}})}};
               })),
               "neither Llama 3's nor GPT-2's pattern");
  EXPECT_ERROR(load_error(with([](json& j) {
                 j["pre_tokenizer"] = {{"type", "Sequence"},
                                       {"pretokenizers", json::array({{{"type", "ByteLevel"}}, {{"type", "Digits"}}})}};
               })),
               "'ByteLevel': titan supports Split steps followed by one ByteLevel, last");
  EXPECT_ERROR(load_error(with([](json& j) { j["decoder"] = nullptr; })), "decoder null is not supported");
  EXPECT_ERROR(load_error(with([](json& j) { j["truncation"] = {{"max_length", 8}}; })), "'truncation' is set");
  EXPECT_ERROR(load_error(with([](json& j) { j["version"] = "2.0"; })), "unknown tokenizer.json version");
  EXPECT_ERROR(load_error(with([](json& j) {
                 j["added_tokens"] = json::array({{{"id", 257}, {"content", "<x>"}, {"lstrip", true}}});
               })),
               "single_word, lstrip or rstrip");
  EXPECT_ERROR(load_error(full, R"({"bos_token": 5})"), "could not parse bos_token");
  EXPECT_ERROR(load_error(full, R"({"bos_token": "<s>")"), "not valid JSON");
  EXPECT_ERROR(load_error(full, R"({"added_tokens_decoder": {"x1": {"content": "<s>"}}})"), "must be an integer id");
#undef EXPECT_ERROR
}

// `titan tokenizer encode` takes the folder or the file, and times files.
TEST(HfTokenizer, CommandLineEncodesTextAndFiles) {
  TempDir dir;
  titan::testing::write_file(dir / "assets/tokenizer.json", small_tokenizer_json().dump());
  const std::string titan_bin = titan::testing::bin_path("titan") + " tokenizer encode --tokenizer ";
  auto r = titan::testing::run_command(titan_bin + (dir / "assets") + " abc");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Hugging Face BPE " + (dir / "assets/tokenizer.json")), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 tokens for 3 bytes: 256 99\n[ab][c]"), std::string::npos) << r.output;

  std::string text;
  for (int i = 0; i < 2000; ++i) text += "ab cab, abc!\n";
  titan::testing::write_file(dir / "text.txt", text);
  const size_t tokens = load_tokenizer(dir / "assets/tokenizer.json")->encode(text).size();
  r = titan::testing::run_command(titan_bin + (dir / "assets/tokenizer.json") + " --file " + (dir / "text.txt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(std::to_string(tokens) + " tokens for " + std::to_string(text.size()) + " bytes"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("tokens/s"), std::string::npos) << r.output;

  for (const std::string& bad : {" --file " + (dir / "none.txt"), " --file " + (dir / "text.txt") + " extra"}) {
    r = titan::testing::run_command(titan_bin + (dir / "assets") + bad);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
}

TEST(HfTokenizer, ChooseTokenizerPathFollowsTorchtitan) {
  EXPECT_EQ(choose_tokenizer_path("", "").path, "");
  EXPECT_EQ(choose_tokenizer_path("", "./assets/hf").path, "./assets/hf");
  EXPECT_EQ(choose_tokenizer_path("a.model", "").path, "a.model");
  const TokenizerChoice both = choose_tokenizer_path("a.model", "./assets/hf");
  EXPECT_EQ(both.path, "a.model");
  EXPECT_NE(both.note.find("tokenizer_path wins over hf_assets_path"), std::string::npos) << both.note;
  EXPECT_TRUE(choose_tokenizer_path("", "./assets/hf").note.empty());
  // torchtitan's default folder, absent here: the built-in tokenizer, said so.
  ASSERT_FALSE(titan::files::exists(kTorchtitanTestAssets));
  const TokenizerChoice tt = choose_tokenizer_path("", kTorchtitanTestAssets);
  EXPECT_EQ(tt.path, "");
  EXPECT_NE(tt.note.find("using the built-in tokenizer"), std::string::npos) << tt.note;

  // torchtitan's llama3 configs name a file of its repository: absent here,
  // a debugmodel-sized model (2048 ids) uses the built-in tokenizer, a real
  // flavor (128256 ids) or an unknown size keeps the path (and load fails).
  const std::string repo_file = "./torchtitan/datasets/tokenizer/original/tokenizer.model";
  ASSERT_FALSE(titan::files::exists(repo_file));
  const TokenizerChoice debug = choose_tokenizer_path(repo_file, "", titan::data::kBuiltinVocabSize);
  EXPECT_EQ(debug.path, "");
  EXPECT_NE(debug.note.find("using it"), std::string::npos) << debug.note;
  EXPECT_EQ(choose_tokenizer_path(repo_file, "", 128256).path, repo_file);
  EXPECT_EQ(choose_tokenizer_path(repo_file, "").path, repo_file);
  EXPECT_EQ(choose_tokenizer_path("./elsewhere/tokenizer.model", "", titan::data::kBuiltinVocabSize).path,
            "./elsewhere/tokenizer.model");
}
