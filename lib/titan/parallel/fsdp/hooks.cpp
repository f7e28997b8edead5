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
//    produced its gradient — exactly "this unit's backward is done" — so the
//    reduce-scatter is issued there. It runs asynchronously, under the
//    backward of the units before, so the node cannot return the shard
//    gradients (a node's outputs are due when it returns): it returns
//    undefined ones, which the shards' AccumulateGrad nodes skip, and the
//    waited results are added to shard.grad by FsdpUnit::accumulate_gradients
//    (creating it or adding to it, so gradient accumulation over
//    micro-batches still adds up). The last waits happen in a final callback
//    queued on the autograd engine, which runs after every node of the
//    backward: `loss.backward()` returns with complete shard gradients, as
//    with DDP's end-of-backward callback (data_parallel.cpp). Under
//    activation checkpointing a block's backward runs inside its recompute
//    (a backward of its own); ops::queue_final_callback hands the callback
//    to the whole backward, so the reductions still overlap.
//  * PreBackward is an identity node on the unit's output: gradients reach
//    it before any node inside the unit, so it is where the freed full
//    parameters are gathered again and the next unit's all-gather is
//    prefetched.

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <algorithm>

#include "titan/dist/comm_log.hpp"
#include "titan/ops/backward_callbacks.hpp"
#include "titan/parallel/fsdp/fsdp_unit.hpp"
#include "titan/util/internal_assert.hpp"

