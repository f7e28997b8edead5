// How FSDP hooks into forward and backward without module hooks.
//
// Forward: the unit is a ForwardHook of its HookableModule (the model calls
// pre_forward / post_forward around the body).
//
// Backward: two autograd nodes of our own stand in for Python FSDP2's
// pre-backward hook and post-accumulate-grad hooks.
//
//  * UnshardBackward is the grad_fn of the full parameters installed for
//    forward: its inputs are the shards, its outputs the full parameters. The
//    autograd engine calls it once every use of the full parameters has
//    produced its gradient — exactly "this unit's backward is done" — and its
//    result is the gradient of the shards, so the reduce-scatter happens
//    there and AccumulateGrad adds the result to shard.grad (which is why
//    gradient accumulation over micro-batches needs nothing extra).
//  * PreBackward is an identity node on the unit's output: gradients reach
//    it before any node inside the unit, so it is where the freed full
//    parameters are gathered again and the next unit's all-gather is
//    prefetched.

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include "titan/dist/comm_log.hpp"
#include "titan/parallel/fsdp/fsdp_unit.hpp"

namespace titan::fsdp {
namespace {

using torch::autograd::variable_list;

double now_us() { return dist::CommLog::instance().now_us(); }

struct UnshardBackward : torch::autograd::Node {
  // shared_ptr: a graph that outlives the model keeps the unit alive.
  std::shared_ptr<FsdpUnit> unit;
  std::string name() const override { return "titan::fsdp::UnshardBackward"; }
  variable_list apply(variable_list&& grads) override {
    variable_list shard_grads = unit->reduce_gradients(grads);
    // FSDP2 reshards after backward: the full parameters are not needed
    // until the next forward gathers them again.
    unit->release_full();
    return shard_grads;
  }
};

struct PreBackward : torch::autograd::Node {
  std::shared_ptr<FsdpUnit> unit;
  std::string name() const override { return "titan::fsdp::PreBackward"; }
  variable_list apply(variable_list&& grads) override {
    unit->pre_backward();
    return std::move(grads);
  }
};

}  // namespace

at::Tensor FsdpUnit::pre_forward(const at::Tensor& input) {
  // Backward releases the full parameters, so any still here come from a
  // forward whose backward never ran (a discarded graph): the shards may have
  // changed since, start from them.
  if (live_ || freed_ || !full_.empty()) release_full();
  unshard();
  // Prefetch: the next unit's all-gather runs while this unit computes.
  if (next_forward) next_forward->issue_all_gather(/*prefetch=*/true);

  // Fresh tensor objects over the gathered data: this forward's graph gets
  // its own history on them.
  std::vector<at::Tensor> working;
  working.reserve(full_.size());
  for (const at::Tensor& t : full_) working.push_back(t.detach());
  bool any_grad = false;
  for (const FsdpParam& p : params_) any_grad = any_grad || p.requires_grad;
  if (at::GradMode::is_enabled() && any_grad) {
    auto node = std::shared_ptr<UnshardBackward>(new UnshardBackward(), torch::autograd::deleteNode);
    node->unit = shared_from_this();
    std::vector<at::Tensor> shards;
    for (const FsdpParam& p : params_) shards.push_back(p.shard);
    node->set_next_edges(torch::autograd::collect_next_edges(shards));
    torch::autograd::set_history(working, node);
  }
  full_ = working;
  install(full_);
  forward_start_us_ = now_us();

  // Mixed precision: floating inputs enter the unit in param_dtype (FSDP2's
  // cast_forward_inputs); token ids pass unchanged.
  if (options_.mp_policy.param_dtype && at::isFloatingType(input.scalar_type()) &&
      input.scalar_type() != *options_.mp_policy.param_dtype)
    return input.to(*options_.mp_policy.param_dtype);
  return input;
}

at::Tensor FsdpUnit::post_forward(const at::Tensor& output) {
  record_event({name_, "forward", forward_start_us_, now_us(), false});
  // The module holds the shards again outside its forward, so parameters()
  // (and the optimizer) always see shards.
  install_shards();
  if (!at::GradMode::is_enabled() || !output.requires_grad()) {
    release_full();
    return output;
  }
  if (options_.reshard_after_forward && !is_root) free_full_storage();
  auto node = std::shared_ptr<PreBackward>(new PreBackward(), torch::autograd::deleteNode);
  node->unit = shared_from_this();
  node->set_next_edges(torch::autograd::collect_next_edges(output));
  at::Tensor out = output.detach();  // same data; the new history runs through PreBackward
  torch::autograd::set_history(out, node);
  return out;
}

void FsdpUnit::pre_backward() {
  const double t0 = now_us();
  if (freed_) unshard();  // refill the storage the graph saved
  if (next_backward && next_backward->full_storage_freed()) next_backward->issue_all_gather(/*prefetch=*/true);
  record_event({name_, "pre_backward", t0, now_us(), false});
}

}  // namespace titan::fsdp
