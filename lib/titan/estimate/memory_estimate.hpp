#pragma once
/// @file
/// @brief `titan estimate`: the memory each rank needs and the FLOPs of a
/// step, for a job config on a world size, without running it — the
/// model is built on the meta device, so 405B costs nothing.
///
/// Per rank: the parameter shards (fp32 master weights, after TP's split
/// and FSDP's padded dim-0 shards), their gradients, AdamW's two moments,
/// DDP's gradient buckets, the activations of activations.hpp, FSDP's
/// gathered (unsharded) weights and the transients of backward. The peak is
/// the largest of three moments of a step, walked as the trainer runs it:
///
/// 1. the start of backward: every kept activation, the loss end's saved
///    tensors and the logits' gradient, FSDP's root unit and the last block
///    still gathered (the blocks before it were resharded after forward);
/// 2. the backward of block i (last to first): the gradients of the blocks
///    after it, the activations of the blocks before it, block i's own
///    saved set (rebuilt by the recompute when it is checkpointed) and the
///    gradients flowing through it; under FSDP also block i's and the
///    next-to-run block's gathered weights, the reduce-scatter buffer of
///    the block just done and the root unit's unsharded gradients;
/// 3. the end of backward: every gradient, with the root unit's reduction.
///
/// Pipeline ranks hold several micro-batches' activations at once: how many
/// per stage comes from the schedule itself (pp::compute_actions), and the
/// estimate takes that many on top of every gradient (an upper bound).
///
/// Validated against the counting allocator's measured peak on the CPU
/// (tests/estimate, docs/estimate.md): 1, 2 and 4 ranks, FSDP and DDP,
/// within a few percent.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "titan/config/job_config.hpp"
#include "titan/models/llama3/job_layout.hpp"
#include "titan/models/llama3/model_args.hpp"
#include "titan/parallel/parallel_dims.hpp"

namespace titan::estimate {

/// @brief One pipeline rank's estimate (every rank of a pp stage is alike
/// but for FSDP's padding, which the estimate includes).
struct RankMemory {
  int pp_rank = 0;
  std::vector<int> stages;      ///< global stage indices this rank runs
  int64_t parameters = 0;       ///< this rank's parameter shards (fp32)
  int64_t gradients = 0;        ///< their gradients after the step's reductions (fp32)
  int64_t optimizer_state = 0;  ///< AdamW's exp_avg and exp_avg_sq
  int64_t ddp_buckets = 0;      ///< DDP's flat gradient buckets (DDP only)
  /// At the peak: activations kept for backward (all micro-batches in flight).
  int64_t activations = 0;
  /// At the peak: weights alive in the compute dtype besides the fp32 ones:
  /// FSDP's unsharded (param dtype), or autocast's casts without FSDP.
  int64_t fsdp_gathered = 0;
  int64_t gradients_at_peak = 0;  ///< at the peak: gradients already made (incl. unsharded ones)
  int64_t transient = 0;        ///< at the peak: backward's gradients in flight, reduce-scatter buffers
  int64_t peak = 0;             ///< the sum: the estimated peak of tensor memory
  std::string peak_phase;       ///< "start of backward", "backward of layers.0", ...
  int64_t microbatches_in_flight = 1;  ///< the most micro-batches' activations held at once
};

/// @brief The whole job's estimate.
struct JobEstimate {
  std::string flavor;            ///< [model] flavor
  models::llama3::ModelArgs args;
  parallel::ParallelDims dims;
  std::string layout;            ///< "dp_shard=4, FSDP fp32 params, no AC, ..."
  int64_t parameters = 0;        ///< whole model
  std::string param_dtype = "float32";  ///< what the parameters are stored in ([training] dtype)
  int64_t tokens_per_step = 0;   ///< global: batch · seq · data-parallel ranks · accumulation
  double flops_per_token = 0;    ///< training FLOPs per token (models/llama3/flops.hpp)
  double flops_per_step = 0;     ///< whole job, model FLOPs (recompute not counted, as MFU)
  double recompute_flops_per_step = 0;  ///< extra forward FLOPs activation checkpointing adds
  std::vector<RankMemory> ranks;  ///< one per pipeline rank
  std::vector<std::string> notes;  ///< what the estimate leaves out for this job
  /// The rank with the highest peak.
  const RankMemory& worst() const;
};

/// @brief Estimates a job of `layout` (the trainer's own reading of its
/// config, models/llama3/job_layout.hpp): its memory per pipeline rank on
/// layout.device and its FLOPs. JobEstimate::flavor is "custom" (the
/// layout holds the model's shape, not its name).
JobEstimate estimate_job(const models::llama3::JobLayout& layout);

/// @brief Estimates `cfg` on `world_size` ranks: its layout read as the
/// trainer reads it (models::llama3::plan_layout: titan::Error, one line,
/// on a config the trainer would refuse for its degrees, schedule or AC
/// option), on the device `titan train` would pick on this machine.
/// `model_args` replaces the flavor's (as TrainerOptions::model_args does
/// for the trainer: a custom width or depth).
JobEstimate estimate_job(const config::JobConfig& cfg, int64_t world_size,
                         const std::optional<models::llama3::ModelArgs>& model_args = std::nullopt);

/// @brief `cfg` as `titan estimate` models it: a job planned for GPUs, as
/// torchtitan's estimation.py does. [training] device "auto" becomes
/// "cuda": on a machine without a GPU "auto" would model the job as it runs
/// there (Gloo's reduce-scatter copies, titan's CPU kernels, fp32 compute
/// without FSDP), not as it runs on the GPUs it is planned for. An explicit
/// "cpu" is kept (a CPU job's numbers, noted in the output).
config::JobConfig planned_for_gpus(config::JobConfig cfg);

/// @brief The estimate as a table plus torchtitan's estimation.py lines
/// ("Estimated model size: ...", "Total estimated GPU memory: ...",
/// "Estimated FLOP per step: ...").
std::string format_estimate(const JobEstimate& e);

}  // namespace titan::estimate
