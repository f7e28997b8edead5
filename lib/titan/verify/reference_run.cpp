#include "titan/verify/reference_run.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "titan/dist/comm_log.hpp"
#include "titan/ops/cross_entropy.hpp"
#include "titan/util/error.hpp"

namespace titan::verify {

models::llama3::ModelArgs tiny_llama_args() {
  models::llama3::ModelArgs a;
  a.dim = 64, a.n_layers = 2, a.n_heads = 4, a.n_kv_heads = 2;
  a.vocab_size = 131;
  a.multiple_of = 32, a.max_seq_len = 64, a.rope_theta = 10000.0;
  return a;
}

models::llama3::ModelArgs uneven_llama_args() {
  models::llama3::ModelArgs a = tiny_llama_args();
  a.dim = 18, a.n_heads = 3, a.n_kv_heads = 1;
  a.vocab_size = 61;
  a.multiple_of = 8;
  return a;
}

optim::OptimizerOptions RunSpec::default_optimizer() {
  optim::OptimizerOptions o;
  o.lr = 1e-3;
  return o;
}

void RunSpec::validate(int world) const {
  TITAN_CHECK(world >= 1, "world size must be at least 1, got ", world);
  TITAN_CHECK(steps >= 1, "--steps must be at least 1, got ", steps);
  TITAN_CHECK(grad_accum >= 1, "--grad-accum must be at least 1, got ", grad_accum);
  TITAN_CHECK(seq_len >= 1, "sequence length must be at least 1, got ", seq_len);
  TITAN_CHECK(global_batch % (world * grad_accum) == 0, "global batch ", global_batch,
              " does not split over ", world, " ranks x ", grad_accum, " micro-batches (it must divide by ",
              world * grad_accum, ")");
}

at::ScalarType parse_dtype(const std::string& name) {
  if (name == "fp32" || name == "float32") return at::kFloat;
  if (name == "bf16" || name == "bfloat16") return at::kBFloat16;
  throw Error("unknown dtype '" + name + "' (expected fp32 or bf16)");
}

models::llama3::Transformer build_model(const RunSpec& spec, int64_t seed) {
  models::llama3::ModelArgs args = spec.model;
  args.max_seq_len = std::max(args.max_seq_len, spec.seq_len);
  // Initialise on the CPU in fp32 and convert afterwards, so that the
  // weights are the same draws whatever the device and dtype.
  torch::manual_seed(static_cast<uint64_t>(seed));
  models::llama3::Transformer model(args, at::TensorOptions().dtype(at::kFloat));
  model->init_weights();
  model->to(spec.device, spec.dtype);
  model->train();
  return model;
}

at::Tensor global_tokens(const RunSpec& spec, int64_t step) {
  // An own generator: the batches must not depend on how many random
  // numbers the model initialisation (or anything else) drew.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(spec.data_seed * 1000003 + step));
  return at::randint(spec.model.vocab_size, {spec.global_batch, spec.seq_len + 1}, gen,
                     at::TensorOptions().dtype(at::kLong));
}

std::vector<MicroBatch> local_micro_batches(const RunSpec& spec, int64_t step, int rank, int world) {
  spec.validate(world);
  TITAN_CHECK(rank >= 0 && rank < world, "rank ", rank, " outside a world of ", world);
  const int64_t local = spec.global_batch / world;
  const int64_t micro = local / spec.grad_accum;
  at::Tensor mine = global_tokens(spec, step).narrow(0, rank * local, local);
  std::vector<MicroBatch> out;
  for (int64_t m = 0; m < spec.grad_accum; ++m) {
    at::Tensor rows = mine.narrow(0, m * micro, micro);
    out.push_back({rows.narrow(1, 0, spec.seq_len).contiguous().to(spec.device),
                   rows.narrow(1, 1, spec.seq_len).contiguous().to(spec.device)});
  }
  return out;
}

NamedTensors snapshot_params(torch::nn::Module& model) {
  NamedTensors out;
  for (const auto& item : model.named_parameters(/*recurse=*/true))
    out.emplace_back(item.key(), item.value().detach().to(at::kCPU).clone());
  return out;
}

NamedTensors snapshot_grads(torch::nn::Module& model) {
  NamedTensors out;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const at::Tensor& g = item.value().grad();
    out.emplace_back(item.key(), g.defined() ? g.detach().to(at::kCPU).clone()
                                             : at::zeros_like(item.value().detach().to(at::kCPU)));
  }
  return out;
}

std::unique_ptr<torch::optim::Optimizer> build_optimizer(const RunSpec& spec, std::vector<at::Tensor> params) {
  return optim::build_optimizer(std::move(params), spec.optimizer);
}

