#include "titan/parallel/pipeline/stage.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "titan/parallel/pipeline/split_backward.hpp"
#include "titan/util/error.hpp"

namespace titan::pp {

PipelineStage::PipelineStage(StageOptions options) : o_(std::move(options)) {
  TITAN_CHECK(o_.num_stages >= 1 && o_.stage_index >= 0 && o_.stage_index < o_.num_stages, "pipeline stage ",
              o_.stage_index, " is not one of ", o_.num_stages, " stages");
  TITAN_CHECK(static_cast<bool>(o_.forward), "pipeline stage ", o_.stage_index, " has no forward");
  TITAN_CHECK(o_.stage_index + 1 < o_.num_stages || static_cast<bool>(o_.loss_fn), "pipeline stage ",
              o_.stage_index, " is the last of ", o_.num_stages, " and has no loss_fn (StageOptions::loss_fn: the "
              "micro-batch's loss, a sum or a mean over its targets)");
}

PipelineStage::Held& PipelineStage::held(int mb, const char* what) {
  auto it = held_.find(mb);
  TITAN_CHECK(it != held_.end(), "pipeline stage ", o_.stage_index, ": ", what, " of micro-batch ", mb,
              " before its forward (schedule out of order)");
  return it->second;
}

at::Tensor PipelineStage::forward(int mb, const at::Tensor& input, const BatchInputs& batch, double loss_scale) {
  TITAN_CHECK(!held_.count(mb), "pipeline stage ", o_.stage_index, ": forward of micro-batch ", mb,
              " twice in one step");
  Held h;
  // A leaf of its own: the backward stops here and its .grad is what the
  // previous stage needs.
  at::Tensor in = is_first() ? input : input.detach().requires_grad_(true);
  at::Tensor out = o_.forward(in, batch);
  if (!is_first()) h.input = in;
  if (is_last()) {
    const at::Tensor& labels = batch.labels;
    TITAN_CHECK(labels.defined(), "pipeline: the last stage needs the labels of micro-batch ", mb);
    at::Tensor loss = o_.loss_fn(out, labels);
    h.target = loss * loss_scale;
    at::Tensor d = loss.detach().to(at::kFloat);
    loss_sum_ = loss_sum_.defined() ? loss_sum_ + d : d;
    held_.emplace(mb, std::move(h));
    return loss.detach();
  }
  TITAN_CHECK(out.sizes() == at::IntArrayRef(o_.output_shape) && out.scalar_type() == o_.dtype, "pipeline stage ",
              o_.stage_index, " produced ", out.sizes(), " ", out.scalar_type(), " for micro-batch ", mb,
              " but the next stage expects ", at::IntArrayRef(o_.output_shape), " ", o_.dtype);
  h.target = out;
  held_.emplace(mb, std::move(h));
  return out.detach();
}

void PipelineStage::weight_hook() {
  if (o_.before_weight_backward) o_.before_weight_backward(last_weight_backward_);
}

at::Tensor PipelineStage::backward(int mb, const at::Tensor& grad_output) {
  Held h = std::move(held(mb, "backward"));
  held_.erase(mb);
  weight_hook();
  if (is_last())
    torch::autograd::backward({h.target});
  else
    torch::autograd::backward({h.target}, {grad_output});
  return is_first() ? at::Tensor() : h.input.grad();
}

at::Tensor PipelineStage::backward_input(int mb, const at::Tensor& grad_output) {
  Held& h = held(mb, "input backward");
  h.grad_output = grad_output;
  if (is_first()) return {};  // tokens have no gradient: W does the whole backward
  h.split = std::make_shared<SplitBackward>(h.target, h.input);
  return h.split->input_backward(is_last() ? at::Tensor() : grad_output);
}

void PipelineStage::backward_weight(int mb) {
  Held h = std::move(held(mb, "weight backward"));
  held_.erase(mb);
  weight_hook();
  if (h.split) {
    h.split->weight_backward();
    return;
  }
  if (is_last())
    torch::autograd::backward({h.target});
  else
    torch::autograd::backward({h.target}, {h.grad_output});
}

at::Tensor PipelineStage::take_loss_sum() {
  at::Tensor s = loss_sum_;
  loss_sum_ = at::Tensor();
  return s;
}

}  // namespace titan::pp
