#include "titan/parallel/activation_checkpoint/checkpoint.hpp"

#include <ATen/ATen.h>
#include <ATen/core/Generator.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <cstdlib>
#include <mutex>

#include "titan/util/error.hpp"

namespace titan::ac {
namespace {

using torch::autograd::variable_list;

// The generator a forward on `device` draws from, and its state.
struct RngState {
  at::Generator gen;
  c10::intrusive_ptr<c10::TensorImpl> state;
};

RngState capture_rng(const c10::Device& device) {
  RngState r;
  r.gen = device.is_cpu() ? at::detail::getDefaultCPUGenerator() : at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(r.gen.mutex());
  r.state = r.gen.get_state().getIntrusivePtr();
  return r;
}

void restore_rng(RngState r) {  // a copy: Generator handles share their impl
  std::lock_guard<std::mutex> lock(r.gen.mutex());
  r.gen.set_state(at::Tensor(r.state));
}

// The grad_fn of a checkpointed output: recompute, then backward.
struct CheckpointBackward : torch::autograd::Node {
  std::function<at::Tensor(const at::Tensor&)> fn;
  at::Tensor input;  // detached
  bool input_requires_grad = false;
  RngState rng;
  std::string name() const override { return "titan::ac::CheckpointBackward"; }

  variable_list apply(variable_list&& grads) override {
    TITAN_CHECK(fn, "activation checkpoint: backward ran twice through the same checkpointed forward "
                    "(retain_graph is not supported with checkpointing)");
    // Replay the forward's random draws, then put the generator back where
    // the backward found it.
    RngState now = capture_rng(input.device());
    restore_rng(rng);
    at::Tensor x = input.detach().requires_grad_(input_requires_grad);
    at::Tensor y;
    {
      ops::RecomputeScope recompute;
      at::AutoGradMode grad_on(true);
      y = fn(x);
    }
    restore_rng(now);
    fn = nullptr;   // the recompute's graph is consumed below
    input = at::Tensor();
    // Reentrant backward: gradients go to the parameters (and to x) as they
    // would have without checkpointing.
    torch::autograd::backward({y}, {grads.at(0)});
    return {input_requires_grad ? x.grad() : at::Tensor()};
  }
};

}  // namespace

at::Tensor checkpoint(std::function<at::Tensor(const at::Tensor&)> fn, const at::Tensor& input) {
  if (!at::GradMode::is_enabled()) return fn(input);
  auto node = std::shared_ptr<CheckpointBackward>(new CheckpointBackward(), torch::autograd::deleteNode);
  node->rng = capture_rng(input.device());
  at::Tensor out;
  {
    at::NoGradGuard no_grad;
    out = fn(input);
  }
  node->fn = std::move(fn);
  node->input = input.detach();
  node->input_requires_grad = input.requires_grad();
  node->set_next_edges(torch::autograd::collect_next_edges(input));
  // A fresh handle on the output's data whose history is the node.
  out = out.detach();
  torch::autograd::set_history(out, node);
  return out;
}

void checkpoint_module(ops::HookableModule& module) {
  module.set_forward_wrapper(
      [](const at::Tensor& input, std::function<at::Tensor(const at::Tensor&)> run) {
        return checkpoint(std::move(run), input);
      });
}

std::vector<bool> blocks_to_checkpoint(const std::string& mode, const std::string& option, int64_t n_blocks) {
  if (mode == "none") return std::vector<bool>(static_cast<size_t>(n_blocks), false);
  if (mode == "full") return std::vector<bool>(static_cast<size_t>(n_blocks), true);
  TITAN_CHECK(mode == "selective", "[activation_checkpoint] mode '", mode,
              "' is not one of none, selective, full");
  TITAN_CHECK(option != "op", "[activation_checkpoint] selective_ac_option = \"op\" (per-op selective "
              "checkpointing) is not built yet; use an integer N (every N-th block) or mode = \"full\"");
  char* end = nullptr;
  const long long every = std::strtoll(option.c_str(), &end, 10);
  TITAN_CHECK(!option.empty() && end && *end == '\0' && every > 0, "[activation_checkpoint] selective_ac_option '",
              option, "' must be a positive integer N (every N-th block) or \"op\"");
  std::vector<bool> out(static_cast<size_t>(n_blocks), false);
  for (int64_t i = 0; i < n_blocks; ++i) out[static_cast<size_t>(i)] = (i + 1) % every == 0;
  return out;
}

std::string describe_ac(const std::string& mode, const std::string& option, int64_t wrapped, int64_t n_blocks) {
  const std::string counts = " (" + std::to_string(wrapped) + " of " + std::to_string(n_blocks) + " blocks)";
  if (mode == "full") return "full AC" + counts;
  if (mode == "selective") return "selective AC every " + option + " block(s)" + counts;
  return "";
}

}  // namespace titan::ac
