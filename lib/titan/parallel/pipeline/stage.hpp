#pragma once
/// @file
/// @brief PipelineStage: one stage's part of the model and what it keeps
/// between the actions of a step — per micro-batch its input, its output
/// (the loss on the last stage) and, for a split backward, the gradient the
/// weight half still needs.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "titan/parallel/pipeline/microbatch.hpp"

namespace titan::pp {

class SplitBackward;

/// @brief How a stage computes and what it exchanges.
struct StageOptions {
  int stage_index = 0;  ///< global stage number
  int num_stages = 1;   ///< stages in the pipeline
  /// The stage's module: tokens (first stage) or hidden states to hidden
  /// states (logits on the last stage). The second argument is the
  /// micro-batch this input belongs to, for what every stage reads besides
  /// its input (its doc_start under block-causal attention).
  std::function<at::Tensor(const at::Tensor& input, const BatchInputs& microbatch)> forward;
  /// Last stage (required there; no default, so that every caller says
  /// which): the loss of a micro-batch from its logits and labels. The
  /// trainer's (parallelize_llama's loss_fn) sums over the targets and is
  /// scaled by one over the global batch's count through
  /// PipelineRuntime::step's loss_scale; a pipeline run alone (chapter 05,
  /// verify's pipeline runs) takes ops::cross_entropy's mean and the
  /// default scale 1/m.
  std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> loss_fn;
  /// Shape and dtype of one micro-batch's activation entering this stage
  /// (unused on the first stage, whose input is tokens) and leaving it
  /// (unused on the last). Agreed with the neighbours once, checked on
  /// every send.
  std::vector<int64_t> input_shape, output_shape;
  at::ScalarType dtype = at::kFloat;
  c10::Device device = c10::Device(c10::kCPU);
  /// Called before every action that produces weight gradients (B, or W),
  /// with true for the stage's last one in the step: DDP skips its
  /// all-reduce (no_sync) on the others.
  std::function<void(bool last)> before_weight_backward;
};

/// @brief One stage on one rank.
class PipelineStage {
 public:
  explicit PipelineStage(StageOptions options);

  int index() const { return o_.stage_index; }
  bool is_first() const { return o_.stage_index == 0; }
  bool is_last() const { return o_.stage_index == o_.num_stages - 1; }
  const StageOptions& options() const { return o_; }

  /// Forward of micro-batch `mb`: `input` is its tokens (first stage) or the
  /// previous stage's output, detached here so that the gradient of this
  /// stage's input can be read off; `batch` is the micro-batch's slice of
  /// the step's batch, handed to the module. The last stage computes the
  /// loss on batch.labels and keeps loss · `loss_scale` for backward.
  /// Returns the output (the unscaled loss on the last stage), to send on.
  at::Tensor forward(int mb, const at::Tensor& input, const BatchInputs& batch, double loss_scale = 1.0);
  /// Whole backward of `mb` from the gradient of its output (ignored on the
  /// last stage, which starts from its loss). Returns the gradient of the
  /// stage's input (undefined on the first stage) and frees what `mb` held.
  at::Tensor backward(int mb, const at::Tensor& grad_output);
  /// Zero-bubble first half: only the gradient of the input (undefined on
  /// the first stage), keeping the graph for backward_weight.
  at::Tensor backward_input(int mb, const at::Tensor& grad_output);
  /// Zero-bubble second half: the weights' gradients of `mb`, then frees it.
  /// I and W together do the work of one B (split_backward.hpp); on the
  /// first stage, which has no input gradient, W is the whole backward.
  void backward_weight(int mb);

  /// Losses (unscaled) of the micro-batches this last stage ran since the
  /// last take_loss_sum(), summed, as a detached scalar; undefined if none.
  at::Tensor take_loss_sum();
  /// Forgets every micro-batch held for a backward and the loss sum (after
  /// a forward-only pass, or a step that failed part-way).
  void discard_microbatches() {
    held_.clear();
    loss_sum_ = at::Tensor();
  }
  /// Micro-batches whose activations the stage still holds.
  size_t held() const { return held_.size(); }
  /// Sets whether the next weight-producing backward is the step's last one
  /// (the runtime counts them).
  void set_last_weight_backward(bool last) { last_weight_backward_ = last; }

 private:
  struct Held {
    at::Tensor input;   // leaf whose gradient is the one to send back (not on the first stage)
    at::Tensor target;  // output, or the scaled loss on the last stage
    at::Tensor grad_output;
    std::shared_ptr<SplitBackward> split;  // I's handover to W
  };
  Held& held(int mb, const char* what);
  void weight_hook();

  StageOptions o_;
  std::map<int, Held> held_;
  at::Tensor loss_sum_;
  bool last_weight_backward_ = true;
};

}  // namespace titan::pp
