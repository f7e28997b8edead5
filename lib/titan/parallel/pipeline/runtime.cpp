#include "titan/parallel/pipeline/runtime.hpp"

#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <map>

#include "titan/dist/process_group.hpp"
#include "titan/metrics/tensor_memory.hpp"
#include "titan/parallel/pipeline/simulate.hpp"
#include "titan/util/range.hpp"
#include "titan/util/error.hpp"
#include "titan/util/internal_assert.hpp"

namespace titan::pp {
namespace {

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Every message of a step has its own tag: direction, stage, micro-batch.
int message_tag(bool backward, int stage, int mb, const ScheduleSpec& spec) {
  return ((backward ? 1 : 0) * spec.num_stages() + stage) * spec.microbatches + mb + 1;
}

constexpr int kShapeTag = 0x7fff0000;

// The micro-batch's tensors on the stages' device (no copy when they are
// there already, as the trainer's are).
BatchInputs on_device(const BatchInputs& b, c10::Device device) {
  auto to = [&](const at::Tensor& t) { return t.defined() ? t.to(device) : t; };
  BatchInputs out = b;
  out.inputs = to(b.inputs), out.labels = to(b.labels), out.doc_start = to(b.doc_start);
  return out;
}

}  // namespace

PipelineRuntime::PipelineRuntime(ScheduleSpec spec, std::vector<std::shared_ptr<PipelineStage>> stages,
                                   std::shared_ptr<dist::ProcessGroup> pp_group, RuntimeOptions options)
    : spec_(spec), stages_(std::move(stages)), group_(std::move(pp_group)), options_(std::move(options)) {
  spec_.validate();
  TITAN_CHECK(spec_.pp == 1 || group_, "pipeline: ", spec_.pp, " ranks but no pipeline process group");
  if (group_)
    TITAN_CHECK(group_->size() == spec_.pp, "pipeline: the pipeline group has ", group_->size(), " ranks, the schedule ",
                spec_.pp);
  rank_ = group_ ? group_->rank() : 0;
  const std::vector<int> mine = spec_.stages_of_rank(rank_);
  TITAN_CHECK(stages_.size() == mine.size(), "pipeline rank ", rank_, " runs stages of ", spec_.describe(), " (",
              mine.size(), " of them) but was given ", stages_.size());
  for (int s : mine) {
    bool found = false;
    for (const auto& st : stages_) found = found || (st->index() == s && st->options().num_stages == spec_.num_stages());
    TITAN_CHECK(found, "pipeline rank ", rank_, " must run stage ", s, " of ", spec_.num_stages(), " but was not given it");
  }
  if (options_.compute_actions.empty()) {
    actions_ = build_schedule(spec_).at(static_cast<size_t>(rank_));
  } else {
    // A custom order: the simulator proves it complete and deadlock-free
    // before any rank blocks on a receive that would never come.
    TITAN_CHECK(options_.compute_actions.size() == static_cast<size_t>(spec_.pp), "pipeline: custom actions for ",
                options_.compute_actions.size(), " ranks, the schedule has ", spec_.pp);
    simulate(spec_, options_.compute_actions);
    actions_ = add_communication(spec_, options_.compute_actions).at(static_cast<size_t>(rank_));
  }
}

PipelineStage& PipelineRuntime::stage(int s) {
  for (auto& st : stages_)
    if (st->index() == s) return *st;
  throw Error("pipeline rank " + std::to_string(rank_) + " has no stage " + std::to_string(s));
}

// Once, before the first step: every sender tells its receiver the shape
// and dtype it will send, and the receiver compares with what it expects,
// so that a mismatch is one clear error instead of a garbled recv. All of
// a rank's headers go as one batch, in increasing stage order on both
// sides (so a pair's messages match in order, as NCCL pairs them): one
// coalesced group on the pipeline group's own communicator, where separate
// sends and receives would make ProcessGroupNCCL create a 2-rank
// communicator per pair of neighbours for these few bytes.
void PipelineRuntime::agree_shapes() {
  const c10::Device device = stages_.front()->options().device;
  auto header = [&](const std::vector<int64_t>& shape, at::ScalarType dtype) {
    std::vector<int64_t> h(6, -1);
    h[0] = static_cast<int64_t>(shape.size());
    for (size_t k = 0; k < shape.size() && k < 4; ++k) h[k + 1] = shape[k];
    h[5] = static_cast<int64_t>(dtype);
    return at::tensor(h, at::TensorOptions().dtype(at::kLong)).to(device);
  };
  auto text = [](const at::Tensor& h) {
    at::Tensor c = h.cpu();
    std::string s = "[";
    for (int64_t k = 0; k < c[0].item<int64_t>() && k < 4; ++k) s += (k ? ", " : "") + std::to_string(c[k + 1].item<int64_t>());
    return s + "] " + std::string(c10::toString(static_cast<at::ScalarType>(c[5].item<int64_t>())));
  };
  struct Expected {
    int stage;
    at::Tensor want, got;
  };
  std::vector<Expected> expected;
  std::vector<dist::P2POp> ops;
  for (int s : spec_.stages_of_rank(rank_)) {
    PipelineStage& st = stage(s);
    if (!st.is_first() && spec_.rank_of_stage(s - 1) != rank_) {
      at::Tensor want = header(st.options().input_shape, st.options().dtype);
      expected.push_back({s, want, at::empty_like(want)});
      ops.push_back({/*is_send=*/false, expected.back().got, spec_.rank_of_stage(s - 1), kShapeTag + s});
    }
    if (!st.is_last() && spec_.rank_of_stage(s + 1) != rank_)
      ops.push_back({/*is_send=*/true, header(st.options().output_shape, st.options().dtype), spec_.rank_of_stage(s + 1),
                     kShapeTag + s + 1});
  }
  for (auto& w : group_->batch_p2p(ops)) w->wait();  // `ops` keeps the send buffers alive until here
  // A fake rank's receives carry no peer's header (dist::ProcessGroup::communicates).
  if (!group_->communicates()) expected.clear();
  for (const Expected& e : expected)
    TITAN_CHECK(at::equal(e.got.cpu(), e.want.cpu()), "pipeline stage ", e.stage, " (rank ", rank_,
                ") expects activations ", text(e.want), " but stage ", e.stage - 1, " (rank ",
                spec_.rank_of_stage(e.stage - 1), ") will send ", text(e.got), ": do all ranks run the same config?");
  shapes_agreed_ = true;
}

PipelineStepResult PipelineRuntime::step(const BatchInputs& batch, std::optional<double> loss_scale) {
  return run(batch, loss_scale, /*forward_only=*/false, nullptr);
}

std::vector<double> PipelineRuntime::eval(const BatchInputs& batch) {
  at::NoGradGuard no_grad;
  std::vector<double> losses;
  try {
    run(batch, 1.0, /*forward_only=*/true, &losses);
  } catch (...) {
    for (auto& st : stages_) st->discard_microbatches();
    throw;
  }
  for (auto& st : stages_) st->discard_microbatches();
  return losses;
}

// One step's traffic between actions on this rank: the activations and
// gradients received (or handed over by a stage on the same rank), the
// outputs waiting for their SEND, and the sends still in flight.
struct PipelineRuntime::StepState {
  std::vector<BatchInputs> micro;  ///< the step's micro-batches, on the host
  double loss_scale = 1;
  bool forward_only = false;
  c10::Device device{c10::kCPU};
  double t0 = 0;  ///< the step's start (events are relative to it)
  /// Weight-producing backwards left per stage, so the stage can tell its last.
  std::map<int, int> weight_backwards_left;
  /// (stage, micro-batch) -> tensor.
  std::map<std::pair<int, int>, at::Tensor> stage_input, output_grad, to_send_fwd, to_send_bwd;
  /// (stage, micro-batch) -> the work that fills its stage_input / output_grad
  /// buffer: waited by the compute action that reads it, not where posted.
  std::map<std::pair<int, int>, std::shared_ptr<dist::PendingWork>> input_arriving, grad_arriving;
  /// Sends in flight (Gloo; an NCCL batch is waited where it is posted).
  /// Each holds its buffer until waited; nothing else keeps a sent tensor,
  /// so on NCCL an activation leaves with its batch, not with the step.
  std::vector<std::shared_ptr<dist::PendingWork>> sends;
  /// The last stage's loss of each micro-batch (forward only).
  std::map<int, at::Tensor> eval_losses;
};

PipelineStepResult PipelineRuntime::run(const BatchInputs& batch, std::optional<double> loss_scale, bool forward_only,
                                        std::vector<double>* microbatch_losses) {
  const int m = spec_.microbatches, S = spec_.num_stages();
  StepState st;
  st.micro = split_microbatches(batch, m);
  st.loss_scale = loss_scale.value_or(1.0 / m);
  st.forward_only = forward_only;
  st.device = stages_.front()->options().device;
  if (!shapes_agreed_ && spec_.pp > 1) agree_shapes();
  for (const Action& a : actions_)
    if (a.type == ActionType::Backward || a.type == ActionType::BackwardWeight) ++st.weight_backwards_left[a.stage];

  events_.clear();
  if (options_.record_events && group_) group_->barrier();
  st.t0 = now_us();
  int64_t mem_start = 0;
  if (options_.measure_memory) {
    metrics::reset_tensor_memory_peak(st.device);
    mem_start = metrics::tensor_memory(st.device).current_bytes;
  }

  // Consecutive communication actions run as one batch; each compute
  // action on its own.
  for (size_t k = 0; k < actions_.size();) {
    if (actions_[k].is_compute()) {
      run_compute(actions_[k++], st);
      continue;
    }
    size_t end = k;
    while (end < actions_.size() && !actions_[end].is_compute()) ++end;
    run_communication(k, end, st);
    k = end;
  }
  for (auto& w : st.sends) w->wait();
  for (auto* arriving : {&st.input_arriving, &st.grad_arriving})  // none left unless an eval skipped its reader
    for (auto& [key, w] : *arriving) w->wait();

  PipelineStepResult r;
  if (forward_only) {
    // Each micro-batch's mean loss, from the last stage's rank to every
    // pipeline rank.
    at::Tensor losses = at::zeros({m}, at::TensorOptions().dtype(at::kDouble).device(st.device));
    for (const auto& [i, l] : st.eval_losses) losses[i].copy_(l.reshape({}));
    if (group_) group_->broadcast(losses, spec_.rank_of_stage(S - 1));
    const at::Tensor host = losses.cpu();
    microbatch_losses->assign(host.data_ptr<double>(), host.data_ptr<double>() + m);
    return r;  // eval() discards what the stages kept
  }
  if (options_.measure_memory) r.peak_activation_bytes = metrics::tensor_memory(st.device).peak_bytes - mem_start;
  // The loss lives on the last stage's rank; every pipeline rank reports it.
  at::Tensor loss = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(st.device));
  for (auto& stage : stages_)
    if (stage->is_last()) {
      at::Tensor sum = stage->take_loss_sum();
      if (sum.defined()) loss.copy_(sum.to(at::kDouble).reshape({1}));
    }
  if (group_) group_->broadcast(loss, spec_.rank_of_stage(S - 1));
  r.loss_sum = loss.cpu().item<double>();
  r.loss = r.loss_sum / m;
  return r;
}

