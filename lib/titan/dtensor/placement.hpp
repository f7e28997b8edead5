#pragma once
/// @file
/// @brief Placement: how a tensor lies along one dimension of a DeviceMesh —
/// Shard(dim), Replicate, or Partial(sum/avg) — and the chunking rule for
/// uneven shards.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "titan/dist/process_group.hpp"

namespace titan {

/// @brief Placement of a tensor along one mesh dimension.
struct Placement {
  enum class Kind { Shard, Replicate, Partial };
  Kind kind = Kind::Replicate;
  int64_t dim = 0;                              ///< tensor dim, for Shard
  dist::ReduceOp reduce = dist::ReduceOp::Sum;  ///< pending reduction, for Partial

  /// Each mesh coordinate holds one chunk of tensor dim `d`.
  static Placement shard(int64_t d) { return {Kind::Shard, d, dist::ReduceOp::Sum}; }
  /// Every mesh coordinate holds the whole tensor.
  static Placement replicate() { return {Kind::Replicate, 0, dist::ReduceOp::Sum}; }
  /// The tensor is the sum (or average) of what the coordinates hold.
  static Placement partial(dist::ReduceOp op = dist::ReduceOp::Sum) { return {Kind::Partial, 0, op}; }

  bool is_shard() const { return kind == Kind::Shard; }
  bool is_shard(int64_t d) const { return kind == Kind::Shard && dim == d; }
  bool is_replicate() const { return kind == Kind::Replicate; }
  bool is_partial() const { return kind == Kind::Partial; }
  /// "Shard(0)", "Replicate()", "Partial(sum)".
  std::string str() const;
  bool operator==(const Placement& o) const;
  bool operator!=(const Placement& o) const { return !(*this == o); }
};

/// One Placement per mesh dimension.
using Placements = std::vector<Placement>;

/// "[Shard(0), Replicate()]".
std::string to_string(const Placements& placements);

/// @brief Size and offset of chunk `index` when a dimension of `size` is
/// split into `chunks` pieces, torch.chunk's way (and DTensor's): every chunk
/// but the trailing ones has ceil(size/chunks) elements, the last non-empty
/// one the rest, and any after it are empty.
std::pair<int64_t, int64_t> shard_size_and_offset(int64_t size, int64_t chunks, int64_t index);

}  // namespace titan
