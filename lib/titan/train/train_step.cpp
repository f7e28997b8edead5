#include "titan/train/train_step.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <chrono>

#include "titan/dist/process_group.hpp"
#include "titan/optim/grad_clip.hpp"
#include "titan/parallel/pipeline/microbatch.hpp"
#include "titan/parallel/pipeline/runtime.hpp"
#include "titan/util/range.hpp"
#include "titan/ops/cross_entropy.hpp"
#include "titan/train/autocast.hpp"
#include "titan/util/error.hpp"
#include "titan/util/measure.hpp"

namespace titan::train {

LossNormalizer normalize_over_global_batch(int64_t local_targets, const dist::ProcessGroup* loss_group,
                                           const c10::Device& device) {
  LossNormalizer n;
  n.global_targets = at::scalar_tensor(static_cast<double>(local_targets),
                                       at::TensorOptions().dtype(at::kDouble).device(device));
  double averaging_ranks = 1;
  if (loss_group) {
    loss_group->all_reduce(n.global_targets);
    averaging_ranks = static_cast<double>(loss_group->size());
  }
  // No target counts anywhere: the scale is inf and the loss 0 · inf = NaN
  // on every rank alike, which stops the step before the optimizer.
  n.loss_scale = (averaging_ranks / n.global_targets).to(at::kFloat);
  return n;
}

namespace {

// A batch on its way to the job's device. To a GPU through pinned memory:
// from pageable memory CUDA stages the copy before it returns, so a
// non_blocking copy would overlap nothing with the kernels still queued
// (the caching host allocator keeps the pinned block until the copy ends).
at::Tensor to_device(const at::Tensor& host, const c10::Device& device) {
  if (device.is_cuda() && host.device().is_cpu() && !host.is_pinned())
    return host.pin_memory().to(device, /*non_blocking=*/true);
  return host.to(device, /*non_blocking=*/true);
}

}  // namespace

AccumulationResult accumulate_gradients(models::llama3::Transformer& model,
                                        const std::vector<data::Batch>& micro_batches, const at::Tensor& loss_scale,
                                        const c10::Device& device,
                                        const std::function<void(bool)>& set_gradient_sync,
                                        const LossFn& loss_fn, std::optional<at::ScalarType> autocast) {
  TITAN_CHECK(!micro_batches.empty(), "gradient accumulation needs at least 1 micro-batch, got none");
  AccumulationResult r;
  at::Tensor loss_sum;
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    at::Tensor inputs, labels, doc_start;
    {
      TITAN_PROFILE_RANGE("titan::data_loading");
      const data::Batch& batch = micro_batches[i];
      inputs = to_device(batch.inputs, device);
      labels = to_device(batch.labels, device);
      if (batch.doc_start.defined()) doc_start = to_device(batch.doc_start, device);
    }
    r.data_seconds += seconds_since(t0);

    at::Tensor loss;
    {
      TITAN_PROFILE_RANGE("titan::forward");
      const AutocastGuard amp(device, autocast);
      at::Tensor logits = model->forward(inputs, doc_start);
      loss = loss_fn ? loss_fn(logits, labels) : ops::cross_entropy(logits, labels, ops::LossReduction::Sum);
    }
    if (set_gradient_sync) set_gradient_sync(i + 1 == micro_batches.size());
    {
      TITAN_PROFILE_RANGE("titan::backward");
      (loss * loss_scale).backward();
    }

    at::Tensor detached = loss.detach().to(at::kFloat);
    loss_sum = loss_sum.defined() ? loss_sum + detached : detached;
    r.tokens += labels.numel();
  }
  r.loss_sum = loss_sum;
  return r;
}

std::vector<data::Batch> cut_into_microbatches(std::vector<data::Batch> batches, int64_t microbatch_size) {
  TITAN_CHECK(microbatch_size >= 1, "micro-batches need at least 1 sequence each, got ", microbatch_size);
  std::vector<data::Batch> out;
  for (const data::Batch& b : batches) {
    const int64_t size = b.inputs.size(0);
    TITAN_CHECK(size % microbatch_size == 0, "a micro-batch size of ", microbatch_size,
                " sequences does not divide the batch of ", size);
    // The pipeline's own cut, so that the reference's micro-batches are its.
    for (pp::BatchInputs& m :
         pp::split_microbatches({b.inputs, b.labels, b.doc_start}, static_cast<int>(size / microbatch_size)))
      out.push_back({std::move(m.inputs), std::move(m.labels), std::move(m.doc_start)});
  }
  return out;
}

AccumulationResult accumulate_pipeline_gradients(pp::PipelineRuntime& runtime,
                                                 const std::vector<data::Batch>& batches, double loss_scale,
                                                 const c10::Device& device) {
  TITAN_CHECK(!batches.empty(), "gradient accumulation needs at least 1 batch, got none");
  AccumulationResult r;
  double loss_sum = 0;
  for (const data::Batch& batch : batches) {
    const auto t0 = std::chrono::steady_clock::now();
    pp::BatchInputs inputs;
    {
      TITAN_PROFILE_RANGE("titan::data_loading");
      inputs.inputs = to_device(batch.inputs, device);
      inputs.labels = to_device(batch.labels, device);
      // Every stage needs it (RoPE positions and the mask), so every
      // pipeline rank keeps it; the schedule cuts it with the tokens.
      if (batch.doc_start.defined()) inputs.doc_start = to_device(batch.doc_start, device);
    }
    r.data_seconds += seconds_since(t0);
    TITAN_PROFILE_RANGE("titan::pipeline_step");
    loss_sum += runtime.step(inputs, loss_scale).loss_sum;
    r.tokens += inputs.labels.numel();
  }
  r.loss_sum = at::scalar_tensor(loss_sum, at::TensorOptions().dtype(at::kFloat).device(device));
  return r;
}

at::Tensor clip_gradients(const std::vector<at::Tensor>& params, double max_norm,
                          const std::vector<const dist::ProcessGroup*>& shard_groups,
                          const std::vector<at::Tensor>& norm_params) {
  TITAN_PROFILE_RANGE("titan::clip_grad_norm");
  // On the device throughout: the norm, its all-reduce and the scaling
  // queue behind backward without the host waiting for them.
  const at::Tensor norm =
      optim::total_grad_norm_tensor(norm_params.empty() ? params : norm_params, 2.0, shard_groups);
  // max_norm <= 0: no clipping, but the log still reports the norm.
  if (max_norm > 0) optim::scale_grads(params, max_norm, norm);
  return norm;
}

}  // namespace titan::train