// Posted together, as torch's batch_isend_irecv (one NCCL group). Receives
// get a fresh buffer of the stage's agreed shape and are waited by the
// compute action that reads them (the host, or on NCCL the compute stream,
// goes on meanwhile); sends take the output or input gradient a compute
// action left for them and are waited at the end of the step.
void PipelineRuntime::run_communication(size_t begin, size_t end, StepState& st) {
  const double start = now_us();
  std::vector<dist::P2POp> ops;
  // Per op: where a receive's work goes (the map and key of the buffer it
  // fills), nullptr for a send.
  using Arriving = std::map<std::pair<int, int>, std::shared_ptr<dist::PendingWork>>;
  std::vector<std::pair<Arriving*, std::pair<int, int>>> arrivals;
  for (size_t j = begin; j < end; ++j) {
    const Action& a = actions_[j];
    if (st.forward_only && (a.type == ActionType::RecvBackward || a.type == ActionType::SendBackward)) continue;
    if (options_.before_action) options_.before_action(a);
    const int s = a.stage, i = a.microbatch;
    const auto key = std::make_pair(s, i);
    const StageOptions& o = stage(s).options();
    switch (a.type) {
      case ActionType::RecvForward:
      case ActionType::RecvBackward: {
        const bool bwd = a.type == ActionType::RecvBackward;
        at::Tensor buf = at::empty(bwd ? o.output_shape : o.input_shape, at::TensorOptions().dtype(o.dtype).device(o.device));
        (bwd ? st.output_grad : st.stage_input)[key] = buf;
        ops.push_back({false, buf, spec_.rank_of_stage(bwd ? s + 1 : s - 1), message_tag(bwd, s, i, spec_)});
        arrivals.push_back({bwd ? &st.grad_arriving : &st.input_arriving, key});
        break;
      }
      default: {  // SEND_F / SEND_B
        const bool bwd = a.type == ActionType::SendBackward;
        auto& pending = bwd ? st.to_send_bwd : st.to_send_fwd;
        auto it = pending.find(key);
        TITAN_INTERNAL_ASSERT(it != pending.end(), "pipeline rank ", rank_, ": ", a.str(), " has nothing to send");
        ops.push_back({true, it->second.contiguous(), spec_.rank_of_stage(bwd ? s - 1 : s + 1),
                       message_tag(bwd, bwd ? s - 1 : s + 1, i, spec_)});
        arrivals.push_back({nullptr, key});
        pending.erase(it);
        break;
      }
    }
  }
  if (ops.empty()) {
    record_communication_events(begin, end, start, st);
    return;
  }
  const bool grouped = group_->backend()->supportsCoalescing();  // NCCL: one work for the batch
  if (grouped) {
    // The earlier batches' sends, waited by the compute stream (the host
    // goes on): each holds its tensors until waited, and a send already
    // matched by its receive (the schedule posts both at one moment) costs
    // the stream nothing, where keeping them all to the step's end would
    // hold every micro-batch's activation and gradient sent.
    for (auto& w : st.sends) w->wait();
    st.sends.clear();
  }
  // One range per batch in traces, as ProcessGroup::batch_p2p marks its
  // own ("c10d::batch_p2p pp"); not a TITAN_PROFILE_RANGE, which would
  // relabel the ops for the flight recorder.
  RECORD_USER_SCOPE("c10d::batch_p2p " + group_->name());
  const std::vector<std::shared_ptr<dist::PendingWork>> works = group_->batch_p2p_async(ops);
  bool receives = false;
  for (size_t k = 0; k < ops.size(); ++k) {
    const std::shared_ptr<dist::PendingWork>& w = grouped ? works.front() : works.at(k);
    if (ops[k].is_send) {
      if (!grouped) st.sends.push_back(w);
    } else {
      (*arrivals[k].first)[arrivals[k].second] = w;
      receives = true;
    }
  }
  // A group with receives is waited by their reader; one of sends alone by
  // the next batch (or the step's end).
  if (grouped && !receives) st.sends.push_back(works.front());
  record_communication_events(begin, end, start, st);
}

