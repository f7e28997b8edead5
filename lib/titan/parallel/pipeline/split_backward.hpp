#pragma once
/// @file
/// @brief The zero-bubble schedules' split backward: I computes only the
/// gradient of the stage's input, W later only the weights' gradients,
/// together no more work than one whole backward.
///
/// The autograd graph from the stage's output (or loss) back to its input
/// and weights has two parts. The nodes on the way to the input (the
/// "input path": every matmul's, norm's and collective's backward the
/// activations flow through) are what I runs. Some of them also feed a
/// weight: a matmul's backward computes dX for the input path and dW for
/// its weight, a norm's multiply its input's and its weight's gradient.
/// Those are the boundary nodes. Everything below their weight edges (the
/// transposes, FSDP's UnshardBackward, the AccumulateGrad nodes) is off the
/// input path and only W runs it.
///
/// I, with `torch::autograd::grad` to the input only, runs the input path
/// and computes no weight output of a boundary node (autograd's
/// task_should_compute_output). A pre-hook on each boundary node keeps the
/// gradient that reached it. W then runs each boundary node once more from
/// that gradient, asking only for its weight edges (so dX is not computed
/// again and nothing above it runs), and finally everything below the
/// weight edges at once, accumulating into .grad. This is how torch's
/// pipelining (stage_backward_input / stage_backward_weight) splits it.

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/edge.h>

#include <memory>
#include <vector>

namespace titan::pp {

/// @brief One micro-batch's split backward on one stage.
class SplitBackward {
 public:
  /// Walks the graph from `target` (the stage's output or scaled loss) and
  /// hooks the boundary nodes; `input` is the stage's input leaf.
  SplitBackward(const at::Tensor& target, const at::Tensor& input);
  ~SplitBackward();
  SplitBackward(const SplitBackward&) = delete;
  SplitBackward& operator=(const SplitBackward&) = delete;

  /// I: the gradient of the input from the output's gradient (undefined on
  /// the last stage, whose target is its loss). Keeps the graph for W.
  at::Tensor input_backward(const at::Tensor& grad_output);
  /// W: the weights' gradients, accumulated into .grad; frees the graph.
  void weight_backward();

  /// Boundary nodes found (for tests: a stage with weights has some).
  size_t boundary_nodes() const;

 private:
  /// W's first part, for this graph and the checkpointed blocks' graphs I
  /// split: each boundary node's weight gradients, appended as the weight
  /// edges they go to and the gradients. weight_backward then runs
  /// everything below them as one backward, so that what runs at a
  /// backward's end (DDP's final callback) sees every weight's gradient.
  void collect_weight_gradients(std::vector<torch::autograd::Edge>& below, std::vector<at::Tensor>& grads);

  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace titan::pp