namespace titan::fsdp {
namespace {

using torch::autograd::variable_list;

struct UnshardBackward : torch::autograd::Node {
  // shared_ptr: a graph that outlives the model keeps the unit alive.
  std::shared_ptr<FsdpUnit> unit;
  std::string name() const override { return "titan::fsdp::UnshardBackward"; }
  variable_list apply(variable_list&& grads) override {
    unit->post_backward(grads);
    grads.clear();  // staged for the reduce-scatter: the full gradients can go now
    // One undefined gradient per shard: see the note at the top.
    return variable_list(num_outputs());
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

void FsdpUnit::enter(TrainingState next, const char* hook) {
  // Forward is entered from any state: a recompute inside backward or a
  // pipeline's next forward starts from a backward state, and a forward
  // that threw left its unit in Forward (FSDP2 enters FORWARD alike).
  // post_forward's Idle only from Forward; the backward states from
  // anywhere but Forward (no backward runs inside the unit's forward).
  bool legal = true;
  if (next == TrainingState::Idle) legal = training_state_ == TrainingState::Forward;
  else if (next != TrainingState::Forward) legal = training_state_ != TrainingState::Forward;
  TITAN_INTERNAL_ASSERT(legal, "fsdp: unit ", name_, ": ", hook, " in state ", state_name(training_state_),
                        " (to ", state_name(next), ")");
  training_state_ = next;
}

at::Tensor FsdpUnit::pre_forward(const at::Tensor& input) {
  // Normally nothing is in flight here (the end of backward waited for it);
  // after a backward that threw before its end, finish its reductions now so
  // that no collective is left running into buffers of a past step. Only the
  // root: a block's forward may some day be recomputed inside backward
  // (activation checkpointing), where waiting would cost the overlap.
  if (is_root) comm_->finish();
  enter(TrainingState::Forward, "pre_forward");
  // Activation checkpointing's first pass: backward will run this forward
  // again, so the unit's backward needs a gather (pre_backward prefetches it).
  awaits_recompute_ = ops::in_checkpointed_forward();
  // Another micro-batch's forward while earlier ones still wait for their
  // backward (pipeline schedules): their graphs saved these very full
  // parameters, so they are shared, not freed and gathered again — valid
  // as long as the shards did not change since the gather.
  // Likewise after a backward without gradient sync: the next micro-batch
  // of the step reuses what it gathered.
  // And in the recompute of a checkpointed forward that kept them (below,
  // post_forward).
  const bool reuse = sharded_state_ == ShardedState::Unsharded && full_weights_still_needed() && shards_unchanged();
  if (ops::in_recompute() && recomputes_pending_ > 0) --recomputes_pending_;
  // The same under reshard_after_forward: the earlier forwards freed the
  // storage their graphs saved, and this one gathers into that very storage
  // again (as their backwards will), so every graph in flight keeps seeing
  // one set of full parameters. FSDP2 under torch's pipelining with
  // reshard_after_forward=True gathers once per micro-batch forward alike.
  // (A unit that reshards after forward keeps nothing for a recompute, so
  // here the weights are needed by graphs or unsynced sums.)
  const bool refill =
      sharded_state_ == ShardedState::ShardedPostForward && full_weights_still_needed() && shards_unchanged();
  if (!reuse) {
    if (!refill) {
      // Backward releases the full parameters, so any still here come from
      // a forward whose backward never ran (a discarded graph): the shards
      // may have changed since, start from them.
      if (sharded_state_ != ShardedState::Sharded || !full_.empty()) release_full();
      // Unsynced gradients still here belong to weights the optimizer has
      // changed since: a step that never reached its synced backward (it
      // failed part-way). They must not leak into this one.
      unsynced_grads_.clear();
    }
    unshard();
    // Prefetch: the next unit's all-gather runs while this unit computes —
    // not in a recompute inside backward (activation checkpointing), where
    // the next unit in forward order is done with this step: a gather
    // issued now would hold its weights from before the optimizer step.
    if (next_forward && !ops::in_recompute()) next_forward->issue_all_gather(/*prefetch=*/true);
  }

  // Fresh tensor objects over the gathered data: this forward's graph gets
  // its own history on them.
  std::vector<at::Tensor> working;
  working.reserve(full_.size());
  for (size_t j = 0; j < full_.size(); ++j) {
    const FsdpParam& p = params_[j];
    if (!p.extension) {
      working.push_back(full_[j].detach());
      continue;
    }
    // The gathered tensor is not in param_dtype (float8): the module gets a
    // stand-in of the parameter's shape and dtype with one element of
    // storage (all strides 0), which carries the gradient back to the
    // shard; the extension's own code reads the gathered data.
    working.push_back(at::empty_strided(p.shape, std::vector<int64_t>(p.shape.size(), 0),
                                        at::TensorOptions().dtype(param_dtype()).device(compute_device_)));
  }
  bool any_grad = false;
  for (const FsdpParam& p : params_) any_grad = any_grad || p.requires_grad;
  if (at::GradMode::is_enabled() && any_grad) {
    auto node = std::shared_ptr<UnshardBackward>(new UnshardBackward(), torch::autograd::deleteNode);
    node->unit = shared_from_this();
    std::vector<at::Tensor> shards;
    for (const FsdpParam& p : params_) shards.push_back(p.shard);
    node->set_next_edges(torch::autograd::collect_next_edges(shards));
    torch::autograd::set_history(working, node);
    ++graphs_in_flight_;
  }
  for (size_t j = 0; j < full_.size(); ++j) {
    if (params_[j].extension) params_[j].extension->post_all_gather(full_[j], working[j]);
    else full_[j] = working[j];  // same storage, this forward's history
  }
  install(working);
  forward_start_us_ = event_clock_us();

  // Mixed precision: floating inputs enter the unit in param_dtype (FSDP2's
  // cast_forward_inputs); token ids pass unchanged.
  if (options_.mp_policy.param_dtype && at::isFloatingType(input.scalar_type()) &&
      input.scalar_type() != *options_.mp_policy.param_dtype)
    return input.to(*options_.mp_policy.param_dtype);
  return input;
}

at::Tensor FsdpUnit::post_forward(const at::Tensor& output) {
  comm_->record_event({name_, "forward", forward_start_us_, event_clock_us(), false});
  // The module holds the shards again outside its forward, so parameters()
  // (and the optimizer) always see shards.
  install_shards();
  enter(TrainingState::Idle, "post_forward");
  if (!at::GradMode::is_enabled() || !output.requires_grad()) {
    // Activation checkpointing's first pass of a unit that does not
    // reshard after forward: its recompute inside backward uses these very
    // weights, as under torch's non-reentrant checkpoint, whose first pass
    // runs with autograd and so leaves FSDP2's reshard_after_forward to
    // decide. Without this a pipeline stage under full AC would gather each
    // block for its first forward, again for the next micro-batch's, and
    // again for the first recompute.
    if (awaits_recompute_ && !reshards_after_forward()) {
      ++recomputes_pending_;
      return output;
    }
    // Pending graphs, or the micro-batches still to come of a step without
    // gradient sync, share them.
    if (!full_weights_still_needed()) release_full();
    return output;
  }
  // A recompute (activation checkpointing) is followed at once by this
  // unit's backward: keep the gathered weights for it. So is a backward
  // that has begun and not finished: a zero-bubble schedule runs another
  // micro-batch's forward between a backward's input-gradient half and its
  // weight-gradient half, which may read the weights (RMSNorm's fused
  // backward node computes both).
  if (may_free_between_uses() && !ops::in_recompute()) free_full_storage();
  auto node = std::shared_ptr<PreBackward>(new PreBackward(), torch::autograd::deleteNode);
  node->unit = shared_from_this();
  node->set_next_edges(torch::autograd::collect_next_edges(output));
  at::Tensor out = output.detach();  // same data; the new history runs through PreBackward
  torch::autograd::set_history(out, node);
  return out;
}

void FsdpUnit::pre_backward() {
  const double t0 = event_clock_us();
  enter(TrainingState::PreBackward, "pre_backward");
  ++backwards_begun_;
  if (sharded_state_ == ShardedState::ShardedPostForward) unshard();  // refill the storage the graph saved
  // The unit before this one in forward order needs its weights next:
  // resharded after forward (its graph saved the full parameters), or
  // released after a checkpointed forward that its recompute runs again.
  // Gathering it now hides the all-gather under this unit's backward —
  // with activation checkpointing too, where this backward may run inside
  // this unit's own recompute.
  if (next_backward && (next_backward->sharded_state() == ShardedState::ShardedPostForward ||
                        (next_backward->sharded_state() == ShardedState::Sharded && next_backward->awaits_recompute())))
    next_backward->issue_all_gather(/*prefetch=*/true);
  backward_start_us_ = event_clock_us();
  comm_->record_event({name_, "pre_backward", t0, backward_start_us_, false});
}

void FsdpUnit::post_backward(const std::vector<at::Tensor>& full_grads) {
  // The unit's backward compute: PreBackward done → its last parameter
  // gradient in. The overlap test compares it with the reduce-scatter of
  // the unit after it, which should be in flight all along.
  const double t = event_clock_us();
  comm_->record_event({name_, "backward", backward_start_us_ > 0 ? backward_start_us_ : t, t, false});
  backward_start_us_ = 0;
  --graphs_in_flight_;
  backwards_begun_ = std::max(0, backwards_begun_ - 1);  // 0 when no PreBackward ran (an output without gradient)
  enter(TrainingState::PostBackward, "post_backward");
  // Idle again when this backward ends (FSDP2 resets every state in its
  // final callback). Weak: a unit dropped meanwhile needs nothing.
  ops::queue_final_callback([weak = std::weak_ptr<FsdpUnit>(shared_from_this())] {
    if (auto unit = weak.lock(); unit && unit->training_state_ == TrainingState::PostBackward)
      unit->training_state_ = TrainingState::Idle;
  });
  if (!requires_gradient_sync_) {
    // No reduction yet: sum, and keep the full parameters for the next
    // micro-batch (FSDP2 under torch's pipelining: no reshard after backward).
    add_unsynced(full_grads);
    return;
  }
  if (holds_unsynced_gradients()) {
    // The step's synced backward: one reduce-scatter of everything.
    add_unsynced(full_grads);
    std::vector<at::Tensor> total = std::move(unsynced_grads_);
    unsynced_grads_.clear();
    issue_reduce_scatter(total);
  } else {
    issue_reduce_scatter(full_grads);
  }
  // FSDP2 reshards after backward: the full parameters are not needed
  // until the next forward gathers them again — unless other micro-batches'
  // graphs still use them (pipeline schedules); the last backward releases.
  // Under reshard_after_forward those graphs get them back the way they
  // would after a forward: the storage is freed, and the next forward or
  // backward of the unit refills it (a pipeline stage reduce-scattering
  // every micro-batch then holds only the blocks in use, not all of them).
  // (No unsynced sum is left here: the synced backward took it.)
  if (!full_weights_still_needed()) release_full();
  else if (may_free_between_uses()) free_full_storage();
  // Whatever is still in flight when the backward ends (this reduction, if
  // no unit issues after it) is waited then. Queued once per unit: a
  // backward that stopped early never runs its callbacks, so a "queued
  // already" flag could go stale; the callbacks after the first find
  // nothing left to wait for. The whole backward's end, also when this
  // unit's backward runs inside its recompute (activation checkpointing):
  // the reduction then overlaps the next unit's recompute and backward
  // instead of being drained at the end of each block.
  ops::queue_final_callback([comm = std::weak_ptr<CommContext>(comm_)] {
    if (auto c = comm.lock()) c->finish();
  });
}

}  // namespace titan::fsdp
