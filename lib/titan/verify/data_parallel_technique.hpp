#pragma once
/// @file
/// @brief DDP plugged into the equivalence harness (reference_run.hpp)
/// through the trainer's own step hooks (parallel::DdpStepHooks): gradient
/// accumulation under no_sync, the explicit sync before the optimizer
/// step, and the global loss as the average over ranks.

#include <functional>
#include <memory>

#include "titan/parallel/data_parallel.hpp"
#include "titan/verify/reference_run.hpp"

namespace titan::verify {

/// @brief The Technique that trains with `ddp`.
inline Technique data_parallel_technique(std::shared_ptr<parallel::DataParallel> ddp) {
  auto hooks = std::make_shared<parallel::DdpStepHooks>(ddp);
  Technique t;
  t.backward = [hooks](int64_t micro, int64_t count, const std::function<void()>& backward) {
    // Every micro-batch but the last only accumulates locally; the last
    // backward all-reduces the sum of them all, once.
    hooks->before_micro_batch_backward(micro + 1 == count);
    backward();
  };
  // A no-op after a normal backward (the end-of-backward callback already
  // synchronised); kept so that a missed sync could never reach the optimizer.
  t.before_step = [hooks] { hooks->after_last_backward(); };
  t.global_losses = average_over(ddp->group());
  return t;
}

}  // namespace titan::verify
