#pragma once
/// @file
/// @brief A job's layout, read from its config once: the mesh's degrees,
/// the batches, the model's shape, the device and every parallelism's
/// options. It is the one reading of a layout that everything about a job
/// takes: the trainer builds from it, `titan estimate` models its memory,
/// `titan verify` counts its communication; none of them reads the
/// config's strings again or restates a rule (the rules are functions on
/// the options: FsdpJobOptions::block_reshards_after_forward,
/// ac::AcPolicy).

#include <c10/core/Device.h>

#include <cstdint>
#include <optional>

#include "titan/config/job_config.hpp"
#include "titan/config/validate.hpp"
#include "titan/models/llama3/model_args.hpp"
#include "titan/models/llama3/parallelize_options.hpp"
#include "titan/parallel/parallel_dims.hpp"

namespace titan::models::llama3 {

/// @brief A job's layout on its world, as the trainer will build it.
struct JobLayout {
  parallel::ParallelDims dims;     ///< the mesh's degrees
  config::BatchPlan batches;       ///< local / global batch, accumulation steps
  ModelArgs args;                  ///< the model's shape
  ParallelizeOptions parallelize;  ///< every parallelism's options, read and checked
  c10::Device device{c10::kCPU};   ///< what the ranks compute on (a planned job's: `titan estimate` models GPUs anywhere)
  /// [optimizer] early_step_in_backward: each parameter stepped as soon as
  /// its gradient is final (refused with PP and DDP).
  bool step_in_backward = false;

  /// @brief Under pipeline parallelism.
  bool pipelined() const { return parallelize.pipeline.has_value(); }
  /// @brief Sequences per micro-batch: the pipeline's, else the local batch.
  int64_t microbatch_sequences() const {
    return pipelined() ? parallelize.pp_microbatch_size : batches.local_batch;
  }
};

/// @brief The model's shape for `cfg`: `given` (a test's or a chapter's
/// model) or [model] flavor's (with n_layers when set), with [training]
/// seq_len, [model] attn_type, attn_mask_type and fused_kernels. Throws a
/// one-line titan::Error for invalid args.
ModelArgs job_model_args(const config::JobConfig& cfg, const std::optional<ModelArgs>& given);

/// @brief The layout of `cfg` on `world_size` ranks computing on `device`
/// (`model_args`: a given model instead of [model] flavor's;
/// `batch_dp_degree`: the data-parallel degree the batches are cut for,
/// when not the layout's own, as a single-process reference reads a
/// parallel job's batches). Throws titan::Error, one line naming the key,
/// for degrees that do not multiply to the world, batches that do not
/// divide, a layout a parallelism refuses.
JobLayout plan_layout(const config::JobConfig& cfg, int64_t world_size, c10::Device device,
                      const std::optional<ModelArgs>& model_args = std::nullopt,
                      std::optional<int64_t> batch_dp_degree = std::nullopt);

}  // namespace titan::models::llama3
