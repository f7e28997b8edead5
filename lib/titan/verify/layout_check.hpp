#pragma once
/// @file
/// @brief `titan verify`: a job's parallel layout against one process, for
/// a few steps, on the same global batches — the trainer's own equivalence
/// test, run on a user's config.
///
/// Both runs are the trainer (train/trainer.hpp), driven step by step: the
/// layout on every rank of the job, then on rank 0 the single-process
/// reference that reads every data-parallel rank's batches
/// (single_process_reference). After each step the parallel run's weights are
/// gathered whole and kept; the reference's are compared with them after
/// its same step. Both run in fp32 (mixed precision off), so the bounds are
/// those of fp32 rounding, set from the equivalence matrix of
/// docs/chapters/12-capstone.md: over its 102 fp32 comparisons (2 to 16
/// ranks, 3 to 6 steps) losses and gradient norms agreed to 1.7e-7
/// relative and weights to 1.3e-4 absolute at worst (TP 2 under oneDNN's
/// GEMM; 7.0e-5 with aten::mm's), so the default bounds are 1e-6 and
/// 2.5e-4. A layout that drops an average, a micro-batch or a shard moves
/// them by 1e-3 and more.
///
/// With a resume (LayoutCheckOptions::resume_at) the layout's run saves a
/// checkpoint after that step and ends; a new run of the layout (or of
/// another one, resume_as) loads it and trains the remaining steps, while
/// the reference runs on uninterrupted: a checkpoint that leaves out any
/// of the state a step depends on (optimizer moments, the LR schedule,
/// the data's position, the RNG) diverges like any other bug.
///
/// With [validation] enabled both runs validate when it is due, and the
/// held-out losses are judged as the training losses are.
///
/// Beside the numbers, each step's communication on rank 0, per mesh
/// dimension, is set against the analytic count of verify/comm_count.hpp.
/// A difference is reported (it is about titan's algorithms, not the
/// user's config) but does not fail the check: the verdict is about the
/// numbers.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "titan/config/job_config.hpp"
#include "titan/train/job_layout.hpp"
#include "titan/verify/comm_count.hpp"

