#include "titan/data/hf_tokenizer.hpp"

#include <algorithm>
#include <limits>

#include "titan/data/bpe_merge.hpp"
#include "titan/data/byte_level.hpp"
#include "titan/util/files.hpp"
#include "titan/data/pretokenize.hpp"
#include "titan/util/error.hpp"

namespace titan::data {
namespace {

// byte_id_ of a byte the vocabulary has no token for.
constexpr uint32_t kNoByteToken = std::numeric_limits<uint32_t>::max();

uint64_t pair_key(uint32_t left, uint32_t right) { return (static_cast<uint64_t>(left) << 32) | right; }

// Token spellings in messages: the first 60 bytes, quoted.
std::string shown(std::string_view s) { return "'" + std::string(s.substr(0, 60)) + "'"; }

}  // namespace

HfTokenizer::HfTokenizer(HfTokenizerSpec spec, std::string source)
    : source_(std::move(source)), steps_(std::move(spec.pre_tokenizer)), ignore_merges_(spec.ignore_merges) {
  // The model's vocabulary, and each token's bytes for decode.
  model_vocab_count_ = spec.vocab.size();
  vocab_.reserve(spec.vocab.size());
  int64_t max_id = -1;
  for (const auto& [token, id] : spec.vocab) max_id = std::max(max_id, id);
  id_bytes_.resize(max_id + 1);
  id_known_.assign(max_id + 1, 0);
  std::vector<const std::string*> spelling(max_id + 1, nullptr);
  for (const auto& [token, id] : spec.vocab) {
    TITAN_CHECK(!id_known_[id], source_, ": tokens ", shown(*spelling[id]), " and ", shown(token), " both have id ",
                id);
    spelling[id] = &token;
    vocab_.emplace(token, id);
    set_bytes(id, token);
  }
  // Pieces are bytes; the vocabulary spells bytes as GPT-2's characters.
  // Only tokens made of those characters can come out of a piece.
  std::vector<int64_t> byte_ids;
  for (const auto& [token, id] : spec.vocab)
    if (std::optional<std::string> bytes = byte_level_bytes(token)) {
      model_bytes_.push_back(std::move(*bytes));
      byte_ids.push_back(id);
    }
  byte_index_.reserve(model_bytes_.size());
  for (size_t i = 0; i < model_bytes_.size(); ++i) byte_index_.emplace(model_bytes_[i], byte_ids[i]);
  // A byte-level BPE trained with the full alphabet has all 256 bytes; one
  // trained without it (torchtitan's small test tokenizer has no token for
  // 0x00 or even the space) has holes, which the `tokenizers` package's BPE
  // encodes as its unk_token or, without one, drops (encode_piece).
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(byte_level_text(std::string(1, static_cast<char>(b))));
    byte_id_[b] = it == vocab_.end() ? kNoByteToken : static_cast<uint32_t>(it->second);
    byte_holes_ = byte_holes_ || it == vocab_.end();
  }
  if (spec.unk_token) {
    auto it = vocab_.find(*spec.unk_token);
    TITAN_CHECK(it != vocab_.end(), source_, ": model unk_token ", shown(*spec.unk_token),
                " is not in the vocabulary");
    unk_id_ = it->second;
  }
  fuse_unk_ = spec.fuse_unk;

  // merges[i] = (a, b): the pair of ids merges at rank i into the token
  // spelled a + b; as in the package, both parts and the result must be
  // tokens, and a pair listed twice keeps its last rank.
  merges_.reserve(spec.merges.size());
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    // Not a structured binding: a lambda may capture those only from C++20
    // (clang, which builds the libFuzzer target, holds C++17 to it).
    const std::string& a = spec.merges[rank].first;
    const std::string& b = spec.merges[rank].second;
    auto id_of = [&](const std::string& t, const char* what) {
      auto it = vocab_.find(t);
      TITAN_CHECK(it != vocab_.end(), source_, ": merge ", rank, " (", shown(a), ", ", shown(b), ") references ", what,
                  " ", shown(t), ", which is not in the vocabulary");
      return static_cast<uint32_t>(it->second);
    };
    const uint32_t left = id_of(a, "token"), right = id_of(b, "token"), merged = id_of(a + b, "the merged token");
    merges_[pair_key(left, right)] = {static_cast<uint32_t>(rank), merged};
  }
  add_tokens(spec.added_tokens);  // tokenizers' from_file adds them with add_tokens, flags as written
}