Trajectory run_steps(const RunSpec& spec, models::llama3::Transformer& model, torch::optim::Optimizer& optimizer,
                     int rank, int world, const Technique& technique) {
  spec.validate(world);
  auto& log = dist::CommLog::instance();
  auto full_params = [&] { return technique.full_params ? technique.full_params() : snapshot_params(*model); };
  auto full_grads = [&] { return technique.full_grads ? technique.full_grads() : snapshot_grads(*model); };
  using clock = std::chrono::steady_clock;

  Trajectory t;
  log.begin_step(kBookkeepingStep);
  t.initial_params = full_params();
  std::vector<double> local_losses;
  for (int64_t step = 1; step <= spec.steps; ++step) {
    log.begin_step(step);
    const auto t0 = clock::now();
    if (technique.begin_step) technique.begin_step(step);
    std::vector<MicroBatch> micro = local_micro_batches(spec, step, rank, world);
    optimizer.zero_grad();
    double loss_sum = 0;
    const int64_t count = static_cast<int64_t>(micro.size());
    if (technique.forward_backward) loss_sum = technique.forward_backward(micro) * static_cast<double>(count);
    for (int64_t m = 0; m < count && !technique.forward_backward; ++m) {
      at::Tensor loss = ops::cross_entropy(model->forward(micro[m].inputs), micro[m].labels);
      // Each micro-batch's loss is a mean over its tokens; dividing by the
      // count makes the accumulated gradient that of the mean over all.
      auto backward = [&] { (loss / static_cast<double>(count)).backward(); };
      if (technique.backward)
        technique.backward(m, count, backward);
      else
        backward();
      loss_sum += loss.detach().to(at::kDouble).item<double>();
    }
    if (technique.before_step) technique.before_step();
    double seconds = std::chrono::duration<double>(clock::now() - t0).count();

    StepResult r;
    log.begin_step(kBookkeepingStep);
    r.grads = full_grads();
    log.begin_step(step);
    const auto t1 = clock::now();
    optimizer.step();
    seconds += std::chrono::duration<double>(clock::now() - t1).count();
    log.begin_step(kBookkeepingStep);
    r.params = full_params();
    r.seconds = seconds;
    local_losses.push_back(loss_sum / static_cast<double>(count));
    t.steps.push_back(std::move(r));
  }
  log.begin_step(kBookkeepingStep);
  std::vector<double> losses = technique.global_losses ? technique.global_losses(local_losses) : local_losses;
  TITAN_CHECK(losses.size() == t.steps.size(), "global_losses returned ", losses.size(), " losses for ",
              t.steps.size(), " steps");
  for (size_t i = 0; i < losses.size(); ++i) t.steps[i].loss = losses[i];
  return t;
}

std::function<std::vector<double>(const std::vector<double>&)> average_over(
    std::shared_ptr<dist::ProcessGroup> group) {
  return [group](const std::vector<double>& local) {
    at::Tensor t = at::tensor(local, at::TensorOptions().dtype(at::kDouble));
    // NCCL needs the tensor on the GPU; Gloo takes it where it is.
    if (group->backend()->getBackendName() == "nccl") t = t.to(at::kCUDA);
    group->all_reduce(t, dist::ReduceOp::Avg);
    t = t.cpu();
    return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  };
}

Trajectory train_reference(const RunSpec& spec) {
  models::llama3::Transformer model = build_model(spec, spec.model_seed);
  auto optimizer = build_optimizer(spec, model->parameters());
  return run_steps(spec, model, *optimizer, /*rank=*/0, /*world=*/1);
}

TensorDiff compare(const NamedTensors& ref, const NamedTensors& got, const Tolerance& tol) {
  TITAN_CHECK(ref.size() == got.size(), "compare: reference has ", ref.size(), " tensors, run has ", got.size());
  TensorDiff d;
  d.worst_excess = -INFINITY;
  for (size_t i = 0; i < ref.size(); ++i) {
    const auto& [name, r] = ref[i];
    const auto& [gname, g] = got[i];
    TITAN_CHECK(name == gname, "compare: tensor ", i, " is ", name, " in the reference but ", gname, " in the run");
    TITAN_CHECK(r.sizes() == g.sizes(), "compare: ", name, " has shape ", r.sizes(), " in the reference but ",
                g.sizes(), " in the run");
    if (r.numel() == 0) continue;
    at::Tensor rd = r.to(at::kCPU, at::kDouble), gd = g.to(at::kCPU, at::kDouble);
    at::Tensor diff = (gd - rd).abs();
    double max_abs = diff.max().item<double>();
    double excess = (diff - (tol.atol + tol.rtol * rd.abs())).max().item<double>();
    // NaN anywhere must fail, whatever max() made of it.
    if (std::isnan(max_abs) || at::isnan(gd).any().item<bool>()) max_abs = excess = INFINITY;
    if (max_abs > d.max_abs || d.worst.empty()) d.max_abs = max_abs, d.worst = name;
    if (excess > d.worst_excess) d.worst_excess = excess, d.worst_excess_name = name;
  }
  return d;
}

Tolerance adam_param_tolerance(double lr) { return Tolerance{1e-5, lr / 100}; }

std::vector<StepDiff> compare(const Trajectory& ref, const Trajectory& got, const Tolerance& tol,
                              const Tolerance& param_tol) {
  TITAN_CHECK(ref.steps.size() == got.steps.size(), "compare: reference ran ", ref.steps.size(),
              " steps, the run ", got.steps.size());
  std::vector<StepDiff> out;
  for (size_t i = 0; i < ref.steps.size(); ++i) {
    StepDiff d;
    d.ref_loss = ref.steps[i].loss;
    d.got_loss = got.steps[i].loss;
    d.loss = std::abs(d.got_loss - d.ref_loss);
    d.loss_ok = !std::isnan(d.got_loss) && d.loss <= tol.atol + tol.rtol * std::abs(d.ref_loss);
    d.grads = compare(ref.steps[i].grads, got.steps[i].grads, tol);
    d.params = compare(ref.steps[i].params, got.steps[i].params, param_tol);
    out.push_back(std::move(d));
  }
  return out;
}

int64_t tensor_bytes(const NamedTensors& tensors) {
  int64_t total = 0;
  for (const auto& [name, t] : tensors) total += t.numel() * static_cast<int64_t>(t.element_size());
  return total;
}

}  // namespace titan::verify
