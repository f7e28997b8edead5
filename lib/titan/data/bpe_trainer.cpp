#include "titan/data/bpe_trainer.hpp"

#include <algorithm>
#include <queue>

#include "titan/data/pretokenize.hpp"
#include "titan/util/error.hpp"

namespace titan::data {
namespace {

using PairKey = uint64_t;  // (left id << 32) | right id: smaller key = smaller ids
PairKey key_of(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

// Max-heap order: higher count first, then the smaller pair.
struct Candidate {
  int64_t count;
  PairKey key;
  bool operator<(const Candidate& o) const { return count != o.count ? count < o.count : key > o.key; }
};

}  // namespace

void count_pieces(std::string_view document, PieceCounts& counts) {
  pretokenize_llama3(document, [&](std::string_view piece) { ++counts[std::string(piece)]; });
}

BpeTrainResult train_bpe(const PieceCounts& counts, int64_t num_ranks, const std::function<void(int64_t)>& progress) {
  TITAN_CHECK(num_ranks >= 256, "a byte-level BPE needs at least 256 ranks (one per byte), asked for ", num_ranks);
  BpeTrainResult result;
  auto& vocab = result.ranks;
  std::unordered_map<std::string, int32_t> id_of;
  for (int b = 0; b < 256; ++b) {
    vocab.emplace_back(1, static_cast<char>(b));
    id_of.emplace(vocab.back(), b);
  }

  // Pieces in a fixed order, so that every container below fills the same
  // way on every run (the result would not change, the timing might).
  std::vector<const std::pair<const std::string, int64_t>*> sorted;
  for (const auto& kv : counts)
    if (kv.first.size() >= 2) sorted.push_back(&kv);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->first < b->first; });
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> freq;
  for (auto* kv : sorted) {
    words.emplace_back(kv->first.begin(), kv->first.end());
    for (auto& t : words.back()) t = static_cast<uint8_t>(t);
    freq.push_back(kv->second);
  }

  std::unordered_map<PairKey, int64_t> pair_count;
  std::unordered_map<PairKey, std::vector<int32_t>> where;  // pieces that held the pair (maybe no longer)
  for (size_t w = 0; w < words.size(); ++w)
    for (size_t i = 0; i + 1 < words[w].size(); ++i) {
      PairKey k = key_of(words[w][i], words[w][i + 1]);
      pair_count[k] += freq[w];
      auto& list = where[k];
      if (list.empty() || list.back() != static_cast<int32_t>(w)) list.push_back(static_cast<int32_t>(w));
    }
  std::priority_queue<Candidate> heap;
  for (const auto& [k, c] : pair_count) heap.push({c, k});

  std::vector<int64_t> visited(words.size(), -1);
  std::unordered_map<PairKey, int64_t> delta;
  std::vector<int32_t> merged_word;
  while (static_cast<int64_t>(vocab.size()) < num_ranks) {
    // Lazy deletion: an entry is current only if its count still is.
    Candidate best{0, 0};
    while (!heap.empty()) {
      Candidate c = heap.top();
      heap.pop();
      auto it = pair_count.find(c.key);
      if (it != pair_count.end() && it->second == c.count && c.count > 0) {
        best = c;
        break;
      }
    }
    if (best.count == 0) {
      result.exhausted = true;
      break;
    }
    const int32_t a = static_cast<int32_t>(best.key >> 32), b = static_cast<int32_t>(best.key & 0xFFFFFFFFu);
    std::string bytes = vocab[a] + vocab[b];
    int32_t z;
    if (auto it = id_of.find(bytes); it != id_of.end()) {
      z = it->second;
    } else {
      z = static_cast<int32_t>(vocab.size());
      id_of.emplace(bytes, z);
      vocab.push_back(std::move(bytes));
    }
    const int64_t step = result.merges++;

    std::vector<int32_t> holders = std::move(where[best.key]);
    where.erase(best.key);
    delta.clear();
    for (int32_t w : holders) {
      if (visited[w] == step) continue;
      visited[w] = step;
      auto& sym = words[w];
      merged_word.clear();
      bool changed = false;
      for (size_t i = 0; i < sym.size();) {
        if (i + 1 < sym.size() && sym[i] == a && sym[i + 1] == b) {
          merged_word.push_back(z);
          i += 2;
          changed = true;
        } else {
          merged_word.push_back(sym[i++]);
        }
      }
      if (!changed) continue;
      // Pieces are short: take all of the old pairs out and put the new ones
      // in; only the net change reaches the counts and the heap.
      for (size_t i = 0; i + 1 < sym.size(); ++i) delta[key_of(sym[i], sym[i + 1])] -= freq[w];
      for (size_t i = 0; i + 1 < merged_word.size(); ++i) {
        PairKey k = key_of(merged_word[i], merged_word[i + 1]);
        delta[k] += freq[w];
        if (merged_word[i] == z || merged_word[i + 1] == z) {
          auto& list = where[k];
          if (list.empty() || list.back() != w) list.push_back(w);
        }
      }
      sym.swap(merged_word);
    }
    for (const auto& [k, d] : delta) {
      if (d == 0) continue;
      int64_t& c = pair_count[k];
      c += d;
      if (c > 0) heap.push({c, k});
      else pair_count.erase(k);
    }
    if (progress && result.merges % 256 == 0) progress(static_cast<int64_t>(vocab.size()));
  }
  return result;
}

}  // namespace titan::data