void HfTokenizer::set_bytes(int64_t id, const std::string& token) {
  if (id >= static_cast<int64_t>(id_bytes_.size())) {
    id_bytes_.resize(id + 1);
    id_known_.resize(id + 1, 0);
  }
  // The ByteLevel decoder: a token of byte-level characters is its bytes;
  // any other (an added token such as "<|begin_of_text|>" whose characters
  // all happen to be printable bytes is both) stays as it is written.
  std::optional<std::string> bytes = byte_level_bytes(token);
  id_bytes_[id] = bytes ? std::move(*bytes) : token;
  id_known_[id] = 1;
}

void HfTokenizer::add_tokens(const std::vector<HfAddedToken>& tokens) {
  // As tokenizers' AddedVocabulary::add_tokens: new ids continue after the
  // model's vocabulary (its entry count) or after the highest added id.
  int64_t next_id = static_cast<int64_t>(model_vocab_count_);
  if (!added_.empty()) {
    int64_t max_added = -1;
    for (const Added& a : added_) max_added = std::max(max_added, a.id);
    if (max_added >= next_id || model_vocab_count_ == 0) next_id = max_added + 1;
  }
  for (const HfAddedToken& t : tokens) {
    if (t.content.empty()) continue;
    TITAN_CHECK(!t.single_word && !t.lstrip && !t.rstrip, source_, ": added token ", shown(t.content),
                " has single_word, lstrip or rstrip set; titan supports added tokens without them");
    auto known = added_by_content_.find(t.content);
    if (known != added_by_content_.end() && added_[known->second].token == t) continue;
    int64_t id = token_to_id(t.content);
    if (id < 0) id = next_id++;
    if (known != added_by_content_.end()) {
      Added& a = added_[known->second];
      a.token = t;  // same content, same id, new flags
      a.special = a.special || t.special;  // the package's set of special contents only grows
    } else {
      added_by_content_.emplace(t.content, added_.size());
      added_.push_back({t, id, t.special});
    }
    set_bytes(id, t.content);
  }
  rebuild_added_index();
}

void HfTokenizer::rebuild_added_index() {
  for (auto& pass : added_by_first_byte_)
    for (auto& bucket : pass) bucket.clear();
  any_added_ = {false, false};
  for (size_t i = 0; i < added_.size(); ++i) {
    const int pass = added_[i].token.normalized ? 1 : 0;
    added_by_first_byte_[pass][static_cast<uint8_t>(added_[i].token.content[0])].push_back(i);
    any_added_[pass] = true;
  }
  // Longest first, so the first that matches at a position is the longest.
  for (auto& pass : added_by_first_byte_)
    for (auto& bucket : pass)
      std::stable_sort(bucket.begin(), bucket.end(), [&](size_t a, size_t b) {
        return added_[a].token.content.size() > added_[b].token.content.size();
      });
}

void HfTokenizer::set_bos_eos(const std::optional<std::string>& bos, const std::optional<std::string>& eos) {
  auto id_of = [&](const std::optional<std::string>& t) { return t && !t->empty() ? token_to_id(*t) : int64_t{-1}; };
  bos_ = id_of(bos);
  eos_ = id_of(eos);
}

int64_t HfTokenizer::token_to_id(std::string_view token) const {
  const std::string key(token);
  if (auto it = added_by_content_.find(key); it != added_by_content_.end()) return added_[it->second].id;
  if (auto it = vocab_.find(key); it != vocab_.end()) return it->second;
  return -1;
}

void HfTokenizer::split_added(std::string_view text, bool normalized_pass, bool allow_special,
                              std::vector<Match>& out) const {
  // Leftmost-longest and non-overlapping, as the package's Aho-Corasick
  // search: a special token skipped because !allow_special stays text and
  // the search goes on after it.
  out.clear();
  const int pass = normalized_pass ? 1 : 0;
  if (!any_added_[pass]) return;
  const auto& buckets = added_by_first_byte_[pass];
  size_t pos = 0;
  while (pos < text.size()) {
    const Added* found = nullptr;
    for (size_t i : buckets[static_cast<uint8_t>(text[pos])]) {
      const std::string& c = added_[i].token.content;
      if (text.compare(pos, c.size(), c) == 0) {
        found = &added_[i];
        break;
      }
    }
    if (!found) {
      ++pos;
      continue;
    }
    const size_t end = pos + found->token.content.size();
    if (allow_special || !found->special) out.push_back({pos, end, found->id});
    pos = end;
  }
}

void HfTokenizer::pre_tokenize(size_t step, std::string_view text, std::vector<int64_t>& out) const {
  if (step == steps_.size()) {
    encode_piece(text, out);
    return;
  }
  auto next = [&](std::string_view piece) { pre_tokenize(step + 1, piece, out); };
  switch (steps_[step]) {
    case HfPreTokenizeStep::SplitLlama3: pretokenize_llama3(text, next); break;
    case HfPreTokenizeStep::SplitGpt2: pretokenize_gpt2(text, next); break;
    case HfPreTokenizeStep::PrefixSpace:
      // ByteLevel's add_prefix_space works on each piece it is given.
      if (!text.empty() && text.front() == ' ') next(text);
      else next(" " + std::string(text));
      break;
  }
}

