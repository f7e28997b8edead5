#include "titan/parallel/context_parallel/sharding.hpp"

#include <ATen/ATen.h>

#include "titan/ops/attention/document_mask.hpp"
#include "titan/util/error.hpp"

namespace titan::cp {

LoadBalance parse_load_balance(const std::string& name) {
  if (name == "headtail") return LoadBalance::head_tail;
  // torchtitan's None (no load balancing; "None" on its command line) is
  // the contiguous split.
  if (name == "contiguous" || name == "None") return LoadBalance::contiguous;
  throw Error("unknown context-parallel load balancer '" + name + "' (valid: headtail, contiguous, None)");
}

std::string to_string(LoadBalance b) { return b == LoadBalance::head_tail ? "headtail" : "contiguous"; }

int64_t SequenceLayout::num_chunks() const { return balance == LoadBalance::head_tail ? 2 * cp : cp; }

std::vector<int64_t> SequenceLayout::chunks_of(int64_t rank) const {
  TITAN_CHECK(rank >= 0 && rank < cp, "context parallel: rank ", rank, " outside a cp group of ", cp);
  if (balance == LoadBalance::contiguous) return {rank};
  return {rank, 2 * cp - 1 - rank};
}

void SequenceLayout::check_seq_len(int64_t seq_len, const std::string& what) const {
  TITAN_CHECK(cp >= 1, "context parallel: cp degree must be >= 1, got ", cp);
  TITAN_CHECK(seq_len > 0 && seq_len % num_chunks() == 0, what, " = ", seq_len, " does not divide into ",
              num_chunks(), " equal chunks (context_parallel_degree ", cp, ", load balancer ", to_string(balance),
              balance == LoadBalance::head_tail ? ": seq_len must divide by 2 x cp)" : ": seq_len must divide by cp)");
}

at::Tensor shard_sequence(const at::Tensor& full, int64_t dim, const SequenceLayout& layout, int64_t rank) {
  dim = at::maybe_wrap_dim(dim, full.dim());
  layout.check_seq_len(full.size(dim), "sequence length");
  const int64_t c = full.size(dim) / layout.num_chunks();
  std::vector<at::Tensor> pieces;
  for (int64_t id : layout.chunks_of(rank)) pieces.push_back(full.narrow(dim, id * c, c));
  return pieces.size() == 1 ? pieces.front() : at::cat(pieces, dim);
}

at::Tensor unshard_sequence(const at::Tensor& gathered, int64_t dim, const SequenceLayout& layout) {
  dim = at::maybe_wrap_dim(dim, gathered.dim());
  layout.check_seq_len(gathered.size(dim), "gathered sequence length");
  const int64_t n = layout.num_chunks(), c = gathered.size(dim) / n;
  // Slot k of the gathered tensor is rank k / per's chunk (k % per); put
  // each one where its chunk index says.
  std::vector<at::Tensor> ordered(static_cast<size_t>(n));
  int64_t slot = 0;
  for (int64_t r = 0; r < layout.cp; ++r)
    for (int64_t id : layout.chunks_of(r)) ordered[static_cast<size_t>(id)] = gathered.narrow(dim, (slot++) * c, c);
  return at::cat(ordered, dim);
}

at::Tensor shard_positions(int64_t seq_len, const SequenceLayout& layout, int64_t rank) {
  return shard_sequence(at::arange(seq_len, at::TensorOptions().dtype(at::kLong)), 0, layout, rank);
}

BlockKind block_kind(int64_t q_chunk, int64_t kv_chunk, bool causal) {
  if (!causal || kv_chunk < q_chunk) return BlockKind::full;
  return kv_chunk == q_chunk ? BlockKind::diagonal : BlockKind::masked;
}

int64_t causal_pairs(int64_t seq_len, const SequenceLayout& layout, int64_t rank) {
  layout.check_seq_len(seq_len);
  const int64_t c = seq_len / layout.num_chunks();
  int64_t pairs = 0;
  // Query t sees keys 0..t: t + 1 of them; summed over chunk [id·c, (id+1)·c).
  for (int64_t id : layout.chunks_of(rank)) pairs += c * (id * c) + c * (c + 1) / 2;
  return pairs;
}

int64_t document_pairs(const at::Tensor& doc_start, const SequenceLayout& layout, int64_t rank) {
  TITAN_CHECK(doc_start.dim() == 1 && doc_start.scalar_type() == at::kLong,
              "document_pairs: doc_start must be one sequence's int64 [seq_len], got ", doc_start.sizes());
  // Keys seen = position inside the document + 1, summed over the positions held.
  const at::Tensor seen = ops::document_positions(doc_start.to(at::kCPU).view({1, -1})) + 1;
  return shard_sequence(seen, 1, layout, rank).sum().item<int64_t>();
}

}  // namespace titan::cp
