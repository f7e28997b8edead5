// The tokenizers against Python's tiktoken: same ids for a battery of
// Unicode, whitespace, digit, contraction and special-token strings, on a
// rank file the reference script trains; plus the pre-tokenizer by hand,
// the byte tokenizer, and every way a tokenizer file can be wrong.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "data_test_util.hpp"
#include "support/run_command.hpp"
#include "titan/data/base64.hpp"
#include "titan/data/byte_tokenizer.hpp"
#include "titan/data/pretokenize.hpp"
#include "titan/data/tiktoken_tokenizer.hpp"
#include "titan/data/unicode.hpp"
#include "titan/util/error.hpp"

using namespace titan;
using namespace titan::data;
using titan::testing::TempDir;
using titan::testing::error_of;

namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  pretokenize_llama3(text, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

#define SKIP_WITHOUT_PYTHON() \
  if (titan::testing::ctest_python().empty()) GTEST_SKIP() << "TITAN_PYTHON is not set (run through ctest)"

}  // namespace

TEST(Pretokenize, SplitsLikeTheLlama3Pattern) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split("1234567"), (V{"123", "456", "7"}));
  EXPECT_EQ(split("I'll they're IT'S"), (V{"I", "'ll", " they", "'re", " IT", "'S"}));
  EXPECT_EQ(split("'sound"), (V{"'s", "ound"}));
  EXPECT_EQ(split("  x"), (V{" ", " x"}));           // \s+(?!\S) leaves one space for " x"
  EXPECT_EQ(split("a  \n\n b"), (V{"a", "  \n\n", " b"}));  // \s*[\r\n]+ up to the last newline
  EXPECT_EQ(split("end.\n\nx"), (V{"end", ".\n\n", "x"}));
  EXPECT_EQ(split("x   "), (V{"x", "   "}));          // trailing whitespace: one piece
  EXPECT_EQ(split("(hi)!"), (V{"(hi", ")!"}));
  EXPECT_EQ(split("Привет мир"), (V{"Привет", " мир"}));
  EXPECT_EQ(split(""), V{});
}

TEST(Pretokenize, PiecesTileAnyInputIncludingInvalidUtf8) {
  const std::string text = std::string("ok \xff\xfe bad \xe2\x82 cut") + '\0' + "\xf0\x9f\x98\x80";
  std::string joined;
  for (const auto& p : split(text)) {
    EXPECT_FALSE(p.empty());
    joined += p;
  }
  EXPECT_EQ(joined, text);
}

TEST(Unicode, ClassesAndDecoding) {
  EXPECT_EQ(char_class('a'), CharClass::Letter);
  EXPECT_EQ(char_class(0x4E2D), CharClass::Letter);  // 中
  EXPECT_EQ(char_class(0x0663), CharClass::Number);  // ٣
  EXPECT_EQ(char_class(0x00B2), CharClass::Number);  // ²
  EXPECT_EQ(char_class(0x3000), CharClass::Space);
  EXPECT_EQ(char_class(0x1F600), CharClass::Other);  // 😀
  EXPECT_EQ(char_class(0x1C), CharClass::Other);     // not White_Space, though Python's isspace says so
  CodePoint c = decode_utf8("\xf0\x9f\x98\x80", 0);
  EXPECT_EQ(c.cp, 0x1F600u);
  EXPECT_EQ(c.len, 4);
  EXPECT_EQ(decode_utf8("\xc0\x80", 0).len, 1);  // overlong: invalid
  EXPECT_EQ(decode_utf8("\xed\xa0\x80", 0).len, 1);  // surrogate: invalid
}

