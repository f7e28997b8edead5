#include "titan/ops/backward_callbacks.hpp"

#include <torch/csrc/autograd/engine.h>

#include "titan/util/internal_assert.hpp"

namespace titan::ops {
namespace {
// The innermost reentrant backward running on this thread. The engine runs
// a reentrant backward on the thread whose node started it (the CPU
// thread, or the device's worker thread), so a thread-local sees it. (Past
// the engine's recursion limit it moves to another thread; the callback
// then attaches to the inner backward, which is correct, only earlier.)
thread_local ReentrantBackwardScope* t_innermost = nullptr;
}  // namespace

void queue_final_callback(std::function<void()> fn) {
  if (t_innermost) {
    t_innermost->kept_.push_back(std::move(fn));
    return;
  }
  torch::autograd::Engine::get_default_engine().queue_callback(std::move(fn));
}

ReentrantBackwardScope::ReentrantBackwardScope() : outer_(t_innermost) { t_innermost = this; }

ReentrantBackwardScope::~ReentrantBackwardScope() {
  if (t_innermost == this) t_innermost = outer_;
}

void ReentrantBackwardScope::hand_over() {
  TITAN_INTERNAL_ASSERT(t_innermost == this, "ReentrantBackwardScope: scopes closed out of order");
  t_innermost = outer_;  // queue_final_callback now reaches the enclosing backward
  std::vector<std::function<void()>> kept = std::move(kept_);
  kept_.clear();
  for (auto& fn : kept) queue_final_callback(std::move(fn));
}

}  // namespace titan::ops
