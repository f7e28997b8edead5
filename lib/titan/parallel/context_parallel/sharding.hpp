#pragma once
/// @file
/// @brief How context parallelism cuts the sequence between the cp ranks:
/// the plain contiguous split, or the load-balanced head-tail split of
/// 2·cp chunks (rank i holds chunks i and 2·cp−1−i), and the inverse that
/// puts the pieces back in order.
///
/// Under a causal mask query t attends to t+1 keys, so with a contiguous
/// split the last rank does about 2·cp−1 times the attention work of the
/// first. Pairing an early chunk with its mirror image from the end gives
/// every rank the same work (torchtitan's "headtail" load balancer; the
/// arrangement of Striped / zig-zag ring attention, Brandon et al. 2023,
/// arXiv:2311.09431).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace titan::cp {

/// @brief How the sequence is cut between the cp ranks.
enum class LoadBalance {
  contiguous,  ///< cp chunks, rank i holds chunk i
  head_tail,   ///< 2·cp chunks, rank i holds chunks i and 2·cp−1−i
};

/// The accepted names: "headtail" (torchtitan's name), "contiguous", and
/// "None" (torchtitan's command-line spelling of no load balancing: the
/// contiguous split).
LoadBalance parse_load_balance(const std::string& name);
std::string to_string(LoadBalance b);

/// @brief The sequence layout of a cp group: which equal-length chunks of
/// the sequence each cp rank holds, in the order it holds them.
struct SequenceLayout {
  int64_t cp = 1;                            ///< ranks in the cp group
  LoadBalance balance = LoadBalance::head_tail;

  /// cp for contiguous, 2·cp for head-tail.
  int64_t num_chunks() const;
  /// 1 for contiguous, 2 for head-tail.
  int64_t chunks_per_rank() const { return num_chunks() / cp; }
  /// The chunk indices `rank` holds, in its local order (ascending).
  std::vector<int64_t> chunks_of(int64_t rank) const;
  /// Throws a one-line titan::Error unless `seq_len` divides into
  /// num_chunks() equal chunks (`what` names the setting in the message).
  void check_seq_len(int64_t seq_len, const std::string& what = "seq_len") const;
};

/// @brief This rank's piece of `full` along `dim` (size seq_len there): its
/// chunks concatenated in local order. A view when it holds one chunk.
at::Tensor shard_sequence(const at::Tensor& full, int64_t dim, const SequenceLayout& layout, int64_t rank);

/// @brief The inverse: from the concatenation along `dim` of every rank's
/// piece in rank order (what an all-gather returns) to the sequence in its
/// original order.
at::Tensor unshard_sequence(const at::Tensor& gathered, int64_t dim, const SequenceLayout& layout);

/// @brief The positions 0..seq_len−1 that `rank` holds, int64 [seq_len / cp]
/// on the CPU: the rows of the RoPE table its tokens need.
at::Tensor shard_positions(int64_t seq_len, const SequenceLayout& layout, int64_t rank);

/// @brief How a block of query chunk `q_chunk` against key chunk `kv_chunk`
/// (equal lengths) is computed: under a causal mask a key chunk before the
/// query chunk is wholly visible, the same chunk is causal on its
/// diagonal, a later one wholly masked (skipped).
enum class BlockKind { full, diagonal, masked };
BlockKind block_kind(int64_t q_chunk, int64_t kv_chunk, bool causal);

/// @brief The number of (query, key) pairs `rank`'s queries attend to out
/// of a causal seq_len-token sequence: its attention work (each pair costs
/// 4·head_dim FLOPs per query head in the forward).
int64_t causal_pairs(int64_t seq_len, const SequenceLayout& layout, int64_t rank);

/// @brief The same under block-causal (document) masking: the (query, key)
/// pairs `rank`'s queries attend to in a window whose tokens' document
/// starts are `doc_start` ([seq_len] int64, ops::document_starts of one
/// sequence): query t sees t − doc_start[t] + 1 keys. Under head-tail the
/// ranks' shares now depend on where the documents fall.
int64_t document_pairs(const at::Tensor& doc_start, const SequenceLayout& layout, int64_t rank);

}  // namespace titan::cp
