#pragma once
/// @file
/// @brief The equivalence harness every parallel chapter, test and lab
/// shares: a tiny seeded Llama 3, seeded global batches, one training loop
/// that a technique plugs into, the single-process reference run, and the
/// comparison of two runs (loss, every gradient, every parameter).
///
/// It sits above models/, train/ and parallel/ (it uses them; nothing in
/// them uses it), so a technique's adapter lives here too, next to the
/// harness, and never in parallel/.
///
/// The reference is the same loop on one process over the whole global
/// batch, with no technique plugged in; a parallel run slices the same
/// global batch by rank. So the only difference between the two is the
/// technique under test.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "titan/optim/adam_state.hpp"
#include "titan/dist/process_group.hpp"
#include "titan/models/llama3/transformer.hpp"
#include "titan/optim/optimizer.hpp"

namespace torch::optim {
class Optimizer;
}

namespace titan::verify {

/// @brief Tensors by parameter name, in registration order.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// @brief A Llama 3 small enough to train in milliseconds: dim 64, 2 layers,
/// 4 query / 2 key-value heads, and a vocabulary of 131 — odd on purpose, so
/// that tok_embeddings and output have a first dimension no world size
/// divides (FSDP pads it; DDP must not care).
models::llama3::ModelArgs tiny_llama_args();

/// @brief A smaller Llama 3 whose first dimensions split unevenly on 2 and
/// 4 ranks, for sharding (FSDP tests, lab 02): dim 18 (not a multiple of
/// 4), 2 layers, 3 query / 1 key-value heads (wk and wv have 6 rows: 2, 2,
/// 2, 0 on 4 ranks) and a vocabulary of 61 (divides by neither).
models::llama3::ModelArgs uneven_llama_args();

/// @brief Everything that fixes a small, deterministic training run.
struct RunSpec {
  models::llama3::ModelArgs model = tiny_llama_args();  ///< model shape
  int64_t global_batch = 8;  ///< sequences per step, summed over ranks
  int64_t seq_len = 16;      ///< tokens per sequence
  int64_t steps = 3;         ///< optimizer steps
  int64_t grad_accum = 1;    ///< micro-batches per step on every rank
  int64_t model_seed = 1234; ///< seed of the weight initialisation
  int64_t data_seed = 4321;  ///< seed of the token batches (own generator)
  at::ScalarType dtype = at::kFloat;  ///< parameter (and so gradient) dtype
  c10::Device device = c10::Device(c10::kCPU);  ///< where the model trains
  optim::OptimizerOptions optimizer = default_optimizer();  ///< AdamW settings

