#pragma once
/// @file
/// @brief DTensor: a tensor spread over a DeviceMesh — this rank's local
/// piece, the mesh, one Placement per mesh dimension and the global shape —
/// with autograd-aware redistribution between placements.

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "titan/dist/device_mesh.hpp"
#include "titan/dtensor/placement.hpp"

namespace titan {

/// @brief A distributed tensor (in the manner of torch.distributed.tensor).
///
/// The local tensor carries autograd: redistribute() and full_tensor() are
/// differentiable, with torch's rule that the gradient of a redistribution
/// from placements A to B is the gradient's redistribution from B back to A,
/// where a Partial in A is read as Replicate (the gradient of a sum is the
/// same on every contributor).
class DTensor {
 public:
  DTensor() = default;
  /// Wraps `local` as this rank's piece. `global_shape` empty means "infer",
  /// which assumes every Shard is even (local size × mesh size).
  DTensor(at::Tensor local, std::shared_ptr<const dist::DeviceMesh> mesh, Placements placements,
          std::vector<int64_t> global_shape = {});

  const at::Tensor& local() const { return local_; }
  at::Tensor& local() { return local_; }
  const dist::DeviceMesh& mesh() const { return *mesh_; }
  const std::shared_ptr<const dist::DeviceMesh>& mesh_ptr() const { return mesh_; }
  const Placements& placements() const { return placements_; }
  const std::vector<int64_t>& shape() const { return global_shape_; }
  int64_t numel() const;

  /// Shape of this rank's piece as the placements and global shape dictate.
  std::vector<int64_t> local_shape() const;
  /// Offset of this rank's piece in the global tensor, per tensor dim.
  std::vector<int64_t> local_offset() const;

  /// The same logical tensor in `placements` (autograd-aware).
  DTensor redistribute(const Placements& placements) const;
  /// Like redistribute(placements), but states where the *gradient* of the
  /// result lies (torch's `to_local(grad_placements=...)`): backward reads
  /// the incoming local gradient as `grad_placements` and moves it to this
  /// tensor's placements. Tensor parallelism needs it because a Replicate
  /// activation consumed by sharded matmuls gets a Partial gradient (each
  /// rank holds its share of the sum), which plain DTensor bookkeeping on
  /// local tensors cannot see.
  DTensor redistribute(const Placements& placements, const Placements& grad_placements) const;
  /// The whole tensor on every rank (autograd-aware).
  at::Tensor full_tensor() const;

 private:
  at::Tensor local_;
  std::shared_ptr<const dist::DeviceMesh> mesh_;
  Placements placements_;
  std::vector<int64_t> global_shape_;
};

/// @brief Cuts `full` (the same tensor on every rank) into this rank's piece
/// for `placements` (Shard and Replicate only; make Partial with the
/// DTensor constructor). The slice keeps autograd to `full`.
DTensor distribute_tensor(const at::Tensor& full, std::shared_ptr<const dist::DeviceMesh> mesh,
                          const Placements& placements);

/// @brief The shape of the local piece of a `global_shape` tensor at mesh
/// coordinate `coord` (shards nested in mesh-dimension order).
std::vector<int64_t> local_shape_at(const std::vector<int64_t>& global_shape, const dist::DeviceMesh& mesh,
                                    const Placements& placements, const std::vector<int64_t>& coord);

/// @brief Redistributes a local piece without autograd (the engine under
/// DTensor::redistribute; FSDP and TP call it on raw buffers).
at::Tensor redistribute_local(const at::Tensor& local, const dist::DeviceMesh& mesh,
                              const std::vector<int64_t>& global_shape, const Placements& from,
                              const Placements& to);

}  // namespace titan
