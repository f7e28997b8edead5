#pragma once
/// @file
/// @brief What a model needs to run context-parallel: the cp group and how
/// the sequence is cut and rotated. The trainer sets it on the model
/// (Transformer::set_context_parallel); attention then runs ring attention
/// over the group and RoPE takes the positions this rank holds.

#include <ATen/core/Tensor.h>

#include <memory>

#include "titan/parallel/context_parallel/ring_attention.hpp"

namespace titan::dist {
class ProcessGroup;
}

namespace titan::cp {

/// @brief A model's context-parallel setting.
struct ContextParallel {
  std::shared_ptr<dist::ProcessGroup> group;  ///< the cp ranks (mesh["cp"])
  RingAttentionOptions attention;             ///< layout (cp = group size), rotate method

  /// This rank's index in the cp group.
  int64_t rank() const;
  /// The positions this rank holds of a `seq_len`-token sequence (CPU int64).
  at::Tensor positions(int64_t seq_len) const;
};

/// @brief The setting for `group` (validating that the layout fits it).
std::shared_ptr<const ContextParallel> make_context_parallel(std::shared_ptr<dist::ProcessGroup> group,
                                                             LoadBalance balance, RotateMethod rotate);

}  // namespace titan::cp
