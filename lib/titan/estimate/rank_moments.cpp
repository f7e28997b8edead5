// rank_moments.hpp: the sizes a rank's moments add up, then the two walks
// (pipelined, and one micro-batch at a time).
#include "titan/estimate/rank_moments.hpp"

#include <algorithm>

namespace titan::estimate {
namespace {

// One rank's walk: the job's facts and the rank's units under their own
// names, and the sizes both walks read, so that each walk reads as a list
// of what is alive.
struct RankWalk : StepFacts, RankUnits {
  RankWalk(const StepFacts& f, const RankUnits& u) : StepFacts(f), RankUnits(u) {
    saved_block = block.saved * tokens;
    head_in = head.stage_input * tokens;  // every stage keeps its input
    head_saved = has_last ? head.saved * tokens : 0.0;
    head_transient = has_last ? head.transient * tokens : 0.0;
    flow = block.grad_transient * tokens;
    head_cast = has_last ? amp_bytes * static_cast<double>(root.output_and_norm_numel) : 0.0;
    root_gathered = fsdp ? static_cast<double>(param_bytes * root.gathered_numel) : 0.0;
    // Gradients of the norm and LM head come first in backward; under FSDP
    // the root unit holds them unsharded until the embedding's arrives.
    head_grads = fsdp ? static_cast<double>(param_bytes * root.output_and_norm_numel)
                      : static_cast<double>(storage_bytes * root.output_and_norm_numel);
    all_grads = offload ? 0.0 : static_cast<double>(storage_bytes * shard_numel_of(u));
  }

  // Activation bytes a block keeps for its backward on one micro-batch.
  double kept(const RankBlock& b) const {
    const double per_token = !b.wrapped ? block.saved : (ac_per_op ? block.kept_op : block.kept_full);
    return per_token * tokens;
  }
  double gathered(const RankBlock& b) const {
    return fsdp ? static_cast<double>(param_bytes * b.unit.gathered_numel) : 0.0;
  }
  // Under autocast each matmul's weight is cast to the compute dtype and
  // autograd keeps the cast until that matmul's backward: a block's casts
  // live from its forward to its backward (a checkpointed block's only
  // during its recompute), the LM head's until the loss's backward. The
  // embedding is not cast (a lookup).
  double cast(const RankBlock& b) const { return amp_bytes * static_cast<double>(b.unit.gathered_numel); }
  double local_grads(const RankBlock& b) const {
    return offload ? 0.0 : static_cast<double>(storage_bytes * b.unit.shard_numel);
  }

  std::vector<Moment> pipelined();
  std::vector<Moment> unpipelined() const;