TEST(Unicode, CommittedTableMatchesTheGenerator) {
  SKIP_WITHOUT_PYTHON();
  TempDir dir;
  const std::string out = dir / "table.cpp";
  auto r = titan::testing::run_command(titan::testing::quote(titan::testing::python()) + " " +
                                       titan::testing::quote(titan::testing::source_path("lib/titan/data/gen_unicode_table.py")) +
                                       " > " + titan::testing::quote(out));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(titan::testing::read_file(out),
            titan::testing::read_file(titan::testing::source_path("lib/titan/data/unicode_table.cpp")))
      << "regenerate lib/titan/data/unicode_table.cpp with gen_unicode_table.py";
}

TEST(Base64, RoundTripsAndRejectsGarbage) {
  for (std::string s : {"", "a", "ab", "abc", "abcd", "\xff\x00\x10"}) {
    auto back = base64_decode(base64_encode(s));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, s);
  }
  EXPECT_EQ(base64_encode("hi!"), "aGkh");
  EXPECT_EQ(base64_encode("h"), "aA==");
  EXPECT_FALSE(base64_decode("abc").has_value());
  EXPECT_FALSE(base64_decode("a=bc").has_value());
  EXPECT_FALSE(base64_decode("ab$c").has_value());
}

TEST(Tiktoken, MatchesPythonTiktokenOnABattery) {
  SKIP_WITHOUT_PYTHON();
  TempDir dir;
  const std::string text = dir / "sample.txt", ranks = dir / "ranks.tiktoken", expect = dir / "expected.json";
  ASSERT_TRUE(titan::testing::run_reference("sample-text " + text));
  ASSERT_TRUE(titan::testing::run_reference("train " + text + " 700 " + ranks));
  ASSERT_TRUE(titan::testing::run_reference("encode " + ranks + " " + expect));
  const nlohmann::json want = nlohmann::json::parse(titan::testing::read_file(expect));

  auto tok = TiktokenTokenizer::load(ranks);
  EXPECT_EQ(tok->num_base_tokens(), want["num_base"].get<int64_t>());
  EXPECT_EQ(tok->vocab_size(), want["vocab_size"].get<int64_t>());
  for (const auto& [name, id] : want["specials"].items()) EXPECT_EQ(tok->special_id(name), id.get<int64_t>()) << name;
  EXPECT_EQ(tok->bos_id(), 700);
  EXPECT_EQ(tok->eos_id(), 701);
  EXPECT_EQ(tok->special_id("<|eot_id|>"), 709);

  int checked = 0;
  for (const auto& c : want["cases"]) {
    const std::string s = c["text"].get<std::string>();
    const auto ordinary = c["ordinary"].get<std::vector<int64_t>>();
    const auto special = c["special"].get<std::vector<int64_t>>();
    EXPECT_EQ(tok->encode(s), ordinary) << "ordinary: " << nlohmann::json(s).dump();
    EXPECT_EQ(tok->encode(s, false, false, /*allow_special=*/true), special) << "special: " << nlohmann::json(s).dump();
    EXPECT_EQ(tok->decode(ordinary), s);
    EXPECT_EQ(tok->decode(special), s);
    ++checked;
  }
  EXPECT_GT(checked, 90);
  auto with = tok->encode("hi", true, true);
  EXPECT_EQ(with.front(), tok->bos_id());
  EXPECT_EQ(with.back(), tok->eos_id());
  EXPECT_EQ(tok->decode(with), "<|begin_of_text|>hi<|end_of_text|>");
  EXPECT_NE(error_of([&] { tok->decode({tok->vocab_size()}); }).find("outside the vocabulary"), std::string::npos);

  // Saving writes the same file the reference wrote.
  tok->save(dir / "saved.tiktoken");
  EXPECT_EQ(titan::testing::read_file(dir / "saved.tiktoken"), titan::testing::read_file(ranks));
}

TEST(Tiktoken, Llama3SpecialTokenLayout) {
  auto s = llama3_special_tokens();
  ASSERT_EQ(s.size(), 256u);
  EXPECT_EQ(s[0], "<|begin_of_text|>");
  EXPECT_EQ(s[1], "<|end_of_text|>");
  EXPECT_EQ(s[6], "<|start_header_id|>");
  EXPECT_EQ(s[7], "<|end_header_id|>");
  EXPECT_EQ(s[9], "<|eot_id|>");
  EXPECT_EQ(s[11], "<|reserved_special_token_2|>");
  EXPECT_EQ(s[255], "<|reserved_special_token_246|>");
}