namespace titan::verify {

/// @brief What `titan verify` runs and how strictly it judges.
struct LayoutCheckOptions {
  int64_t steps = 3;             ///< optimizer steps of each run
  std::string flavor = "debugmodel";  ///< model size both runs use ("" = the config's)
  double rel_tol = 1e-6;         ///< relative bound on step losses and gradient norms
  double weight_tol = 2.5e-4;    ///< absolute bound on every weight after each step
  /// With float8 linears, the relative bound on losses and gradient norms;
  /// weights are not judged. When the two runs' fp32 sums differ in order
  /// (any layout but a bitwise one), an element near a float8 rounding
  /// boundary lands on the other neighbour; the debug model measured up to
  /// 1.6e-5 on losses and 5.5e-5 on gradient norms over 3 steps (a pipeline
  /// or context-parallel rank scaling its own micro-batch or shard
  /// included). Weights move by ±lr in AdamW's first steps whatever a
  /// gradient's size, so a near-zero gradient whose sign flips is 2·lr
  /// apart (measured 5.3e-4 at lr 2.7e-4): no weight bound separates that
  /// from a bug.
  double float8_rel_tol = 5e-4;
  /// After this step the layout's run saves a checkpoint ([checkpoint]
  /// async_mode and exclude_from_loading as the config says) and ends, and
  /// a new run loads it for the remaining steps; 0 = one uninterrupted run.
  /// Must be below `steps`.
  int64_t resume_at = 0;
  /// With resume_at, the config the new run resumes as (another layout of
  /// the same ranks: check_resume_layout); none = the same config.
  std::optional<config::JobConfig> resume_as;
};

/// @brief One step of the comparison.
struct LayoutCheckStep {
  int64_t step = 0;
  double loss = 0, ref_loss = 0, loss_rel = 0;
  double grad_norm = 0, ref_grad_norm = 0, grad_norm_rel = 0;
  double max_weight_diff = 0;
  std::string worst_parameter;  ///< where max_weight_diff is
  /// Largest |weight difference| per parameter group ("tok_embeddings",
  /// "layers.0.attention", "layers.0.ffn_norm", "norm", "output", ...).
  std::map<std::string, double> group_diff;
  /// What rank 0 sent per mesh dimension (ProcessGroup name) and kind of
  /// op in the step, as the CommLog recorded it.
  StepComm comm;
  /// The analytic count of the same (verify/comm_count.hpp); empty when
  /// the layout is not modelled.
  StepComm expected_comm;
  /// Where the two differ, one line each (comm_differences).
  std::vector<std::string> comm_differences;
  /// [validation] after this step (when the config enables it and it is
  /// due): the layout's held-out loss and one process's over the same
  /// batches of every data-parallel rank, judged as the step's loss is.
  std::optional<double> val_loss, ref_val_loss;
  double val_loss_rel = 0;
  bool passed = false;  ///< the numbers: loss, gradient norm, weights, validation loss
};

/// @brief The whole comparison.
struct LayoutCheckReport {
  std::string layout;     ///< the parallel run's description, e.g. "FSDP 2 x TP 2"
  /// With a resume: the resumed run's layout (= layout unless resume_as)
  /// and how the checkpoint was saved ("sync", "async", ...).
  std::string resumed_layout, resume_save_mode;
  int world_size = 1;
  int64_t emulated_ranks = 1;  ///< data-parallel ranks the reference reads for
  std::vector<LayoutCheckStep> steps;  ///< filled on rank 0 only
  LayoutCheckOptions options;
  /// Why no analytic count of the communication was made ("" when it was).
  std::string comm_not_modelled_because;
  /// Both runs' block linears compute in float8: losses and gradient
  /// norms are judged at options.float8_rel_tol, weights are shown only
  /// (see LayoutCheckOptions::float8_rel_tol).
  bool float8 = false;
  /// @brief The relative bound on losses and gradient norms this check applied.
  double rel_bound() const { return float8 ? options.float8_rel_tol : options.rel_tol; }
  /// The first step that failed, 0 when all passed (rank 0 only).
  int64_t first_failed_step() const;
  /// The first step whose communication differs from the analytic count, 0 when none.
  int64_t first_comm_difference_step() const;
};

/// @brief Whether step `s` is within `r`'s bounds: its loss, gradient norm
/// and validation loss at r.rel_bound(), its weights at the weight bound
/// (not judged with float8 linears). A NaN difference is outside.
bool step_within_bounds(const LayoutCheckStep& s, const LayoutCheckReport& r);

/// @brief The group a parameter's difference is reported under:
/// "layers.3.attention.wq.weight" -> "layers.3.attention",
/// "tok_embeddings.weight" -> "tok_embeddings".
std::string parameter_group(const std::string& name);

/// @brief `cfg` as both runs train it: `options.steps` steps, the flavor,
/// fp32 parameters and reductions, and nothing written but the metrics of
/// a scratch dump folder (checkpointing, profiling and TensorBoard off;
/// [validation] as the config says: both runs validate and are compared).
config::JobConfig layout_check_config(config::JobConfig cfg, const LayoutCheckOptions& options);

/// @brief Throws a one-line titan::Error unless a run laid out as
/// `resumed` can continue the checkpoint of one laid out as `saved` on the
/// same batches: the same data-parallel degree (another one restarts the
/// data streams), local and global batch and sequence length. The other
/// degrees may differ: the checkpoint reshards.
void check_resume_layout(const train::JobLayout& saved, const train::JobLayout& resumed);

/// @brief Runs the comparison. Collective: every rank of the job calls it
/// (the parallel run); rank 0 then also runs the reference and fills the
/// steps. Throws titan::Error for a config the trainer refuses.
LayoutCheckReport check_layout(const config::JobConfig& cfg, const LayoutCheckOptions& options);

/// @brief The report as printed: the layout, one row per step (losses,
/// gradient norms, the worst weight, the verdict), the bytes per dimension
/// against the analytic count, every parameter group's largest
/// difference, then the verdict lines.
std::string format_layout_check(const LayoutCheckReport& report);

}  // namespace titan::verify
