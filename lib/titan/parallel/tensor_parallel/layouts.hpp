#pragma once
/// @file
/// @brief Activations under tensor parallelism: a local tensor plus the
/// layout (a Placement on the 1-D TP mesh) it is known to have, moved
/// between layouts with autograd through DTensor::redistribute.
///
/// torch's DTensor carries an activation's layout in its type, so a style
/// can tell "a DTensor that PrepareModuleInput already made Replicate" from
/// "a plain tensor I must interpret". LibTorch's modules pass plain tensors,
/// so titan tags the activations a style hands on as DTensors
/// (use_local_output = false) in a small side table keyed by the tensor
/// itself; the next style looks the tag up. A tag lives exactly as long as
/// its tensor (weak reference), so nothing needs clearing.

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <vector>

#include "titan/dist/device_mesh.hpp"
#include "titan/dtensor/placement.hpp"

namespace titan::tp {

/// @brief Moves `local` (this rank's piece of an activation laid out as
/// `from` on the 1-D `mesh`) to layout `to` and returns the new local piece.
///
/// Differentiable: backward moves the gradient from `grad_of_result`
/// (default: `to`, Partial read as Replicate) back to `from`. Shard dims
/// may be negative (from the end). `global_shape` is inferred from `local`
/// assuming even shards unless given (Colwise outputs of an uneven
/// vocabulary pass it). No copy and no autograd node when nothing changes.
at::Tensor redistribute_activation(const at::Tensor& local, const std::shared_ptr<const dist::DeviceMesh>& mesh,
                                   Placement from, Placement to,
                                   std::optional<Placement> grad_of_result = std::nullopt,
                                   std::vector<int64_t> global_shape = {});

/// @brief Marks `t` as a DTensor activation in `layout` (what torch's
/// styles return with use_local_output = false). `reduces_partial_gradient`
/// says that the producer already treats the gradient arriving at `t` as
/// Partial and reduces it (PrepareModuleInput does, for its sharded
/// children); a consumer must then not reduce it again.
void tag_layout(const at::Tensor& t, Placement layout, bool reduces_partial_gradient = false);

/// @brief True when `t` is tagged and its producer reduces its Partial gradient.
bool tag_reduces_partial_gradient(const at::Tensor& t);

/// @brief The layout `t` was tagged with, if it was and is still alive.
std::optional<Placement> tagged_layout(const at::Tensor& t);

/// @brief `p` with a negative Shard dim made positive for a `ndim`-D tensor.
Placement normalized(Placement p, int64_t ndim);

}  // namespace titan::tp