TEST(Tiktoken, BadFilesGiveOneLineErrorsNamingFileAndLine) {
  TempDir dir;
  std::string good;
  for (int b = 0; b < 256; ++b) good += base64_encode(std::string(1, char(b))) + " " + std::to_string(b) + "\n";
  auto load_error = [&](const std::string& name, const std::string& text) {
    titan::testing::write_file(dir / name, text);
    std::string msg = error_of([&] { TiktokenTokenizer::load(dir / name); });
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  };
  EXPECT_NO_THROW(TiktokenTokenizer::load((titan::testing::write_file(dir / "good", good), dir / "good")));

  std::string m = error_of([&] { TiktokenTokenizer::load(dir / "nope.model"); });
  EXPECT_NE(m.find("nope.model"), std::string::npos) << m;
  EXPECT_NE(m.find("download tokenizer.model from Meta's Llama 3 release"), std::string::npos) << m;
  EXPECT_NE(m.find("--model.tokenizer_path"), std::string::npos) << m;

  m = load_error("badb64", good + "!!!! 256\n");
  EXPECT_NE(m.find("badb64:257"), std::string::npos) << m;
  m = load_error("norank", good + "YWI=\n");
  EXPECT_NE(m.find("norank:257"), std::string::npos) << m;
  m = load_error("badrank", good + "YWI= x7\n");
  EXPECT_NE(m.find("badrank:257"), std::string::npos) << m;
  m = load_error("duprank", good + "YWI= 255\n");
  EXPECT_NE(m.find("duprank:257"), std::string::npos) << m;
  m = load_error("gap", good + "YWI= 300\n");
  EXPECT_NE(m.find("gap:257"), std::string::npos) << m;
  m = load_error("dupbytes", good + "YQ== 256\n");
  EXPECT_NE(m.find("same bytes"), std::string::npos) << m;
  m = load_error("nobyte", good.substr(0, good.rfind("/w== 255")));
  EXPECT_NE(m.find("single byte 0xff"), std::string::npos) << m;
  m = load_error("empty", "\n");
  EXPECT_NE(m.find("is empty"), std::string::npos) << m;
  m = load_error("tokenizer.json", "{\"model\": {}}\n");
  EXPECT_NE(m.find("looks like JSON"), std::string::npos) << m;
}

TEST(ByteTokenizer, EncodesBytesWithBosEos) {
  ByteTokenizer t;
  EXPECT_EQ(t.vocab_size(), 258);
  auto ids = t.encode("hé", true, true);
  EXPECT_EQ(ids, (std::vector<int64_t>{256, 'h', 0xC3, 0xA9, 257}));
  EXPECT_EQ(t.decode(t.encode("hé")), "hé");
  EXPECT_EQ(t.encode("<|end_of_text|>", false, false, true), (std::vector<int64_t>{257}));
  EXPECT_EQ(t.encode("<|end_of_text|>").size(), 15u);
  EXPECT_THROW(t.decode({258}), titan::Error);
}

TEST(Tokenizer, LoadTokenizerAndVocabCheck) {
  auto byte = load_tokenizer("builtin:byte");
  EXPECT_EQ(byte->vocab_size(), 258);
  EXPECT_NO_THROW(check_vocab_fits(*byte, 258));
  std::string m = error_of([&] { check_vocab_fits(*byte, 100); });
  EXPECT_NE(m.find("258"), std::string::npos) << m;
  EXPECT_NE(m.find("vocab_size is 100"), std::string::npos) << m;
  EXPECT_THROW(load_tokenizer("/no/such/tokenizer.model"), titan::Error);
}