void PipelineRuntime::record_communication_events(size_t begin, size_t end, double start, StepState& st) {
  if (options_.record_events && !st.forward_only)
    for (size_t j = begin; j < end; ++j)  // a receive's event is its wait, recorded by its reader
      if (actions_[j].type == ActionType::SendForward || actions_[j].type == ActionType::SendBackward)
        events_.push_back({rank_, actions_[j], start - st.t0, now_us() - st.t0});
}

void PipelineRuntime::run_compute(const Action& a, StepState& st) {
  // Forward only (eval): the forwards and their sends and receives, in the
  // schedule's order, which stays deadlock-free without the rest (a
  // forward's send waits on forwards alone).
  if (st.forward_only && a.type != ActionType::Forward) return;
  if (options_.before_action) options_.before_action(a);
  // The receive that fills this action's input, if one is in flight: waited
  // here, where it is read (a wait that shows in the timeline as its RECV).
  {
    const bool fwd = a.type == ActionType::Forward;
    auto& arriving = fwd ? st.input_arriving : st.grad_arriving;
    auto it = a.type == ActionType::BackwardWeight ? arriving.end() : arriving.find({a.stage, a.microbatch});
    if (it != arriving.end()) {
      const double wait_start = now_us();
      it->second->wait();
      arriving.erase(it);
      if (options_.record_events && !st.forward_only)
        events_.push_back({rank_, Action{fwd ? ActionType::RecvForward : ActionType::RecvBackward, a.stage, a.microbatch},
                           wait_start - st.t0, now_us() - st.t0});
    }
  }
  // Each compute action as a trace range, spelled as torch writes it: "pp::2F0".
  TITAN_PROFILE_RANGE("pp::" + a.str());
  const double start = now_us();
  const int s = a.stage, i = a.microbatch;
  const auto key = std::make_pair(s, i);
  PipelineStage& stg = stage(s);
  switch (a.type) {
    case ActionType::Forward: {
      const BatchInputs mb = on_device(st.micro.at(static_cast<size_t>(i)), st.device);
      at::Tensor x;
      if (stg.is_first()) {
        x = mb.inputs;
      } else {
        auto it = st.stage_input.find(key);
        TITAN_INTERNAL_ASSERT(it != st.stage_input.end(), "pipeline rank ", rank_, ": forward ", a.str(), " has no input");
        x = it->second;
        st.stage_input.erase(it);
      }
      at::Tensor y = stg.forward(i, x, mb, st.loss_scale);
      if (st.forward_only && stg.is_last()) st.eval_losses[i] = y.to(at::kDouble);
      if (!stg.is_last()) {
        // Same rank next (ZBV's turn): hand over; otherwise SEND_F sends it.
        if (spec_.rank_of_stage(s + 1) == rank_) st.stage_input[{s + 1, i}] = y;
        else st.to_send_fwd[key] = y;
      }
      break;
    }
    case ActionType::Backward:
    case ActionType::BackwardInput: {
      at::Tensor g;
      if (!stg.is_last()) {
        auto it = st.output_grad.find(key);
        TITAN_INTERNAL_ASSERT(it != st.output_grad.end(), "pipeline rank ", rank_, ": backward ", a.str(),
                              " has no gradient");
        g = it->second;
        st.output_grad.erase(it);
      }
      at::Tensor gin;
      if (a.type == ActionType::Backward) {
        stg.set_last_weight_backward(--st.weight_backwards_left[s] == 0);
        gin = stg.backward(i, g);
      } else {
        gin = stg.backward_input(i, g);
      }
      if (!stg.is_first()) {
        if (spec_.rank_of_stage(s - 1) == rank_) st.output_grad[{s - 1, i}] = gin;
        else st.to_send_bwd[key] = gin;
      }
      break;
    }
    case ActionType::BackwardWeight:
      stg.set_last_weight_backward(--st.weight_backwards_left[s] == 0);
      stg.backward_weight(i);
      break;
    default:
      TITAN_INTERNAL_ASSERT(false, "pipeline: ", a.str(), " is not a compute action");
  }
  if (options_.record_events) events_.push_back({rank_, a, start - st.t0, now_us() - st.t0});
}

