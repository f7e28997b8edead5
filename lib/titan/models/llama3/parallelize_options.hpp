#pragma once
/// @file
/// @brief Everything parallelize_llama applies, read from the JobConfig
/// once: every string converted to its technique's type (enums, dtypes,
/// the blocks to checkpoint, the pipeline plan) and every layout rule
/// checked, each failure one line naming the key. The trainer builds it
/// before it joins the job, so a bad config fails alike on every rank and
/// before any collective; the composition then hands each technique its
/// own options, not the JobConfig (as torchtitan hands each component its
/// own config section).

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "titan/models/llama3/model_args.hpp"
#include "titan/models/llama3/pipeline.hpp"
#include "titan/models/llama3/tp_plan.hpp"
#include "titan/parallel/activation_checkpoint/checkpoint.hpp"
#include "titan/parallel/context_parallel/ring_attention.hpp"
#include "titan/parallel/context_parallel/sharding.hpp"
#include "titan/parallel/float8/float8_linear.hpp"

namespace titan::config {
struct JobConfig;
}
namespace titan::parallel {
struct ParallelDims;
}

namespace titan::models::llama3 {

/// @brief [training] fsdp_reshard_after_forward.
enum class ReshardAfterForward {
  Default,  ///< every unit but the last block's, and none under PP (torchtitan's "default")
  Always,   ///< every unit, also under PP (each micro-batch's backward gathers again)
  Never,    ///< none: the unsharded weights stay from forward to backward
};

/// @brief What FSDP is asked for ([training] mixed_precision_param,
/// mixed_precision_reduce, enable_cpu_offload, fsdp_reshard_after_forward,
/// fsdp_reduce_scatter_per_microbatch).
struct FsdpJobOptions {
  at::ScalarType param_dtype = at::kFloat;
  at::ScalarType reduce_dtype = at::kFloat;
  bool cpu_offload = false;
  ReshardAfterForward reshard = ReshardAfterForward::Default;
  /// Under PP: reduce-scatter each micro-batch's gradients (true) or sum
  /// them unsharded until the step's last backward (false, torch's
  /// pipelining). Without PP every micro-batch is reduce-scattered anyway.
  bool reduce_scatter_per_microbatch = false;

  /// @brief Whether a block's FSDP unit frees its gathered weights after
  /// its forward (torch FSDP2's reshard_after_forward), the one statement
  /// of the rule that parallelize_llama applies and the estimate and the
  /// communication count model. "default": all but the model's last block
  /// (its backward runs first, right after forward: freeing its weights
  /// only to gather them again at once is waste), and none under PP
  /// (several micro-batches' forwards run before their backwards and share
  /// the weights: torchtitan's reshard_after_forward = not pp_enabled).
  bool block_reshards_after_forward(bool last_block, bool pipelined) const {
    switch (reshard) {
      case ReshardAfterForward::Always: return true;
      case ReshardAfterForward::Never: return false;
      case ReshardAfterForward::Default: break;
    }
    return !pipelined && !last_block;
  }

  /// @brief The root unit's setting (the embedding, final norm and output):
  /// as a block's that is not the last. FSDP2 keeps a root's weights from
  /// forward to backward whatever it is told (backward starts with them).
  bool root_reshards_after_forward(bool pipelined) const {
    return block_reshards_after_forward(/*last_block=*/false, pipelined);
  }
};

/// @brief [activation_checkpoint], resolved against the model's layers.
struct AcJobOptions {
  /// mode and selective_ac_option, read (per_op(): matmul outputs kept).
  ac::AcPolicy policy;
  /// Per block (by layer id): wrapped in a checkpoint or not (policy.blocks).
  std::vector<bool> blocks;
  /// Per-op SAC: weights (by FQN substring) whose matmuls are recomputed anyway.
  std::vector<std::string> force_recompute_mm_shapes_by_fqns;
};

/// @brief [float8], with what the layout decides: the float8 all-gather
/// only where FSDP shards, and its precomputed scales only with it.
struct Float8JobOptions {
  bool enable = false;
  std::vector<std::string> filter_fqns;
  float8::Recipe recipe = float8::Recipe::Tensorwise;
  bool fsdp_float8_all_gather = false;
  bool precompute_scales = false;
  bool emulate = false;  ///< emulated GEMMs on GPUs (float8::set_emulated_gemms)
};

/// @brief What parallelize_llama applies, besides the degrees themselves.
struct ParallelizeOptions {
  /// [training] dtype: what the parameters are stored in (and, without
  /// FSDP's cast, what a pipeline stage computes and sends).
  at::ScalarType param_storage_dtype = at::kFloat;
  FsdpJobOptions fsdp;
  TpOptions tp;
  int64_t seq_len = 0;                                   ///< [training] seq_len
  cp::LoadBalance cp_load_balance = cp::LoadBalance::head_tail;
  cp::RotateMethod cp_rotate = cp::RotateMethod::allgather;
  AcJobOptions ac;
  Float8JobOptions float8;
  /// With pp > 1: the cut and the schedule (plan_pipeline), and the
  /// sequences per pipeline micro-batch.
  std::optional<PipelinePlan> pipeline;
  int64_t pp_microbatch_size = 1;
};

/// @brief Reads and checks everything parallelize_llama needs from `cfg`
/// for a job of `dims` on a model of `args` with `local_batch` sequences
/// per data-parallel rank: TP divisibility and sequence parallelism's
/// split, CP's sequence split, the pipeline plan (plan_pipeline: stages,
/// schedule, micro-batches), the AC policy and its blocks, float8's recipe
/// (rowwise refused inside async TP). Throws one line naming the key.
/// plan_layout (job_layout.hpp) calls it; everything else takes the
/// JobLayout.
ParallelizeOptions parallelize_options(const config::JobConfig& cfg, const parallel::ParallelDims& dims,
                                       const ModelArgs& args, int64_t local_batch);

/// @brief "float32" or "bfloat16": a dtype as the config names it.
std::string config_dtype_name(at::ScalarType dtype);

}  // namespace titan::models::llama3