void HfTokenizer::encode_piece(std::string_view piece, std::vector<int64_t>& out) const {
  if (ignore_merges_) {
    if (auto it = byte_index_.find(piece); it != byte_index_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  auto merge = [&](size_t, size_t, size_t, uint32_t left, uint32_t right) {
    auto it = merges_.find(pair_key(left, right));
    return it == merges_.end() ? BpeMerge{} : BpeMerge{it->second.first, it->second.second};
  };
  if (!byte_holes_) {
    bpe_merge(piece.size(), [&](size_t i) { return byte_id_[static_cast<uint8_t>(piece[i])]; }, merge, out);
    return;
  }
  // As the package's BPE builds a word: a byte without a token becomes the
  // unk_token (a run of them one, with fuse_unk) or, without one, nothing,
  // so the bytes on either side are neighbours for the merges.
  std::vector<uint32_t> parts;
  parts.reserve(piece.size());
  bool unk_pending = false;
  for (char c : piece) {
    const uint32_t id = byte_id_[static_cast<uint8_t>(c)];
    if (id != kNoByteToken) {
      if (unk_pending) parts.push_back(static_cast<uint32_t>(unk_id_)), unk_pending = false;
      parts.push_back(id);
    } else if (unk_id_ >= 0) {
      if (unk_pending && !fuse_unk_) parts.push_back(static_cast<uint32_t>(unk_id_));
      unk_pending = true;
    }
  }
  if (unk_pending) parts.push_back(static_cast<uint32_t>(unk_id_));
  bpe_merge(parts.size(), [&](size_t i) { return parts[i]; }, merge, out);
}

void HfTokenizer::encode_text(std::string_view text, std::vector<int64_t>& out, bool allow_special) const {
  // Added tokens not normalized are cut out of the raw text, then those
  // matched after normalizing (titan has no normalizer: the same text) out
  // of what is left; the stretches between go through the pre-tokenizer.
  std::vector<Match> outer, inner;
  auto stretches = [&](std::string_view t, std::vector<Match>& found, auto&& on_text) {
    size_t done = 0;
    for (const Match& m : found) {
      if (m.begin > done) on_text(t.substr(done, m.begin - done));
      out.push_back(m.id);
      done = m.end;
    }
    if (done < t.size()) on_text(t.substr(done));
  };
  split_added(text, false, allow_special, outer);
  stretches(text, outer, [&](std::string_view a) {
    split_added(a, true, allow_special, inner);
    stretches(a, inner, [&](std::string_view b) { pre_tokenize(0, b, out); });
  });
}

std::vector<int64_t> HfTokenizer::encode(std::string_view text, bool bos, bool eos, bool allow_special) const {
  std::vector<int64_t> out;
  out.reserve(text.size() / 3 + 2);
  if (bos && bos_ >= 0) out.push_back(bos_);
  encode_text(text, out, allow_special);
  if (eos && eos_ >= 0) out.push_back(eos_);
  return out;
}

std::string HfTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) {
    TITAN_CHECK(id >= 0 && id < vocab_size() && id_known_[id], "token id ", id, " is outside the vocabulary of ",
                describe());
    out += id_bytes_[id];
  }
  return out;
}

std::string HfTokenizer::describe() const {
  std::string s = "Hugging Face BPE " + source_ + " (" + std::to_string(vocab_size()) + " ids";
  if (bos_ >= 0 || eos_ >= 0)
    s += ", BOS " + (bos_ >= 0 ? std::to_string(bos_) : "none") + ", EOS " + (eos_ >= 0 ? std::to_string(eos_) : "none");
  else
    s += ", no BOS/EOS";
  return s + ")";
}

std::shared_ptr<HfTokenizer> HfTokenizer::load(const std::string& json_path, const std::string& config_path) {
  TITAN_CHECK(files::is_regular_file(json_path), "tokenizer file '", json_path, "' not found");
  auto tok = std::make_shared<HfTokenizer>(
      parse_tokenizer_json(files::read_file(json_path, "tokenizer file"), json_path), json_path);
  if (!config_path.empty() && files::is_regular_file(config_path)) {
    const HfTokenizerConfig cfg = parse_tokenizer_config(files::read_file(config_path, "tokenizer config"), config_path);
    tok->add_tokens(cfg.special_tokens);
    tok->set_bos_eos(cfg.bos, cfg.eos);
  }
  return tok;
}

}  // namespace titan::data
