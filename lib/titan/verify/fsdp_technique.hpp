#pragma once
/// @file
/// @brief FSDP (parallel/fsdp, fully_shard) plugged into the equivalence
/// harness (reference_run.hpp): the full gradients and parameters gathered
/// from the shards for the comparison, and the global loss as the average
/// over the data-parallel ranks.

#include <memory>

#include "titan/dist/process_group.hpp"
#include "titan/verify/reference_run.hpp"

namespace torch::nn {
class Module;
}

namespace titan::verify {

/// @brief The Technique that trains `model`, a module already passed to
/// fsdp::fully_shard (it must outlive the run).
///
/// Forward and backward need nothing from the harness (the units gather and
/// reduce-scatter on their own); full_grads / full_params all-gather every
/// shard (collective, filed under kBookkeepingStep by run_steps, so a step's
/// CommLog records stay FSDP's own). `dp_group` spans every rank that
/// trains on its own slice of the batch — with HSDP both mesh dimensions,
/// i.e. the world in a pure data-parallel job; the global loss is the
/// average over it.
Technique fsdp_technique(torch::nn::Module& model, std::shared_ptr<dist::ProcessGroup> dp_group);

/// @brief The full tensors behind a fully_shard-ed module's parameters, or
/// with `grads` their gradients (zeros where none was computed), by name in
/// registration order, as CPU copies. Collective over the module's meshes.
NamedTensors gather_full(torch::nn::Module& model, bool grads);

}  // namespace titan::verify