  double saved_block = 0, head_in = 0, head_saved = 0, head_transient = 0, flow = 0, head_cast = 0,
         root_gathered = 0, head_grads = 0, all_grads = 0;
  int64_t most_in_flight = 1;
};

std::vector<Moment> RankWalk::pipelined() {
  std::vector<Moment> moments;
  // Several micro-batches in flight per stage, after the first backward.
  // Under FSDP each unit sums its micro-batches' gradients unsharded, in
  // reduce dtype, until the step's last backward reduce-scatters them
  // (the shards' own gradients come only then, after the peak), unless
  // fsdp_reduce_scatter_per_microbatch reduces each backward's; without
  // FSDP every gradient is in .grad already.
  double per_mb_all = 0;
  Moment m;
  m.phase = "steady state";
  for (int s : stages) {
    double per_mb = head_in;
    for (const RankBlock& b : blocks)
      if (b.stage == s) per_mb += kept(b);
    const int64_t n = in_flight.count(s) ? in_flight.at(s) : 1;
    most_in_flight = std::max(most_in_flight, n);
    m.activations += per_mb * static_cast<double>(n);
    per_mb_all = std::max(per_mb_all, per_mb);
    // Zero bubble: what each micro-batch's I left for its W.
    if (awaiting_w.count(s)) {
      double kept_for_w = s == num_stages - 1 ? head.weight_step_gradients * tokens : 0.0;
      for (const RankBlock& b : blocks)
        if (b.stage == s) kept_for_w += block.weight_step_gradients * tokens;
      m.activations += kept_for_w * static_cast<double>(awaiting_w.at(s));
    }
  }
  m.activations += head_saved;
  // The largest block unit: what one gather holds, and its shard.
  int64_t largest_numel = 0, largest_shard_numel = 0;
  for (const RankBlock& b : blocks) {
    largest_numel = std::max(largest_numel, b.unit.gathered_numel);
    largest_shard_numel = std::max(largest_shard_numel, b.unit.shard_numel);
  }
  // A unit's reduce-scatter in a backward: its unsharded gradients (in
  // the compute dtype), staged in reduce dtype with its output shard;
  // Gloo reduces a copy of the input as well.
  const double largest_unit = static_cast<double>(std::max(root.gathered_numel, largest_numel));
  const double reduction = static_cast<double>(param_bytes) * largest_unit +
                           static_cast<double>(reduce_bytes) *
                               (largest_unit * (on_gpu ? 1 : 2) + static_cast<double>(largest_shard_numel));
  if (reduce_per_microbatch) {
    // Every backward reduce-scatters into the shards' gradients: no
    // unsharded sums, a reduction in flight at any backward.
    m.grads = all_grads;
    m.transient += reduction;
  } else if (fsdp) {
    m.grads = static_cast<double>(reduce_bytes * root.gathered_numel);
    for (const RankBlock& b : blocks) m.grads += static_cast<double>(reduce_bytes * b.unit.gathered_numel);
  } else {
    m.grads = all_grads;
  }
  m.gathered = root_gathered;
  if (!blocks_reshard) {
    // Every block gathered from the first forward to the last backward.
    for (const RankBlock& b : blocks) m.gathered += gathered(b);
    m.transient += std::max(head_transient, saved_block + flow);
    moments.push_back(m);
  } else {
    // "always": a forward frees its block's weights, so a backward that
    // starts on the in-flight micro-batches gathers them again, one
    // block ahead (its own and the prefetched one, each with the
    // gather's output buffer and send buffer).
    const double largest = fsdp ? static_cast<double>(param_bytes * largest_numel) : 0.0;  // as gathered(b)
    m.gathered += 2 * largest;
    m.transient += std::max(head_transient, saved_block + flow) + largest +
                   static_cast<double>(param_bytes * largest_shard_numel);
    moments.push_back(m);
    // A backward without gradient sync keeps the weights it gathered
    // (torch's pipelining drives FSDP2 so): at its end every block is
    // gathered again, one micro-batch fewer in flight. One that
    // reduce-scatters frees each block's as it finishes it: only the
    // steady state's two remain.
    if (!reduce_per_microbatch) {
      Moment end = m;
      end.phase = "end of a micro-batch's backward";
      end.activations = m.activations - per_mb_all;
      end.gathered = root_gathered;
      for (const RankBlock& b : blocks) end.gathered += gathered(b);
      end.transient = flow;
      moments.push_back(end);
    }
  }
  if (fsdp && !reduce_per_microbatch) {
    // The step's last backward (with gradient sync), on one micro-batch:
    // each unit hands its summed gradients, plus this backward's, to
    // its reduce-scatter while the units before it still hold theirs.
    Moment last = m;
    last.phase = "the step's last backward";
    last.activations = per_mb_all + head_saved;
    last.transient = flow + reduction;
    if (!blocks_reshard) last.gathered = moments.front().gathered;
    moments.push_back(last);
  }
  return moments;
}

std::vector<Moment> RankWalk::unpipelined() const {
  std::vector<Moment> moments;
  const double head_stored = offload ? 0.0 : static_cast<double>(storage_bytes * root.output_and_norm_numel);
  const double root_shard_grads = offload ? 0.0 : static_cast<double>(storage_bytes * root.shard_numel);
  // 1. Start of backward.
  Moment start;
  start.phase = "start of backward";
  start.activations = head_in + head_saved;
  for (const RankBlock& b : blocks) start.activations += kept(b);
  start.gathered = root_gathered + head_cast;
  for (const RankBlock& b : blocks) start.gathered += blocks_reshard && &b != &blocks.back() ? 0.0 : gathered(b);
  for (const RankBlock& b : blocks) start.gathered += b.wrapped ? 0.0 : cast(b);
  start.grads = accumulating ? all_grads : 0.0;
  start.transient = head_transient;
  moments.push_back(start);
  // 2. Backward of each block, last to first.
  for (size_t i = blocks.size(); i-- > 0;) {
    Moment m;
    m.phase = "backward of " + blocks[i].name;
    m.activations = head_in;
    for (size_t j = 0; j < i; ++j) m.activations += kept(blocks[j]);
    // Its own saved set: kept from forward, or rebuilt by the recompute
    // (per-op SAC rebuilds it around the matmul outputs it kept).
    m.activations += saved_block;
    double done = head_grads;
    for (size_t j = i + 1; j < blocks.size(); ++j) done += local_grads(blocks[j]);
    // Its own parameters' gradients, made during this backward: in .grad
    // at once without FSDP; under FSDP unsharded, in the compute dtype,
    // until the end of the block stages them for the reduce-scatter.
    if (!fsdp) done += local_grads(blocks[i]);
    m.grads = accumulating ? all_grads + (fsdp ? head_grads : 0.0) : done;
    if (early) {
      // Applied already: the blocks after i (under FSDP all but the one
      // whose reduction is still in flight) and, without FSDP, the
      // head's and this block's own.
      double applied = fsdp ? 0.0 : head_stored + local_grads(blocks[i]);
      for (size_t j = i + (fsdp ? 2 : 1); j < blocks.size(); ++j) applied += local_grads(blocks[j]);
      m.grads = accumulating ? all_grads + (fsdp ? head_grads : 0.0) - applied : (fsdp ? head_grads : 0.0);
    }
    m.gathered = root_gathered + gathered(blocks[i]) + cast(blocks[i]);
    for (size_t j = 0; j < i; ++j) m.gathered += blocks[j].wrapped ? 0.0 : cast(blocks[j]);
    m.transient = flow;
    if (fsdp) m.transient += static_cast<double>(param_bytes * blocks[i].unit.gathered_numel);
    // The next block to run backward was freed after forward (or only
    // ran its checkpointed first pass) and is prefetched now: its
    // weights, and its shard's send buffer until the gather is waited.
    if (fsdp && blocks_reshard && i > 0) {
      m.gathered += gathered(blocks[i - 1]);
      m.transient += static_cast<double>(param_bytes * blocks[i - 1].unit.shard_numel);
    }
    // The block after it (done just before) is still reduce-scattering
    // (with activation checkpointing too: its reduction overlaps this
    // block's recompute and backward): its staged input and its output.
    // Gloo (CPU) reduces a copy of the input as well; NCCL does not.
    if (fsdp && i + 1 < blocks.size()) {
      const UnitBytes& after = blocks[i + 1].unit;
      m.transient += static_cast<double>(reduce_bytes * (after.gathered_numel + after.shard_numel));
      if (!on_gpu) m.transient += static_cast<double>(reduce_bytes * after.gathered_numel);
    }
    moments.push_back(m);
  }
  // 3. End of backward: every gradient, the root's reduction launched. Its
  // unsharded gradients (the embedding's has arrived: all of the root's,
  // in the compute dtype) are alive while they are staged, and the
  // staged input, the output shard and, on Gloo, the copy of the input it
  // reduces (measured on the 8B at FSDP 64 by a fake rank: without these
  // the estimate read 0.64 of the peak, whose moment this is).
  Moment end;
  end.phase = "end of backward";
  const double root_grads = fsdp ? static_cast<double>(param_bytes * root.gathered_numel) : 0.0;
  end.grads = all_grads + root_grads;
  // With the step in backward only what waits for the root's reduction
  // is left: its unsharded gradients and, accumulated, its shard's and
  // the first block's.
  if (early) {
    const double accumulated_waiting =
        accumulating ? root_shard_grads + (blocks.empty() ? 0.0 : local_grads(blocks.front())) : 0.0;
    end.grads = fsdp ? root_grads + accumulated_waiting : 0.0;
  }
  end.gathered = root_gathered;
  if (fsdp) {
    end.transient = static_cast<double>(reduce_bytes * (root.gathered_numel + root.shard_numel));
    if (!on_gpu) end.transient += static_cast<double>(reduce_bytes * root.gathered_numel);
  }
  moments.push_back(end);
  return moments;
}

}  // namespace

int64_t shard_numel_of(const RankUnits& units) {
  int64_t n = units.root.shard_numel;
  for (const RankBlock& b : units.blocks) n += b.unit.shard_numel;
  return n;
}

std::vector<Moment> pipelined_moments(const StepFacts& facts, const RankUnits& units, int64_t& most_in_flight) {
  RankWalk walk(facts, units);
  std::vector<Moment> moments = walk.pipelined();
  most_in_flight = walk.most_in_flight;
  return moments;
}

std::vector<Moment> unpipelined_moments(const StepFacts& facts, const RankUnits& units) {
  return RankWalk(facts, units).unpipelined();
}

}  // namespace titan::estimate
