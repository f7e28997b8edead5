#pragma once
/// @file
/// @brief Callbacks that run when a backward pass ends — the outermost one,
/// also when they are queued from inside a backward that another
/// backward's node started (activation checkpointing's recompute).
///
/// The autograd engine's `queue_callback` (Python's
/// `Variable._execution_engine.queue_callback`, where FSDP2 and DDP queue
/// their final callbacks) attaches a callback to the graph task running on
/// the calling thread. A checkpointed block runs its own backward inside
/// its node (a reentrant backward, as torch.utils.checkpoint's reentrant
/// variant does), so a callback queued by a node of that block — FSDP's
/// "wait for the gradient reductions", DDP's "copy the averaged buckets
/// out" — would run when the *block's* backward ends: FSDP would drain its
/// reduce-scatters once per block instead of letting each run under the
/// next block's backward, and DDP would finish with the other blocks'
/// gradients still missing. queue_final_callback hands such callbacks to
/// the enclosing backward instead.

#include <functional>
#include <vector>

namespace titan::ops {

/// @brief Runs `fn` once the backward pass now running on this thread has
/// finished every node: the outermost one when called from inside a
/// ReentrantBackwardScope. Call it from an autograd node (or a hook) only,
/// as the engine's queue_callback. A backward that fails does not run it.
void queue_final_callback(std::function<void()> fn);

/// @brief Marks a backward started from inside another backward's node on
/// this thread (activation checkpointing's recompute): the final callbacks
/// queued while it lives are kept, and hand_over() queues them on the
/// enclosing backward. Destroyed without hand_over() (the inner backward
/// threw), it drops them: the enclosing backward fails too.
class ReentrantBackwardScope {
 public:
  ReentrantBackwardScope();
  ~ReentrantBackwardScope();
  ReentrantBackwardScope(const ReentrantBackwardScope&) = delete;
  ReentrantBackwardScope& operator=(const ReentrantBackwardScope&) = delete;
  /// After the inner backward returned, back in the enclosing backward's
  /// node: queues the kept callbacks there, in the order they came.
  void hand_over();

 private:
  friend void queue_final_callback(std::function<void()> fn);
  ReentrantBackwardScope* outer_;
  std::vector<std::function<void()>> kept_;
};

}  // namespace titan::ops
