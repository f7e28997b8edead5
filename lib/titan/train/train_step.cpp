#include "titan/train/train_step.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <chrono>

#include "titan/optim/grad_clip.hpp"
#include "titan/parallel/pipeline/runtime.hpp"
#include "titan/util/range.hpp"
#include "titan/ops/cross_entropy.hpp"
#include "titan/util/error.hpp"

namespace titan::train {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

AccumulationResult accumulate_gradients(models::llama3::Transformer& model, const BatchSource& next_batch,
                                        int64_t accumulation_steps, const c10::Device& device,
                                        const std::function<void(bool)>& set_gradient_sync,
                                        const LossFn& loss_fn) {
  TITAN_CHECK(accumulation_steps >= 1, "gradient accumulation needs at least 1 micro-batch, got ",
              accumulation_steps);
  AccumulationResult r;
  at::Tensor loss_sum;
  for (int64_t i = 0; i < accumulation_steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    at::Tensor inputs, labels, doc_start;
    double loss_weight = 1.0;
    {
      TITAN_PROFILE_RANGE("titan::data_loading");
      data::Batch batch = next_batch();
      // non_blocking: the copy from (pageable) host memory may overlap with
      // the previous micro-batch's kernels on a GPU; a no-op on the CPU.
      inputs = batch.inputs.to(device, /*non_blocking=*/true);
      labels = batch.labels.to(device, /*non_blocking=*/true);
      if (batch.doc_start.defined()) doc_start = batch.doc_start.to(device, /*non_blocking=*/true);
      loss_weight = batch.loss_weight;
    }
    r.data_seconds += seconds_since(t0);

    at::Tensor loss;
    {
      TITAN_PROFILE_RANGE("titan::forward");
      at::Tensor logits = model->forward(inputs, doc_start);
      loss = loss_fn ? loss_fn(logits, labels) : ops::cross_entropy(logits, labels);
      loss = ops::weigh_shard_loss(loss, logits, loss_weight);  // a cp shard's share of the targets
    }
    // Each micro-batch's loss is a mean over its tokens; dividing by the
    // number of micro-batches makes the summed gradients those of the mean
    // over the whole step's batch when all micro-batches hold equally many
    // targets (with block_causal's hidden boundary targets: the mean of
    // the micro-batches' means, as a pipeline step's).
    if (set_gradient_sync) set_gradient_sync(i + 1 == accumulation_steps);
    {
      TITAN_PROFILE_RANGE("titan::backward");
      (loss / static_cast<double>(accumulation_steps)).backward();
    }

    at::Tensor detached = loss.detach();
    loss_sum = loss_sum.defined() ? loss_sum + detached : detached;
    r.tokens += labels.numel();
  }
  r.loss = loss_sum / static_cast<double>(accumulation_steps);
  return r;
}

AccumulationResult accumulate_pipeline_gradients(pp::PipelineSchedule& schedule, const BatchSource& next_batch,
                                                 int64_t accumulation_steps, const c10::Device& device) {
  TITAN_CHECK(accumulation_steps >= 1, "gradient accumulation needs at least 1 batch, got ", accumulation_steps);
  AccumulationResult r;
  const double scale = 1.0 / static_cast<double>(schedule.spec().microbatches * accumulation_steps);
  double loss_sum = 0;
  for (int64_t i = 0; i < accumulation_steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    pp::BatchInputs inputs;
    {
      TITAN_PROFILE_RANGE("titan::data_loading");
      data::Batch batch = next_batch();
      inputs.inputs = batch.inputs.to(device, /*non_blocking=*/true);
      inputs.labels = batch.labels.to(device, /*non_blocking=*/true);
      // Every stage needs it (RoPE positions and the mask), so every
      // pipeline rank keeps it; the schedule cuts it with the tokens.
      if (batch.doc_start.defined()) inputs.doc_start = batch.doc_start.to(device, /*non_blocking=*/true);
      inputs.microbatch_loss_weights = std::move(batch.microbatch_loss_weights);
    }
    r.data_seconds += seconds_since(t0);
    TITAN_PROFILE_RANGE("titan::pipeline_step");
    loss_sum += schedule.step(inputs, scale).loss;
    r.tokens += inputs.labels.numel();
  }
  r.loss = at::scalar_tensor(loss_sum / static_cast<double>(accumulation_steps),
                             at::TensorOptions().dtype(at::kFloat).device(device));
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
