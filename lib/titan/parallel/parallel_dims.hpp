#pragma once
/// @file
/// @brief ParallelDims: the degrees of every parallelism of a job (pp,
/// dp_replicate, dp_shard, cp, tp), resolved against the world size and
/// turned into one DeviceMesh in torchtitan's dimension order.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace titan::config {
struct JobConfig;
}
namespace titan::dist {
class DeviceMesh;
class World;
}  // namespace titan::dist

namespace titan::parallel {

/// @brief How the ranks of a job are split between the parallelisms.
///
/// Every degree is at least 1 after resolve(); `dp_shard = -1` takes the
/// ranks the others leave (world / (dp_replicate·cp·tp·pp)), as torchtitan's
/// `data_parallel_shard_degree = -1`. The product of the degrees must equal
/// the world size.
struct ParallelDims {
  int64_t dp_replicate = 1;  ///< DDP replicas (HSDP's replica groups with dp_shard > 1)
  int64_t dp_shard = -1;     ///< FSDP shards; -1 = the remaining ranks
  int64_t cp = 1;            ///< context-parallel ranks
  int64_t tp = 1;            ///< tensor-parallel ranks
  int64_t pp = 1;            ///< pipeline stages
  int64_t world_size = 1;

  /// @brief The degrees a JobConfig asks for on `world_size` ranks, resolved
  /// and checked (throws titan::Error naming the config keys on a mismatch).
  static ParallelDims from_config(const config::JobConfig& cfg, int64_t world_size);

  /// @brief Replaces dp_shard = -1 by the ranks left over and checks that
  /// every degree is >= 1 and their product is world_size; throws a one-line
  /// titan::Error otherwise.
  void resolve();

  /// Ranks that see different data: dp_replicate × dp_shard.
  int64_t dp_degree() const { return dp_replicate * dp_shard; }
  bool dp_replicate_enabled() const { return dp_replicate > 1; }
  bool dp_shard_enabled() const { return dp_shard > 1; }
  /// FSDP wraps the model when it is sharded over dp_shard or cp.
  bool fsdp_enabled() const { return dp_shard > 1 || cp > 1; }
  /// DDP alone: replicas without sharding.
  bool ddp_enabled() const { return dp_replicate > 1 && !fsdp_enabled(); }
  bool cp_enabled() const { return cp > 1; }
  bool tp_enabled() const { return tp > 1; }
  bool pp_enabled() const { return pp > 1; }

  /// @brief The named dimensions of size > 1 in torchtitan's order (pp,
  /// dp_replicate, dp_shard, cp, tp); on one rank, just {"dp_shard"} of size 1
  /// so that a mesh always exists.
  std::vector<std::pair<std::string, int64_t>> mesh_dims() const;

  /// @brief Builds the mesh over `world` (collective): the dimensions of
  /// mesh_dims() plus the flattened groups torchtitan uses — "dp" (batch
  /// sharding: dp_replicate and dp_shard), "dp_shard_cp" (FSDP's
  /// sharding group) and "dp_cp" (loss and gradient averaging) — for the ones
  /// whose dimensions exist.
  dist::DeviceMesh build_mesh(const dist::World& world) const;

  /// @brief The name under which build_mesh()'s mesh knows the
  /// data-parallel group (the ranks that split the batch): "dp" when both
  /// dp_replicate and dp_shard are > 1, else whichever of them is, else ""
  /// (no data parallelism; the one-rank mesh's "dp_shard" excepted).
  std::string dp_mesh_name() const;

  /// @brief "dp_replicate=2 x dp_shard=2" style description of the non-trivial degrees.
  std::string describe() const;
};

}  // namespace titan::parallel
