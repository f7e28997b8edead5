#pragma once
/// @file
/// @brief torchtitan's learning-rate schedule (linear warm-up, an optional
/// stable phase, then linear / sqrt / cosine decay down to min_lr_factor)
/// and the scheduler that applies it to an optimizer each step.

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace titan::optim {

/// @brief What `[lr_scheduler]` (and `[training] steps`) configure; defaults
/// are torchtitan's (warmup 200, linear decay right after warm-up, min 0).
struct LRScheduleOptions {
  /// Total number of training steps (optimizer steps).
  int64_t steps = 0;
  /// Linear warm-up length; clamped to `steps` (torchtitan warns and does the same).
  int64_t warmup_steps = 200;
  /// Fraction of `steps` spent decaying (rounded); the steps between warm-up
  /// and decay stay at the peak LR — the Warmup-Stable-Decay (WSD) schedule
  /// of MiniCPM (arXiv:2404.06395). Unset: decay starts right after warm-up.
  std::optional<double> decay_ratio;
  /// "linear", "sqrt" or "cosine".
  std::string decay_type = "linear";
  /// The multiplier the decay ends near: lr never drops below lr·min_lr_factor.
  double min_lr_factor = 0.0;
};

/// @brief The schedule as a pure function of the step: multiplier(k) is the
/// factor applied to the peak LR for optimizer step k (0-based), exactly as
/// torchtitan's `linear_warmup_stable_decay` (torchtitan v0.2,
/// torchtitan/components/lr_scheduler.py) computes it for LambdaLR.
///
/// With W warm-up, D decay and S = steps + 1 − W − D stable steps (the "+1"
/// is torchtitan's virtual last step, so the LR never reaches the floor on
/// the final real step):
///   k < W:       (k + 1) / W
///   k < W + S:   1
///   otherwise:   p = (k + 1 − W − S) / D,  m + (1 − m)·f(p) with
///                f = 1 − p (linear), 1 − √p (sqrt), ½(1 + cos πp) (cosine).
class LRSchedule {
 public:
  /// Validates and resolves the phase lengths; throws titan::Error on
  /// steps ≤ 0, warmup < 0, decay_ratio outside [0, 1], min_lr_factor
  /// outside [0, 1] or an unknown decay_type.
  explicit LRSchedule(const LRScheduleOptions& options);

  /// The LR multiplier for 0-based optimizer step k (training step k + 1).
  double multiplier(int64_t k) const;

  int64_t warmup_steps() const { return warmup_; }
  int64_t stable_steps() const { return stable_; }
  int64_t decay_steps() const { return decay_; }
  int64_t total_steps() const { return steps_; }
  const std::string& decay_type() const { return decay_type_; }
  double min_lr_factor() const { return min_lr_factor_; }

 private:
  int64_t steps_, warmup_, stable_, decay_;
  std::string decay_type_;
  double min_lr_factor_;
};

/// @brief Applies an LRSchedule to an optimizer, like torch's LambdaLR:
/// construction records each param group's LR as its peak and sets the LR
/// of step 1; step() (called after optimizer.step(), once per training
/// step) moves to the next step's LR.
///
/// Trainer loop:
/// @code
///   auto opt = build_optimizer(params, oopts);
///   LRScheduler sched(*opt, LRSchedule(sopts));
///   for (step = 1..N) { forward/backward; clip_grad_norm(...); opt->step(); sched.step(); }
/// @endcode
class LRScheduler {
 public:
  LRScheduler(torch::optim::Optimizer& optimizer, LRSchedule schedule);

  /// Advances to the next step and sets its LR on every param group.
  void step();
  /// Number of step() calls so far (LambdaLR's last_epoch); the LR now set
  /// is the one for 0-based step `last_step()`. Saved in checkpoints.
  int64_t last_step() const { return last_step_; }
  /// Jumps to `last_step` (restoring a checkpoint) and sets that step's LR.
  void set_last_step(int64_t last_step);
  /// LR now set on param group 0 (the one a log line reports).
  double current_lr() const;
  /// Peak (base) LR of each param group.
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  const LRSchedule& schedule() const { return schedule_; }

 private:
  void apply();

  torch::optim::Optimizer& optimizer_;
  LRSchedule schedule_;
  std::vector<double> base_lrs_;
  int64_t last_step_ = 0;
};

}  // namespace titan::optim
