#include "titan/data/token_stream.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>

#include "titan/util/error.hpp"

namespace titan::data {

nlohmann::json TokenStreamState::to_json() const {
  return {{"epoch", epoch},
          {"file", position.file},
          {"offset", position.offset},
          {"line", position.line},
          {"doc_index", doc_index},
          {"buffer", buffer},
          {"windows", windows},
          {"window_len", window_len},
          {"dp_rank", dp_rank},
          {"dp_world", dp_world},
          {"num_files", num_files}};
}

TokenStreamState TokenStreamState::from_json(const nlohmann::json& j) {
  TokenStreamState s;
  auto get = [&](const char* key, auto& dst) {
    TITAN_CHECK(j.is_object() && j.contains(key), "data loader state has no '", key, "'");
    try {
      j.at(key).get_to(dst);
    } catch (const nlohmann::json::exception&) {
      throw Error(std::string("data loader state field '") + key + "' has the wrong type");
    }
  };
  get("epoch", s.epoch);
  get("file", s.position.file);
  get("offset", s.position.offset);
  get("line", s.position.line);
  get("doc_index", s.doc_index);
  get("buffer", s.buffer);
  get("windows", s.windows);
  get("window_len", s.window_len);
  get("dp_rank", s.dp_rank);
  get("dp_world", s.dp_world);
  get("num_files", s.num_files);
  return s;
}

TokenStream::TokenStream(std::shared_ptr<const Tokenizer> tokenizer, const std::string& path, int64_t window_len,
                         int64_t dp_rank, int64_t dp_world, const std::string& split_prefix)
    : tokenizer_(std::move(tokenizer)),
      path_(path),
      reader_(list_dataset_files(path, split_prefix)),
      window_len_(window_len),
      dp_rank_(dp_rank),
      dp_world_(dp_world) {
  TITAN_CHECK(tokenizer_, "TokenStream needs a tokenizer");
  TITAN_CHECK(window_len_ >= 2, "a training window needs at least 2 tokens (seq_len >= 1), got ", window_len_);
  TITAN_CHECK(dp_world_ >= 1 && dp_rank_ >= 0 && dp_rank_ < dp_world_, "data-parallel rank ", dp_rank_,
              " is not in a world of ", dp_world_);
}

// Data parallelism shards by document, round robin: rank r takes documents
// r, r + dp_world, ... (the reader skips the others without parsing them).
// Each rank packs its documents, BOS and EOS included, into one stream and
// cuts windows of seq_len + 1 tokens from it, one after the other: the
// inputs are a window's first seq_len tokens, the labels its last seq_len,
// so no token is a label twice (torchtitan's HuggingFace dataset packs the
// same way).
void TokenStream::fill() {
  while (static_cast<int64_t>(buffer_.size() - head_) < window_len_) {
    if (!reader_.next(text_, /*skip=*/doc_index_ % dp_world_ != dp_rank_)) {
      // One pass done. A pass from the start that made no window means the
      // data can never fill one for this rank: stop instead of looping.
      if (pass_from_start_ && pass_windows_ == 0) {
        if (pass_docs_ == 0)
          throw Error("dataset '" + path_ + "' is empty for data-parallel rank " + std::to_string(dp_rank_) + " of " +
                      std::to_string(dp_world_) + ": " + std::to_string(doc_index_) +
                      " documents in all, none for this rank");
        throw Error("dataset '" + path_ + "' is too small: rank " + std::to_string(dp_rank_) + " of " +
                    std::to_string(dp_world_) + " gets " + std::to_string(pass_docs_) + " documents, " +
                    std::to_string(pass_tokens_) + " tokens, fewer than one window of seq_len+1 = " +
                    std::to_string(window_len_) + "; use more data or a smaller --training.seq_len");
      }
      ++epoch_;
      std::fprintf(stderr, "[data] %s: epoch %lld done on rank %lld (%lld documents); starting over\n", path_.c_str(),
                   static_cast<long long>(epoch_), static_cast<long long>(dp_rank_),
                   static_cast<long long>(pass_docs_));
      reader_.rewind();
      doc_index_ = 0;
      pass_from_start_ = true;
      pass_windows_ = pass_docs_ = pass_tokens_ = 0;
      continue;
    }
    const bool mine = doc_index_ % dp_world_ == dp_rank_;
    ++doc_index_;
    if (!mine) continue;
    std::vector<int64_t> ids = tokenizer_->encode(text_, /*bos=*/true, /*eos=*/true);
    ++pass_docs_;
    pass_tokens_ += static_cast<int64_t>(ids.size());
    if (head_ > 0 && head_ * 2 >= buffer_.size()) {  // drop consumed tokens, amortised O(1)
      buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
    buffer_.insert(buffer_.end(), ids.begin(), ids.end());
  }
}

void TokenStream::next_window(int64_t* out) {
  fill();
  std::memcpy(out, buffer_.data() + head_, sizeof(int64_t) * static_cast<size_t>(window_len_));
  head_ += static_cast<size_t>(window_len_);
  ++windows_;
  ++pass_windows_;
}

TokenStreamState TokenStream::state() const {
  TokenStreamState s;
  s.epoch = epoch_;
  s.position = reader_.position();
  s.doc_index = doc_index_;
  // The tokens already read but not yet cut into windows travel with the
  // state: resuming re-reads nothing and skips nothing, so the windows
  // after a resume are exactly those an uninterrupted run cuts.
  s.buffer.assign(buffer_.begin() + static_cast<std::ptrdiff_t>(head_), buffer_.end());
  s.windows = windows_;
  s.window_len = window_len_;
  s.dp_rank = dp_rank_;
  s.dp_world = dp_world_;
  s.num_files = static_cast<int64_t>(reader_.files().size());
  return s;
}

void TokenStream::load_state(const TokenStreamState& s) {
  TITAN_CHECK(s.window_len == window_len_, "data loader state was saved with seq_len ", s.window_len - 1,
              ", this run has seq_len ", window_len_ - 1);
  TITAN_CHECK(s.dp_world == dp_world_ && s.dp_rank == dp_rank_, "data loader state was saved by data-parallel rank ",
              s.dp_rank, " of ", s.dp_world, ", this is rank ", dp_rank_, " of ", dp_world_,
              " (the data position cannot be resharded)");
  TITAN_CHECK(s.num_files == static_cast<int64_t>(reader_.files().size()), "data loader state was saved for a dataset of ",
              s.num_files, " files, '", path_, "' has ", reader_.files().size());
  reader_.seek(s.position);
  epoch_ = s.epoch;
  doc_index_ = s.doc_index;
  buffer_ = s.buffer;
  head_ = 0;
  windows_ = s.windows;
  // The pass did not start here, so it cannot prove the data too small.
  pass_from_start_ = false;
  pass_windows_ = pass_docs_ = pass_tokens_ = 0;
}

}  // namespace titan::data
