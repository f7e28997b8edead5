#pragma once
/// @file
/// @brief How a node that runs a backward of its own (an activation
/// checkpoint's recompute) takes part in a zero-bubble schedule's split
/// backward: during the input step (I) it computes only its input's
/// gradient and leaves its weights' part for the weight step (W).
///
/// A checkpointed block's autograd node has one edge, to the block's
/// input: its weights are reached only by the backward it runs inside
/// itself. A split backward therefore meets it on the input path, and a
/// whole inner backward there would produce the block's weight gradients
/// in I — before the schedule's W has told data parallelism whether this
/// is the step's last micro-batch (whether to reduce them). While an input
/// step runs, a splitter is active; the checkpoint hands its recomputed
/// graph to it, which splits that graph the same way and keeps its weight
/// part for the enclosing W (pp::SplitBackward).

#include <ATen/core/Tensor.h>

namespace titan::ops {

/// @brief What an input step offers the nodes it runs (see the file brief).
class InputGradientSplitter {
 public:
  virtual ~InputGradientSplitter() = default;
  /// The gradient of `input` (a leaf that requires grad) from `target`'s
  /// gradient `grad`, through the graph from `target` back to `input`;
  /// the weights that graph also reaches get their gradients in the
  /// enclosing weight step.
  virtual at::Tensor input_gradient(const at::Tensor& target, const at::Tensor& input, const at::Tensor& grad) = 0;
};

/// @brief The splitter of the input step now running, or nullptr. Process
/// wide, not per thread: the autograd engine runs a device's nodes on its
/// own worker thread, and a rank runs one backward at a time.
InputGradientSplitter* active_input_gradient_splitter();

/// @brief Makes `splitter` the active one while it lives (the one before
/// it comes back after: input steps nest, a checkpoint inside a recompute).
class InputGradientSplitterScope {
 public:
  explicit InputGradientSplitterScope(InputGradientSplitter* splitter);
  ~InputGradientSplitterScope();
  InputGradientSplitterScope(const InputGradientSplitterScope&) = delete;
  InputGradientSplitterScope& operator=(const InputGradientSplitterScope&) = delete;

 private:
  InputGradientSplitter* previous_;
};

}  // namespace titan::ops
