#pragma once
/// @file
/// @brief Tensor parallelism (parallel/tensor_parallel, parallelize_module)
/// plugged into the equivalence harness (reference_run.hpp): the full
/// gradients and parameters gathered from the TP pieces, so that a TP run
/// compares tensor by tensor with the single-process reference.
///
/// TP does not split the batch: every rank of the TP group trains on the
/// whole global batch, and every rank's loss is the whole batch's. So a TP
/// run is run_steps(spec, model, optimizer, /*rank=*/0, /*world=*/1, ...)
/// on every rank, with this technique; no loss averaging is needed.

#include <c10/core/Device.h>

#include "titan/verify/reference_run.hpp"

namespace torch::nn {
class Module;
}

namespace titan::verify {

/// @brief The Technique that trains `model`, a module already passed to
/// tp::parallelize_module (it must outlive the run). full_grads /
/// full_params all-gather every TP-sharded tensor over the TP mesh (on
/// `comm_device`; collective, filed by run_steps under kBookkeepingStep).
Technique tp_technique(torch::nn::Module& model, c10::Device comm_device);

/// @brief The full tensors behind a parallelize_module-d module's
/// parameters, or with `grads` their gradients (zeros where none was
/// computed), by name in registration order, as CPU copies. Collective
/// over the TP mesh.
NamedTensors gather_tp_full(torch::nn::Module& model, bool grads, c10::Device comm_device);

}  // namespace titan::verify
