#include "titan/optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

#include "titan/util/error.hpp"

namespace titan::optim {

LRSchedule::LRSchedule(const LRScheduleOptions& o)
    : steps_(o.steps), decay_type_(o.decay_type), min_lr_factor_(o.min_lr_factor) {
  TITAN_CHECK(o.steps > 0, "training.steps must be > 0 for the LR schedule, got ", o.steps);
  TITAN_CHECK(o.warmup_steps >= 0, "lr_scheduler.warmup_steps must be >= 0, got ", o.warmup_steps);
  TITAN_CHECK(decay_type_ == "linear" || decay_type_ == "sqrt" || decay_type_ == "cosine",
              "lr_scheduler.decay_type: unknown '", decay_type_,
              "' (supported: linear, sqrt, cosine)");
  TITAN_CHECK(min_lr_factor_ >= 0 && min_lr_factor_ <= 1,
              "lr_scheduler.min_lr_factor must be in [0, 1], got ", min_lr_factor_);
  // torchtitan clamps (with a warning) rather than failing: a short debug
  // run with the default 200 warm-up steps is legitimate.
  warmup_ = std::min(o.warmup_steps, o.steps);
  if (o.decay_ratio) {
    const double r = *o.decay_ratio;
    TITAN_CHECK(r >= 0 && r <= 1, "lr_scheduler.decay_ratio must be in [0, 1], got ", r);
    // Python's round() (ties to even) on an exact product rarely ties; nearbyint
    // under the default rounding mode is the same ties-to-even rule.
    decay_ = static_cast<int64_t>(std::nearbyint(static_cast<double>(o.steps) * r));
    decay_ = std::min(decay_, o.steps - warmup_);
  } else {
    decay_ = o.steps - warmup_;
  }
  // The "+1" is torchtitan's virtual last step: the final real step sits one
  // step before the end of the decay, so its LR stays above the floor.
  stable_ = o.steps + 1 - warmup_ - decay_;
}

double LRSchedule::multiplier(int64_t k) const {
  TITAN_CHECK(k >= 0, "LRSchedule::multiplier: step must be >= 0, got ", k);
  if (k < warmup_) return static_cast<double>(k + 1) / static_cast<double>(warmup_);
  if (k < warmup_ + stable_) return 1.0;
  // With no decay phase, stable_ = steps + 1 - W covers every step of the
  // run; steps past the run keep the peak. Otherwise steps past the run
  // clamp to the floor (torchtitan leaves them undefined).
  if (decay_ == 0) return 1.0;
  double progress = static_cast<double>(k + 1 - warmup_ - stable_) / static_cast<double>(decay_);
  progress = std::min(progress, 1.0);
  double f;
  if (decay_type_ == "linear") {
    f = 1.0 - progress;
  } else if (decay_type_ == "sqrt") {
    f = 1.0 - std::sqrt(progress);
  } else {
    f = 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  return min_lr_factor_ + (1.0 - min_lr_factor_) * f;
}

LRScheduler::LRScheduler(torch::optim::Optimizer& optimizer, LRSchedule schedule)
    : optimizer_(optimizer), schedule_(std::move(schedule)) {
  for (const auto& group : optimizer_.param_groups()) base_lrs_.push_back(group.options().get_lr());
  TITAN_CHECK(!base_lrs_.empty(), "LRScheduler: the optimizer has no param groups");
  apply();
}

void LRScheduler::step() {
  ++last_step_;
  apply();
}

void LRScheduler::set_last_step(int64_t last_step) {
  TITAN_CHECK(last_step >= 0, "LRScheduler::set_last_step: step must be >= 0, got ", last_step);
  last_step_ = last_step;
  apply();
}

double LRScheduler::current_lr() const { return optimizer_.param_groups().at(0).options().get_lr(); }

void LRScheduler::apply() {
  const double m = schedule_.multiplier(last_step_);
  auto& groups = optimizer_.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) groups[i].options().set_lr(base_lrs_.at(i) * m);
}

}  // namespace titan::optim
