#pragma once
/// @file
/// @brief DeviceMesh: ranks laid out as an n-dimensional grid with named
/// dimensions, one process group per dimension (and per flattened set of
/// dimensions), as in torch.distributed.device_mesh.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "titan/dist/process_group.hpp"

namespace titan::dist {

class World;

/// @brief An n-dimensional grid of ranks with named dimensions.
///
/// Ranks fill the grid row-major (the last dimension varies fastest), so with
/// torchtitan's order (pp, dp_replicate, dp_shard, cp, tp) the tp groups are
/// neighbouring ranks, which on GPUs means the same node. `mesh["tp"]` is the
/// 1-D sub-mesh along "tp" that contains this rank; `mesh.group("tp")` its
/// process group. flatten() makes one group from several dimensions
/// (e.g. "dp_shard_cp" from dp_shard and cp for FSDP over both).
class DeviceMesh {
 public:
  /// Builds the mesh over every rank of `world`; prod(shape) must equal the
  /// world size. Collective: every rank calls it with the same arguments.
  DeviceMesh(const World& world, std::vector<int64_t> shape, std::vector<std::string> names);

  int ndim() const { return static_cast<int>(shape_.size()); }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<std::string>& names() const { return names_; }
  /// Number of ranks in the whole mesh.
  int64_t numel() const;
  /// Size of a dimension by index or name (flattened names too).
  int64_t size(int dim) const { return shape_.at(dim); }
  int64_t size(const std::string& name) const;
  /// This rank's coordinate along every dimension.
  const std::vector<int64_t>& coordinate() const { return coord_; }
  /// This rank's index along one dimension (= its rank in that group).
  int64_t local_rank(const std::string& name) const;
  /// Index of a dimension by name; throws naming the known names.
  int dim_index(const std::string& name) const;
  bool has_dim(const std::string& name) const;
  /// True for a dimension of this mesh's own (not a flattened one).
  bool has_plain_dim(const std::string& name) const;

  /// The process group along dimension `dim`.
  const std::shared_ptr<ProcessGroup>& group(int dim) const { return groups_.at(dim); }
  /// The process group along a named (or flattened) dimension.
  std::shared_ptr<ProcessGroup> group(const std::string& name) const;

  /// The 1-D sub-mesh along a named (or flattened) dimension.
  DeviceMesh operator[](const std::string& name) const;
  /// The sub-mesh of several named dimensions, in the order given.
  DeviceMesh operator[](const std::vector<std::string>& names) const;

  /// Makes (once) a group over the given dimensions taken together, known as
  /// `new_name` afterwards. Collective over the whole mesh.
  DeviceMesh flatten(const std::vector<std::string>& dims, const std::string& new_name);

  /// Global rank at a full coordinate.
  int rank_at(const std::vector<int64_t>& coordinate) const;
  /// "pp=1 x dp_shard=2 x tp=2" style description.
  std::string describe() const;

 private:
  struct Flat {
    int64_t size;
    int64_t local_rank;
    std::shared_ptr<ProcessGroup> group;
  };
  DeviceMesh() = default;
  std::shared_ptr<ProcessGroup> make_group(const World& world, const std::vector<int>& dims,
                                           const std::string& name) const;

  std::vector<int64_t> shape_;
  std::vector<std::string> names_;
  std::vector<std::shared_ptr<ProcessGroup>> groups_;
  std::vector<int64_t> coord_;
  std::vector<int64_t> root_shape_;  // the mesh this one was cut from
  std::vector<int64_t> root_coord_;  // this rank's coordinate there
  std::vector<int> root_dims_;       // which root dims this (sub-)mesh spans
  std::shared_ptr<std::map<std::string, Flat>> flat_;  // shared with sub-meshes
  const World* world_ = nullptr;
};

}  // namespace titan::dist
