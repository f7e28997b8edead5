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
  Always,   ///< every unit (not under PP)
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
};

/// @brief [activation_checkpoint], resolved against the model's layers.
struct AcJobOptions {
  /// Per block (by layer id): wrapped in a checkpoint or not.
  std::vector<bool> blocks;
  /// selective_ac_option = "op": per-op SAC (matmul outputs kept).
  bool per_op = false;
  std::vector<std::string> force_recompute_mm_shapes_by_fqns;
  /// The config's names, for the banner (ac::describe_ac).
  std::string mode, selective_ac_option;
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
/// split, CP's sequence split, the pipeline plan and what it rules out
/// (AC with a split backward, reshard "always"), the AC blocks, float8's
/// recipe and its limits with per-op SAC. Throws one line naming the key.
ParallelizeOptions parallelize_options(const config::JobConfig& cfg, const parallel::ParallelDims& dims,
                                       const ModelArgs& args, int64_t local_batch);

/// @brief "float32" or "bfloat16": a dtype as the config names it.
std::string config_dtype_name(at::ScalarType dtype);

}  // namespace titan::models::llama3
