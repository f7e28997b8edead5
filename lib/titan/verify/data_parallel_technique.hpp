#pragma once
/// @file
/// @brief DDP plugged into the equivalence harness (reference_run.hpp):
/// gradient accumulation under no_sync, the explicit sync before the
/// optimizer step, and the global loss as the average over ranks.

#include <functional>

#include "titan/parallel/data_parallel.hpp"
#include "titan/verify/reference_run.hpp"

namespace titan::verify {

/// @brief The Technique that trains with `ddp` (which must outlive the run).
inline Technique data_parallel_technique(parallel::DataParallel& ddp) {
  Technique t;
  t.backward = [&ddp](int64_t micro, int64_t count, const std::function<void()>& backward) {
    // Every micro-batch but the last only accumulates locally; the last
    // backward all-reduces the sum of them all, once.
    if (micro + 1 < count) {
      parallel::NoSyncGuard guard = ddp.no_sync();
      backward();
    } else {
      backward();
    }
  };
  // A no-op after a normal backward (the end-of-backward callback already
  // synchronised); kept so that a missed sync could never reach the optimizer.
  t.before_step = [&ddp] { ddp.finish_gradient_sync(); };
  t.global_losses = average_over(ddp.group());
  return t;
}

}  // namespace titan::verify