  /// AdamW with a learning rate high enough (1e-3) that parameters move
  /// visibly in a few steps; the rest are torchtitan's defaults.
  static optim::OptimizerOptions default_optimizer();
  /// Throws titan::Error when the batch cannot be split over `world` ranks
  /// and grad_accum micro-batches, or a count is not positive.
  void validate(int world) const;
};

/// @brief Parses "fp32"/"float32" or "bf16"/"bfloat16"; titan::Error otherwise.
at::ScalarType parse_dtype(const std::string& name);

/// @brief The model of `spec`, initialised from `seed` (torchtitan's init),
/// in spec.dtype on spec.device. The same seed gives the same weights on
/// every rank.
models::llama3::Transformer build_model(const RunSpec& spec, int64_t seed);

/// @brief The global batch of step `step` (1-based): global_batch sequences
/// of seq_len + 1 tokens, drawn from a generator seeded with data_seed and
/// the step, so it does not disturb (or depend on) torch's global RNG.
at::Tensor global_tokens(const RunSpec& spec, int64_t step);

/// @brief One micro-batch: inputs and next-token labels.
struct MicroBatch {
  at::Tensor inputs;  ///< [batch, seq_len] int64 on spec.device
  at::Tensor labels;  ///< [batch, seq_len] int64 on spec.device
};

/// @brief Rank `rank`'s share of step `step`: rows [rank·B/world,
/// (rank+1)·B/world) of the global batch, cut into grad_accum micro-batches.
std::vector<MicroBatch> local_micro_batches(const RunSpec& spec, int64_t step, int rank, int world);

/// @brief What one step left behind.
struct StepResult {
  double loss = 0;      ///< mean loss over the global batch
  NamedTensors grads;   ///< full gradients used by the optimizer step (CPU copies)
  NamedTensors params;  ///< full parameters after the step (CPU copies)
  double seconds = 0;   ///< wall time of the step (forward, backward, sync, optimizer)
};

/// @brief A whole run: the starting parameters and every step.
struct Trajectory {
  NamedTensors initial_params;   ///< full parameters before step 1 (CPU copies)
  std::vector<StepResult> steps; ///< one per step
};

/// @brief The parts of a training step a parallel technique changes. Every
/// member is optional; the defaults are the single-process behaviour.
struct Technique {
  /// At the start of step `step` (1-based), before its first forward; runs
  /// under the step's CommLog number (e.g. FSDP opens a peak-memory window).
  std::function<void(int64_t step)> begin_step;
  /// Runs `backward` for micro-batch `micro` of `count` (DDP wraps all but
  /// the last in no_sync).
  std::function<void(int64_t micro, int64_t count, const std::function<void()>& backward)> backward;
  /// Replaces the whole forward / loss / backward loop over this rank's
  /// micro-batches (a pipeline schedule runs them its own way): must leave
  /// the gradients of the mean loss over them in .grad and return that mean
  /// loss. Empty = the plain loop (with `backward` above).
  std::function<double(const std::vector<MicroBatch>& micro)> forward_backward;
  /// After the last backward, before the optimizer step.
  std::function<void()> before_step;
  /// Full (unsharded) gradients / parameters, as a single process holds them.
  std::function<NamedTensors()> full_grads;
  std::function<NamedTensors()> full_params;
  /// Turns this rank's per-step losses into the global batch's (DDP: the
  /// average over ranks, as every rank has an equal share).
  std::function<std::vector<double>(const std::vector<double>&)> global_losses;
};

/// @brief Technique::global_losses for data-parallel runs: every rank
/// trained on an equal share of the global batch, so the global loss is the
/// average of the ranks' losses (one all-reduce for all steps at once).
std::function<std::vector<double>(const std::vector<double>&)> average_over(
    std::shared_ptr<dist::ProcessGroup> group);

/// @brief CommLog step number under which run_steps does its bookkeeping
/// (snapshots, loss averaging), so that step k's records hold only what
/// the technique communicated in step k.
constexpr int64_t kBookkeepingStep = -1;

/// @brief Trains `model` with `optimizer` for spec.steps steps on this
/// rank's micro-batches, with `technique` plugged in; CommLog step k holds
/// step k's communication. Collective when the technique is.
Trajectory run_steps(const RunSpec& spec, models::llama3::Transformer& model, torch::optim::Optimizer& optimizer,
                     int rank, int world, const Technique& technique = {});

/// @brief The single-process reference: build_model(spec, spec.model_seed),
/// AdamW, run_steps over the whole global batch.
Trajectory train_reference(const RunSpec& spec);

/// @brief The optimizer run_steps expects: spec.optimizer over `params`.
std::unique_ptr<torch::optim::Optimizer> build_optimizer(const RunSpec& spec, std::vector<at::Tensor> params);

/// @brief The model's parameters, or their gradients, as CPU copies by name.
NamedTensors snapshot_params(torch::nn::Module& model);
NamedTensors snapshot_grads(torch::nn::Module& model);

/// @brief How close two runs must be: |got − ref| ≤ atol + rtol·|ref|,
/// element by element (numpy's allclose).
struct Tolerance {
  double rtol = 1e-5;  ///< relative part
  double atol = 1e-6;  ///< absolute part, for elements near zero
};

/// @brief The largest differences between two sets of named tensors.
struct TensorDiff {
  double max_abs = 0;        ///< largest |got − ref| over all tensors
  std::string worst;         ///< name of the tensor holding it
  double worst_excess = 0;   ///< largest |got − ref| − (atol + rtol·|ref|); ≤ 0 passes
  std::string worst_excess_name;  ///< name of the tensor with the largest excess
  bool ok() const { return worst_excess <= 0; }
};

/// @brief Compares tensor by tensor (names and shapes must match, else
/// titan::Error naming the first mismatch).
TensorDiff compare(const NamedTensors& ref, const NamedTensors& got, const Tolerance& tol);

/// @brief One step of two runs side by side.
struct StepDiff {
  double ref_loss = 0, got_loss = 0;
  double loss = 0;    ///< |Δloss|
  TensorDiff grads;   ///< over every gradient
  TensorDiff params;  ///< over every parameter after the step
  bool loss_ok = true;
  bool ok() const { return loss_ok && grads.ok() && params.ok(); }
};

/// @brief Compares two trajectories step by step: losses and gradients
/// against `tol` (loss: atol + rtol·|ref loss|), parameters after each
/// optimizer step against `param_tol`.
std::vector<StepDiff> compare(const Trajectory& ref, const Trajectory& got, const Tolerance& tol,
                              const Tolerance& param_tol);

/// @brief The fp32 parameter tolerance after AdamW steps of rate `lr`:
/// 1e-5 relative + lr/100 absolute. Adam normalises each update to about lr
/// whatever the gradient's size, so an element whose gradient is within
/// rounding of zero can move by a visibly different amount in two runs
/// that differ only in summation order (measured: 4.9e-6 at lr 1e-3).
/// Gradients are compared tightly; this only covers the optimizer's
/// amplification of their rounding.
Tolerance adam_param_tolerance(double lr);

/// @brief Bytes of a set of tensors (numel × element size).
int64_t tensor_bytes(const NamedTensors& tensors);
/// @brief Bytes the optimizer keeps per parameter (optim/adam_state.hpp).
using optim::optimizer_state_bytes;

}  // namespace titan::verify