std::vector<PipelineEvent> PipelineRuntime::gather_events() const {
  // [n, 6] doubles per rank: type, stage, mb, start, end, rank.
  std::vector<double> flat;
  for (const PipelineEvent& e : events_)
    for (double v : {static_cast<double>(e.action.type), static_cast<double>(e.action.stage),
                     static_cast<double>(e.action.microbatch), e.start_us, e.end_us, static_cast<double>(e.rank)})
      flat.push_back(v);
  const c10::Device device = stages_.front()->options().device;
  at::Tensor mine = at::tensor(flat, at::TensorOptions().dtype(at::kDouble)).view({-1, 6}).to(device);
  at::Tensor all = group_ ? group_->all_gather_uneven(mine, 0).cpu() : mine.cpu();
  std::vector<PipelineEvent> out;
  for (int64_t k = 0; k < all.size(0); ++k) {
    auto row = all[k];
    PipelineEvent e;
    e.action = {static_cast<ActionType>(static_cast<int>(row[0].item<double>())), static_cast<int>(row[1].item<double>()),
                static_cast<int>(row[2].item<double>())};
    e.start_us = row[3].item<double>();
    e.end_us = row[4].item<double>();
    e.rank = static_cast<int>(row[5].item<double>());
    out.push_back(e);
  }
  return out;
}

std::vector<double> measured_bubble(const std::vector<PipelineEvent>& events, int pp) {
  double span = 0;
  std::vector<double> busy(static_cast<size_t>(pp), 0.0);
  for (const PipelineEvent& e : events) {
    span = std::max(span, e.end_us);
    if (e.action.is_compute() && e.rank >= 0 && e.rank < pp) busy[static_cast<size_t>(e.rank)] += e.end_us - e.start_us;
  }
  std::vector<double> out;
  for (double b : busy) out.push_back(span > 0 ? 1.0 - b / span : 0.0);
  return out;
}

}  // namespace titan::pp
