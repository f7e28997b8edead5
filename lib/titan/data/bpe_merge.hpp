#pragma once
/// @file
/// @brief The byte-pair merge loop that both BPE tokenizers run on one
/// pre-tokenised piece: tiktoken's (ranks of byte strings) and Hugging
/// Face's (ranks of token-id pairs). Only the question "what does merging
/// these two adjacent parts give, and at which rank" differs.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <queue>
#include <string_view>
#include <vector>

namespace titan::data {

/// @brief "These two parts do not merge."
inline constexpr uint32_t kNoMerge = std::numeric_limits<uint32_t>::max();

/// @brief What merging two adjacent parts gives: the merge's rank (lower
/// merges first; kNoMerge = never) and the id of the merged token.
struct BpeMerge {
  uint32_t rank = kNoMerge;
  uint32_t id = 0;
};

/// @brief Pieces up to this many bytes merge with tiktoken's quadratic scan
/// (fastest for the short pieces that are nearly all text); longer ones
/// (whitespace runs, long words) use a heap so that a pathological document
/// cannot stall the data loader. Both merge the same pairs in the same order.
inline constexpr size_t kHeapMergeFrom = 64;

/// @brief Merges the `n` single-byte parts of a piece (ids `byte_id(i)` for
/// byte i) until no adjacent pair merges, always merging the pair of the
/// lowest rank, the leftmost on ties; appends the ids of the parts left.
///
/// `pair(a, b, c, left_id, right_id)` answers for the adjacent parts that
/// span bytes [a, b) and [b, c). This order is tiktoken's _byte_pair_merge
/// and, for ranks of id pairs, what the `tokenizers` package's BPE
/// (Word::merge_all, a min-heap of (rank, position)) does.
template <typename ByteId, typename Pair>
void bpe_merge(size_t n, ByteId&& byte_id, Pair&& pair, std::vector<int64_t>& out) {
  if (n == 0) return;
  if (n < kHeapMergeFrom) {
    // parts[i] = (start, id, the merge of part i with part i+1).
    struct Part {
      uint32_t start;
      uint32_t id;
      BpeMerge next;
    };
    Part parts[kHeapMergeFrom + 1];
    size_t count = n;
    for (size_t i = 0; i < n; ++i) parts[i] = {static_cast<uint32_t>(i), static_cast<uint32_t>(byte_id(i)), {}};
    parts[n] = {static_cast<uint32_t>(n), 0, {}};  // sentinel: the end of the last part
    auto candidate = [&](size_t i) {
      return i + 1 < count ? pair(parts[i].start, parts[i + 1].start, parts[i + 2].start, parts[i].id, parts[i + 1].id)
                           : BpeMerge{};
    };
    for (size_t i = 0; i + 1 < count; ++i) parts[i].next = candidate(i);
    for (;;) {
      size_t best = 0;
      uint32_t best_rank = kNoMerge;
      for (size_t i = 0; i + 1 < count; ++i)
        if (parts[i].next.rank < best_rank) best_rank = parts[i].next.rank, best = i;
      if (best_rank == kNoMerge) break;
      parts[best].id = parts[best].next.id;
      std::copy(parts + best + 2, parts + count + 1, parts + best + 1);
      --count;
      parts[best].next = candidate(best);
      if (best > 0) parts[best - 1].next = candidate(best - 1);
    }
    for (size_t i = 0; i < count; ++i) out.push_back(parts[i].id);
    return;
  }

  // The same merges through a min-heap of (rank, start): a linked list of
  // parts named by their start byte; stale heap entries are skipped.
  std::vector<size_t> next(n + 1), prev(n + 1);
  std::vector<uint32_t> id(n + 1, 0);
  std::vector<BpeMerge> merge(n + 1);
  for (size_t i = 0; i <= n; ++i) next[i] = i + 1, prev[i] = i - 1;  // prev[0] wraps: never read
  for (size_t i = 0; i < n; ++i) id[i] = static_cast<uint32_t>(byte_id(i));
  using Entry = std::pair<uint32_t, size_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto refresh = [&](size_t i) {
    merge[i] = next[i] < n ? pair(i, next[i], next[next[i]], id[i], id[next[i]]) : BpeMerge{};
    if (merge[i].rank != kNoMerge) heap.emplace(merge[i].rank, i);
  };
  for (size_t i = 0; i < n; ++i) refresh(i);
  std::vector<char> alive(n + 1, 1);
  while (!heap.empty()) {
    auto [r, i] = heap.top();
    heap.pop();
    if (!alive[i] || merge[i].rank != r) continue;
    const size_t gone = next[i];
    alive[gone] = 0;
    id[i] = merge[i].id;
    next[i] = next[gone];
    prev[next[gone]] = i;
    refresh(i);
    if (i > 0) refresh(prev[i]);
  }
  for (size_t i = 0; i < n; i = next[i]) out.push_back(id[i]);
}

}  // namespace titan::data
