#include "titan/data/tiktoken_tokenizer.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "titan/data/base64.hpp"
#include "titan/data/bpe_merge.hpp"
#include "titan/util/files.hpp"
#include "titan/data/pretokenize.hpp"
#include "titan/util/error.hpp"

namespace titan::data {

std::vector<std::string> llama3_special_tokens(int count) {
  std::vector<std::string> named = {"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                                    "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
                                    "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>",
                                    "<|python_tag|>"};
  TITAN_CHECK(count >= 2, "a Llama 3 tokenizer needs at least 2 special tokens (BOS and EOS), got ", count);
  if (count < static_cast<int>(named.size())) named.resize(count);
  for (int i = 2; static_cast<int>(named.size()) < count; ++i)
    named.push_back("<|reserved_special_token_" + std::to_string(i) + "|>");
  return named;
}

TiktokenTokenizer::TiktokenTokenizer(std::vector<std::string> ranks, std::vector<std::string> specials,
                                     std::string source)
    : ranks_(std::move(ranks)), specials_(std::move(specials)), source_(std::move(source)) {
  // The maps hold views into the vectors, which never change after this.
  rank_index_.reserve(ranks_.size());
  for (size_t r = 0; r < ranks_.size(); ++r) {
    auto [it, fresh] = rank_index_.emplace(ranks_[r], static_cast<uint32_t>(r));
    TITAN_CHECK(fresh, source_, ": token of rank ", r, " has the same bytes as rank ", it->second);
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    auto it = rank_index_.find(std::string_view(&c, 1));
    TITAN_CHECK(it != rank_index_.end(), source_, ": no token for the single byte 0x", std::hex, b,
                " (a tiktoken rank file must hold all 256 bytes)");
    byte_rank_[b] = it->second;
  }
  for (size_t i = 0; i < specials_.size(); ++i) {
    TITAN_CHECK(!specials_[i].empty(), source_, ": empty special token");
    special_index_.emplace(specials_[i], static_cast<int64_t>(ranks_.size() + i));
    special_first_byte_[static_cast<uint8_t>(specials_[i][0])] = true;
  }
  auto find = [&](const char* name) {
    auto it = special_index_.find(name);
    return it == special_index_.end() ? int64_t{-1} : it->second;
  };
  bos_ = find("<|begin_of_text|>");
  eos_ = find("<|end_of_text|>");
  TITAN_CHECK(bos_ >= 0 && eos_ >= 0, source_, ": special tokens must include <|begin_of_text|> and <|end_of_text|>");
}

std::shared_ptr<TiktokenTokenizer> TiktokenTokenizer::load(const std::string& path, int num_special_tokens) {
  std::ifstream probe(path);
  TITAN_CHECK(probe.good(), "tokenizer file '", path,
              "' not found: download tokenizer.model from Meta's Llama 3 release (original/tokenizer.model); "
              "or set --model.tokenizer_path to a tiktoken file, a tokenizer.json or a Hugging Face assets folder, or "
              "leave it empty for the built-in tokenizer");
  const std::string text = files::read_file(path, "tokenizer file");
  TITAN_CHECK(text.find_first_not_of(" \t\r\n") != std::string::npos, "tokenizer file '", path,
              "' is empty: expected tiktoken format, one 'base64(token) rank' per line");
  if (text[text.find_first_not_of(" \t\r\n")] == '{')
    throw Error("tokenizer file '" + path +
                "' looks like JSON (a Hugging Face tokenizer.json?): a tiktoken file, as Llama 3's "
                "original/tokenizer.model, has one 'base64(token) rank' per line; load_tokenizer reads tokenizer.json "
                "files named *.json or starting with '{'");

  std::vector<std::pair<std::string, int64_t>> entries;
  std::vector<size_t> line_of;
  size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string_view line(text.data() + pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;  // tiktoken skips blank lines too
    std::istringstream fields{std::string(line)};
    std::string b64, rank_text, extra;
    fields >> b64 >> rank_text;
    const bool two_fields = !rank_text.empty() && !(fields >> extra);
    TITAN_CHECK(two_fields, path, ":", line_no, ": expected 'base64(token) rank', got '",
                std::string(line.substr(0, 60)), "'");
    auto bytes = base64_decode(b64);
    TITAN_CHECK(bytes && !bytes->empty(), path, ":", line_no, ": '", b64.substr(0, 60), "' is not base64 of a token");
    char* end = nullptr;
    errno = 0;
    long long rank = std::strtoll(rank_text.c_str(), &end, 10);
    TITAN_CHECK(*end == '\0' && errno == 0 && rank >= 0 && rank < (1LL << 31), path, ":", line_no, ": rank '",
                rank_text, "' is not a non-negative integer");
    entries.emplace_back(std::move(*bytes), rank);
    line_of.push_back(line_no);
  }

  // Special ids start right after the ranks, so the ranks must be exactly
  // 0..n-1: a gap or a repeat would give two tokens one id.
  const size_t n = entries.size();
  std::vector<std::string> ranks(n);
  std::vector<size_t> seen_at(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const int64_t r = entries[i].second;
    TITAN_CHECK(static_cast<size_t>(r) < n, path, ":", line_of[i], ": rank ", r, " is not below the number of tokens (",
                n, "); ranks must be 0..", n - 1);
    TITAN_CHECK(!seen_at[r], path, ":", line_of[i], ": rank ", r, " repeats line ", seen_at[r]);
    seen_at[r] = line_of[i];
    ranks[r] = std::move(entries[i].first);
  }
  return std::make_shared<TiktokenTokenizer>(std::move(ranks), llama3_special_tokens(num_special_tokens), path);
}

uint32_t TiktokenTokenizer::rank_of(std::string_view bytes) const {
  auto it = rank_index_.find(bytes);
  return it == rank_index_.end() ? kNoMerge : it->second;
}

void TiktokenTokenizer::encode_piece(std::string_view piece, std::vector<int64_t>& out) const {
  if (uint32_t whole = rank_of(piece); whole != kNoMerge) {
    out.push_back(whole);
    return;
  }
  // tiktoken merges by the rank of the merged bytes: the pair's own parts
  // do not matter, only the span they cover together.
  bpe_merge(
      piece.size(), [&](size_t i) { return byte_rank_[static_cast<uint8_t>(piece[i])]; },
      [&](size_t a, size_t, size_t c, uint32_t, uint32_t) {
        const uint32_t r = rank_of(piece.substr(a, c - a));
        return BpeMerge{r, r};
      },
      out);
}

void TiktokenTokenizer::encode_ordinary(std::string_view text, std::vector<int64_t>& out) const {
  pretokenize_llama3(text, [&](std::string_view piece) { encode_piece(piece, out); });
}

std::vector<int64_t> TiktokenTokenizer::encode(std::string_view text, bool bos, bool eos, bool allow_special) const {
  std::vector<int64_t> out;
  out.reserve(text.size() / 3 + 2);
  if (bos) out.push_back(bos_);
  if (!allow_special) {
    encode_ordinary(text, out);
  } else {
    // Split at the earliest special token (the longest one there), encode
    // the text between as ordinary text: what tiktoken's encode does with
    // allowed_special="all".
    size_t pos = 0, seg = 0;
    while (pos < text.size()) {
      size_t best_len = 0;
      int64_t best_id = -1;
      if (special_first_byte_[static_cast<uint8_t>(text[pos])])
        for (const auto& [name, id] : special_index_)
          if (name.size() > best_len && text.compare(pos, name.size(), name) == 0) best_len = name.size(), best_id = id;
      if (!best_len) {
        ++pos;
        continue;
      }
      encode_ordinary(text.substr(seg, pos - seg), out);
      out.push_back(best_id);
      pos += best_len;
      seg = pos;
    }
    encode_ordinary(text.substr(seg), out);
  }
  if (eos) out.push_back(eos_);
  return out;
}

const std::string& TiktokenTokenizer::token_bytes(int64_t id) const {
  const int64_t n = static_cast<int64_t>(ranks_.size());
  TITAN_CHECK(id >= 0 && id < vocab_size(), "token id ", id, " is outside the vocabulary of ", describe());
  return id < n ? ranks_[id] : specials_[id - n];
}

std::string TiktokenTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) out += token_bytes(id);
  return out;
}

int64_t TiktokenTokenizer::special_id(std::string_view text) const {
  auto it = special_index_.find(text);
  TITAN_CHECK(it != special_index_.end(), "no special token '", std::string(text), "' in ", describe());
  return it->second;
}

std::string TiktokenTokenizer::describe() const {
  return "tiktoken BPE " + source_ + " (" + std::to_string(vocab_size()) + " tokens)";
}

void TiktokenTokenizer::save(const std::string& path) const { write_tiktoken_file(path, ranks_); }

void write_tiktoken_file(const std::string& path, const std::vector<std::string>& ranks) {
  // Written to a temporary name and renamed, so that a reader never sees a
  // half-written file (two ranks may build the cached tokenizer at once).
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    TITAN_CHECK(out, "cannot write tokenizer file '", tmp, "': ", std::strerror(errno));
    for (size_t r = 0; r < ranks.size(); ++r) out << base64_encode(ranks[r]) << ' ' << r << '\n';
    out.flush();
    TITAN_CHECK(out, "cannot write tokenizer file '", tmp, "': ", std::strerror(errno));
  }
  TITAN_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename '", tmp, "' to '", path,
              "': ", std::strerror(errno));
}

}  // namespace titan::data
