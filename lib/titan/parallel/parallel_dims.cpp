// Resolving the parallel degrees and building the job's DeviceMesh.
#include "titan/parallel/parallel_dims.hpp"

#include "titan/config/job_config.hpp"
#include "titan/dist/device_mesh.hpp"
#include "titan/dist/world.hpp"
#include "titan/util/error.hpp"

namespace titan::parallel {

ParallelDims ParallelDims::from_config(const config::JobConfig& cfg, int64_t world_size) {
  ParallelDims d;
  d.dp_replicate = cfg.training.data_parallel_replicate_degree;
  d.dp_shard = cfg.training.data_parallel_shard_degree;
  d.cp = cfg.training.context_parallel_degree;
  d.tp = cfg.training.tensor_parallel_degree;
  d.pp = cfg.experimental.pipeline_parallel_degree;
  d.world_size = world_size;
  d.resolve();
  return d;
}

void ParallelDims::resolve() {
  if (world_size < 1) throw Error("parallel dims: world size must be >= 1, got " + std::to_string(world_size));
  const std::pair<const char*, int64_t> fixed[] = {
      {"data_parallel_replicate_degree", dp_replicate},
      {"context_parallel_degree", cp},
      {"tensor_parallel_degree", tp},
      {"pipeline_parallel_degree", pp}};
  for (const auto& [name, v] : fixed)
    if (v < 1) throw Error(std::string("parallel dims: ") + name + " must be >= 1, got " + std::to_string(v));
  const int64_t others = dp_replicate * cp * tp * pp;
  if (dp_shard == -1) {
    if (world_size % others != 0)
      throw Error("parallel dims: " + std::to_string(world_size) + " ranks do not divide by dp_replicate*cp*tp*pp = " +
                  std::to_string(others) + " (data_parallel_shard_degree = -1 takes the ranks left over)");
    dp_shard = world_size / others;
  }
  if (dp_shard < 1)
    throw Error("parallel dims: data_parallel_shard_degree must be -1 or >= 1, got " + std::to_string(dp_shard));
  if (others * dp_shard != world_size)
    throw Error("parallel dims: " + describe() + " needs " + std::to_string(others * dp_shard) + " ranks, but " +
                std::to_string(world_size) + " were launched (the degrees must multiply to the world size)");
}

std::vector<std::pair<std::string, int64_t>> ParallelDims::mesh_dims() const {
  std::vector<std::pair<std::string, int64_t>> dims;
  const std::pair<const char*, int64_t> ordered[] = {
      {"pp", pp}, {"dp_replicate", dp_replicate}, {"dp_shard", dp_shard}, {"cp", cp}, {"tp", tp}};
  for (const auto& [name, size] : ordered)
    if (size > 1) dims.emplace_back(name, size);
  if (dims.empty()) dims.emplace_back("dp_shard", 1);
  return dims;
}

dist::DeviceMesh ParallelDims::build_mesh(const dist::World& world) const {
  if (world.size() != world_size)
    throw Error("parallel dims: resolved for " + std::to_string(world_size) + " ranks, but the world has " +
                std::to_string(world.size()));
  std::vector<int64_t> shape;
  std::vector<std::string> names;
  for (const auto& [name, size] : mesh_dims()) names.push_back(name), shape.push_back(size);
  dist::DeviceMesh mesh(world, shape, names);
  // The flattened groups exist only when they join two or more of the mesh's
  // own dimensions; a single present dimension is used under its own name by
  // callers (e.g. the "dp" of a pure-FSDP job is the dp_shard group).
  auto flatten_present = [&](const std::vector<std::string>& dims, const std::string& as) {
    std::vector<std::string> present;
    for (const std::string& d : dims)
      if (mesh.has_plain_dim(d)) present.push_back(d);
    if (present.size() >= 2) mesh.flatten(present, as);
  };
  flatten_present({"dp_replicate", "dp_shard"}, "dp");
  flatten_present({"dp_shard", "cp"}, "dp_shard_cp");
  flatten_present({"dp_replicate", "dp_shard", "cp"}, "dp_cp");
  return mesh;
}

std::string ParallelDims::dp_mesh_name() const {
  if (dp_replicate > 1 && dp_shard > 1) return "dp";
  if (dp_replicate > 1) return "dp_replicate";
  if (dp_shard > 1 || world_size == 1) return "dp_shard";
  return "";
}

std::string ParallelDims::describe() const {
  std::string s;
  const std::pair<const char*, int64_t> ordered[] = {
      {"pp", pp}, {"dp_replicate", dp_replicate}, {"dp_shard", dp_shard}, {"cp", cp}, {"tp", tp}};
  for (const auto& [name, size] : ordered) {
    if (size == 1) continue;
    if (!s.empty()) s += " x ";
    s += std::string(name) + "=" + std::to_string(size);
  }
  return s.empty() ? "single rank" : s;
}

}  // namespace titan::parallel
