// FsdpUnit's collectives and memory handling: the flat all-gather, the
// copy-out into full parameters, freeing and refilling their storage, and
// the asynchronous gradient reduce-scatter with its queue of reductions in
// flight.

#include "titan/parallel/fsdp/fsdp_unit.hpp"

#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/strides.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <mutex>

#include "titan/dist/comm_log.hpp"
#include "titan/util/byte_gauge.hpp"
#include "titan/util/range.hpp"
#include "titan/util/error.hpp"
#include "titan/util/internal_assert.hpp"

namespace titan::fsdp {
namespace {

// Bytes of full parameters alive on this rank (all units), and the peak:
// what reshard_after_forward saves shows up here. Published as a gauge so
// that profiling's memory snapshot can read it without including FSDP.
ByteGauge& unsharded_gauge() {
  static ByteGauge& g = byte_gauge(kFsdpUnshardedGauge);
  return g;
}

void count_alloc(int64_t bytes) { unsharded_gauge().add(bytes); }

// Memory of a full parameter whose data the autograd graph still needs
// later: drop the bytes, keep the StorageImpl (and so every tensor that
// aliases it).
void free_storage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  unsharded_gauge().add(-static_cast<int64_t>(s->nbytes()));
  s->set_nbytes(0);
  s->set_data_ptr_noswap(s->allocator()->allocate(0));
}

// Gives the StorageImpl back `nbytes` of fresh memory from its own allocator
// (the CUDA caching allocator on GPUs).
void alloc_storage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  const size_t nbytes = static_cast<size_t>(t.numel()) * t.element_size();
  if (s->nbytes() == nbytes) return;
  count_alloc(static_cast<int64_t>(nbytes) - static_cast<int64_t>(s->nbytes()));
  s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}

// Scatters a full gradient ([rows, ...]) into the reduce-scatter's staging
// rows of one parameter, dst = [n, padded_rows, row_numel]: rank r gets rows
// r·padded_rows onward (torch.chunk's cut), and the rows past the last real
// one are zero. One copy of the gradient in all (the cast to reduce_dtype
// happens in it) instead of a padded copy copied again, and only the
// padding zeroed. An undefined gradient (a parameter this backward did not
// reach) stages zeros.
void stage_padded_rows(const at::Tensor& dst, const at::Tensor& grad, int64_t rows) {
  const int64_t n = dst.size(0), padded = dst.size(1), row_numel = dst.size(2);
  if (!grad.defined()) {
    dst.zero_();
    return;
  }
  const at::Tensor g = grad.reshape({rows, row_numel});
  const int64_t whole = std::min(n, rows / padded);  // ranks whose rows are all real
  if (whole > 0) dst.narrow(0, 0, whole).copy_(g.narrow(0, 0, whole * padded).reshape({whole, padded, row_numel}));
  if (whole == n) return;
  const int64_t rest = rows - whole * padded;  // the next rank's real rows
  at::Tensor partial = dst.select(0, whole);
  if (rest > 0) partial.narrow(0, 0, rest).copy_(g.narrow(0, whole * padded, rest));
  partial.narrow(0, rest, padded - rest).zero_();
  if (whole + 1 < n) dst.narrow(0, whole + 1, n - whole - 1).zero_();
}

}  // namespace

void CommContext::record_event(FsdpEvent e) {
  std::lock_guard<std::mutex> lock(events_mu_);
  events_.push_back(std::move(e));
}

std::vector<FsdpEvent> CommContext::events() const {
  std::lock_guard<std::mutex> lock(events_mu_);
  return events_;
}

void CommContext::clear_events() {
  std::lock_guard<std::mutex> lock(events_mu_);
  events_.clear();
}

int64_t unsharded_bytes_now() { return unsharded_gauge().now(); }
int64_t unsharded_bytes_peak() { return unsharded_gauge().peak(); }
void reset_unsharded_peak() { unsharded_gauge().reset_peak(); }

FsdpUnit::FsdpUnit(std::string name, std::vector<FsdpParam> params, const dist::DeviceMesh& mesh,
                   const FullyShardOptions& options, at::Device compute_device)
    : name_(std::move(name)),
      params_(std::move(params)),
      mesh_(std::make_shared<const dist::DeviceMesh>(mesh)),
      options_(options),
      compute_device_(compute_device),
      shard_device_(options.offload_policy && options.offload_policy->offload_params ? at::Device(at::kCPU)
                                                                                    : compute_device) {
  if (mesh.ndim() == 1) {
    shard_group_ = mesh.group(0);
    placements_ = {Placement::shard(0)};
  } else {
    replicate_group_ = mesh.group(0);
    shard_group_ = mesh.group(1);
    placements_ = {Placement::replicate(), Placement::shard(0)};
  }
  for (FsdpParam& p : params_) {
    p.offset = flat_numel_;
    flat_numel_ += p.segment_numel();
  }
  // The all-gather buffer: the flat layout when every parameter travels in
  // one dtype (the usual case: nothing changes), else a byte buffer.
  bool one_dtype = true;
  for (const FsdpParam& p : params_) one_dtype = one_dtype && gather_dtype_of(p) == param_dtype();
  if (one_dtype) {
    gather_dtype_ = param_dtype();
    for (FsdpParam& p : params_) p.gather_offset = p.offset;
    gather_numel_ = flat_numel_;
  } else {
    gather_dtype_ = at::kByte;
    constexpr int64_t kAlign = 16;  // a multiple of every element size
    for (FsdpParam& p : params_) {
      p.gather_offset = gather_numel_;
      const int64_t bytes = p.segment_numel() * static_cast<int64_t>(c10::elementSize(gather_dtype_of(p)));
      gather_numel_ += (bytes + kAlign - 1) / kAlign * kAlign;
    }
  }
}

at::ScalarType FsdpUnit::param_dtype() const {
  if (options_.mp_policy.param_dtype) return *options_.mp_policy.param_dtype;
  return params_.empty() ? at::kFloat : params_.front().shard.scalar_type();
}

at::ScalarType FsdpUnit::reduce_dtype() const {
  if (options_.mp_policy.reduce_dtype) return *options_.mp_policy.reduce_dtype;
  return param_dtype();
}

at::ScalarType FsdpUnit::gather_dtype_of(const FsdpParam& p) const {
  return p.extension ? p.extension->all_gather_dtype() : param_dtype();
}

at::Tensor FsdpUnit::gather_segment(const at::Tensor& row, const FsdpParam& p) const {
  const at::ScalarType dtype = gather_dtype_of(p);
  if (gather_dtype_ == dtype) return row.narrow(-1, p.gather_offset, p.segment_numel());
  const int64_t bytes = p.segment_numel() * static_cast<int64_t>(c10::elementSize(dtype));
  return row.narrow(-1, p.gather_offset, bytes).view(dtype);
}

// This rank's row of the all-gather buffer: every parameter's shard padded
// to padded_rows, cast to its gather dtype (param_dtype, or what its
// extension makes of it: the extension may run collectives, so it is called
// on every rank, with or without rows), on the compute device (the copy is
// where offloaded shards come off the CPU).
at::Tensor FsdpUnit::shard_send_buffer() const {
  at::Tensor buf = at::zeros({gather_numel_}, at::TensorOptions().dtype(gather_dtype_).device(compute_device_));
  for (const FsdpParam& p : params_) {
    // On the compute device before the extension sees it: its collectives
    // (NCCL) need device tensors, also with CPU offload.
    at::Tensor src = p.extension ? p.extension->pre_all_gather(p.shard.detach().to(compute_device_)) : p.shard.detach();
    if (p.local_rows == 0) continue;
    gather_segment(buf, p).narrow(0, 0, p.local_rows * p.row_numel).copy_(src.reshape({-1}));
  }
  return buf;
}

const char* state_name(ShardedState s) {
  switch (s) {
    case ShardedState::Sharded: return "Sharded";
    case ShardedState::ShardedPostForward: return "ShardedPostForward";
    case ShardedState::Unsharded: return "Unsharded";
  }
  return "?";
}

const char* state_name(TrainingState s) {
  switch (s) {
    case TrainingState::Idle: return "Idle";
    case TrainingState::Forward: return "Forward";
    case TrainingState::PreBackward: return "PreBackward";
    case TrainingState::PostBackward: return "PostBackward";
  }
  return "?";
}

void FsdpUnit::issue_all_gather(bool prefetch) {
  if (pending_ || sharded_state_ == ShardedState::Unsharded || params_.empty()) return;
  TITAN_PROFILE_RANGE((prefetch ? "fsdp::all_gather (prefetch) " : "fsdp::all_gather ") + name_);
  at::NoGradGuard no_grad;
  const auto& g = *shard_group_;
  gather_in_ = shard_send_buffer();
  gather_out_ = at::empty({g.size() * gather_numel_}, gather_in_.options());
  // One all-gather for the whole unit (FSDP2 groups a unit's parameters the
  // same way): fewer, larger messages. Issued without waiting, through the
  // ProcessGroup like every collective (its record, its failure message),
  // so compute can run while it is in flight; unshard() waits.
  gather_issued_us_ = event_clock_us();
  gather_prefetched_ = prefetch;
  pending_ = g.all_gather_async(gather_in_, gather_out_);
}

void FsdpUnit::unshard() {
  if (sharded_state_ == ShardedState::Unsharded || params_.empty()) return;
  if (!pending_) issue_all_gather(/*prefetch=*/false);
  TITAN_PROFILE_RANGE("fsdp::unshard " + name_);  // waits for the all-gather, copies the weights out
  const double wait_start = event_clock_us();
  pending_->wait();
  comm_->record_event({name_, "all_gather_wait", wait_start, event_clock_us(), gather_prefetched_});
  pending_.reset();
  gather_in_ = at::Tensor();
  at::NoGradGuard no_grad;
  copy_out(gather_out_);
  gather_out_ = at::Tensor();
  gathered_versions_.clear();
  for (const FsdpParam& p : params_) gathered_versions_.push_back(static_cast<int64_t>(p.shard._version()));
  comm_->record_event({name_, "all_gather", gather_issued_us_, event_clock_us(), gather_prefetched_});
  sharded_state_ = ShardedState::Unsharded;
}

// gathered = [n, flat] rank-major; parameter j is rows of every rank's
// segment j, stacked, with the padding rows cut off.
void FsdpUnit::copy_out(const at::Tensor& gathered) {
  const int64_t n = shard_group_->size();
  at::Tensor by_rank = gathered.view({n, gather_numel_});
  const bool refill = sharded_state_ == ShardedState::ShardedPostForward && full_.size() == params_.size();
  if (!refill) full_.assign(params_.size(), at::Tensor());
  for (size_t j = 0; j < params_.size(); ++j) {
    const FsdpParam& p = params_[j];
    std::vector<int64_t> padded_shape = p.shape;
    padded_shape[0] = n * p.padded_rows;
    at::Tensor src = gather_segment(by_rank, p).reshape(padded_shape).narrow(0, 0, p.rows);
    if (refill) {
      // Write through a fresh alias of the same memory: the saved tensors'
      // version counters stay as autograd recorded them. (An alias over the
      // storage, not from_blob over its pointer: on CUDA from_blob asks the
      // driver where the pointer lives, and a 0-element parameter's is null.)
      alloc_storage(full_[j]);
      at::Tensor alias = at::empty({0}, full_[j].options());
      alias.set_(full_[j].storage(), /*storage_offset=*/0, p.shape, c10::contiguous_strides(p.shape));
      alias.copy_(src);
    } else {
      // Own storage per parameter, so that each can be freed and refilled alone.
      full_[j] = at::empty(p.shape, src.options());
      full_[j].copy_(src);
      count_alloc(static_cast<int64_t>(full_[j].storage().nbytes()));
    }
  }
}

void FsdpUnit::free_full_storage() {
  for (const at::Tensor& t : full_)
    if (t.defined()) free_storage(t);
  sharded_state_ = ShardedState::ShardedPostForward;
}

bool FsdpUnit::shards_unchanged() const {
  if (gathered_versions_.size() != params_.size()) return false;
  for (size_t j = 0; j < params_.size(); ++j)
    if (static_cast<int64_t>(params_[j].shard._version()) != gathered_versions_[j]) return false;
  return true;
}

void FsdpUnit::release_full() {
  if (sharded_state_ != ShardedState::Sharded) {
    for (const at::Tensor& t : full_)
      if (t.defined()) free_storage(t);  // the graph may still hold aliases
  }
  full_.clear();
  sharded_state_ = ShardedState::Sharded;
  graphs_in_flight_ = 0;
  backwards_begun_ = 0;
  recomputes_pending_ = 0;
}

// ------------------------------------------------- gradient reductions in flight
// One unit's gradient reduction, from its issue to shard.grad (not in the
// anonymous namespace: CommContext::Reductions, which has external linkage,
// holds them).
struct GradReduction {
  std::shared_ptr<FsdpUnit> unit;  // a graph (and so a reduction) may outlive the model
  at::Tensor staged;               // [n · flat], reduce_dtype: the big buffer, dropped when the RS is done
  at::Tensor reduced;              // [flat]: this rank's segment, averaged over the shard group
  std::shared_ptr<dist::PendingWork> rs;  // reduce-scatter, until waited
  std::shared_ptr<dist::PendingWork> ar;  // HSDP all-reduce over replicas, until waited
  double rs_issued_us = 0, ar_issued_us = 0;
};

namespace {

void finish_reduce_scatter(GradReduction& r) {
  const double wait_start = event_clock_us();
  r.rs->wait();
  r.unit->comm_context()->record_event({r.unit->name(), "reduce_scatter_wait", wait_start, event_clock_us(), false});
  r.rs.reset();
  r.unit->comm_context()->record_event({r.unit->name(), "reduce_scatter", r.rs_issued_us, event_clock_us(), false});
  r.staged = at::Tensor();
  const auto& replicas = r.unit->replicate_group();
  if (replicas && replicas->size() > 1) {
    // HSDP: the shard group's average, averaged again across replicas. It
    // can only start now (Gloo reads `reduced` when it starts), so it is
    // chained here and left to run under the next unit's backward.
    r.ar_issued_us = event_clock_us();
    r.ar = replicas->all_reduce_async(r.reduced, dist::ReduceOp::Avg);
  }
}

void finish_all_reduce(GradReduction& r) {
  if (!r.ar) return;
  const double wait_start = event_clock_us();
  r.ar->wait();
  r.unit->comm_context()->record_event({r.unit->name(), "all_reduce_wait", wait_start, event_clock_us(), false});
  r.ar.reset();
  r.unit->comm_context()->record_event({r.unit->name(), "all_reduce", r.ar_issued_us, event_clock_us(), false});
}

}  // namespace

// A root's reductions in flight, in issue order.
struct CommContext::Reductions {
  mutable std::mutex mu;
  std::deque<GradReduction> queue;

  // Waits for the reductions in flight, oldest first (mu held). `drain`:
  // all of them (end of backward). Otherwise (a new issue is coming) an
  // all-reduce that this call starts stays in flight, so that it overlaps
  // the next unit's backward too; the one started by the previous call is
  // finished.
  void settle_locked(bool drain) {
    try {
      for (auto it = queue.begin(); it != queue.end();) {
        GradReduction& r = *it;
        const bool ar_was_in_flight = r.ar != nullptr;
        if (r.rs) finish_reduce_scatter(r);
        if (r.ar && !ar_was_in_flight && !drain) {
          ++it;
          continue;
        }
        finish_all_reduce(r);
        r.unit->accumulate_gradients(r.reduced);
        it = queue.erase(it);
      }
    } catch (...) {
      // A failed collective leaves the group unusable and these buffers
      // meaningless; forget them rather than add half-reduced gradients later.
      queue.clear();
      throw;
    }
  }
};

CommContext::CommContext() : reductions_(std::make_unique<Reductions>()) {}
CommContext::~CommContext() = default;

void CommContext::finish() {
  std::lock_guard<std::mutex> lock(reductions_->mu);
  reductions_->settle_locked(/*drain=*/true);
}

int64_t CommContext::in_flight() const {
  std::lock_guard<std::mutex> lock(reductions_->mu);
  return static_cast<int64_t>(reductions_->queue.size());
}

void FsdpUnit::issue_reduce_scatter(const std::vector<at::Tensor>& full_grads) {
  TITAN_CHECK(full_grads.size() == params_.size(), "fsdp: unit ", name_, " got ", full_grads.size(),
              " gradients for ", params_.size(), " parameters");
  if (params_.empty()) return;
  TITAN_PROFILE_RANGE("fsdp::reduce_scatter " + name_);
  at::NoGradGuard no_grad;
  CommContext::Reductions& inflight = *comm_->reductions_;
  std::lock_guard<std::mutex> lock(inflight.mu);
  // At most one reduce-scatter in flight per root: wait for the previous
  // unit's before staging ours. It has had this unit's whole backward to
  // finish, and waiting first keeps one staged buffer (a unit's full
  // gradients in reduce_dtype) alive at a time instead of two, as FSDP2 does.
  inflight.settle_locked(/*drain=*/false);

  const int64_t n = shard_group_->size();
  const auto ropts = at::TensorOptions().dtype(reduce_dtype()).device(compute_device_);
  // [n, flat]: row r holds, for every parameter, the rows rank r owns.
  GradReduction r;
  r.unit = shared_from_this();
  r.staged = at::empty({n, flat_numel_}, ropts);
  for (size_t j = 0; j < params_.size(); ++j) {
    const FsdpParam& p = params_[j];
    if (p.segment_numel() == 0) continue;
    stage_padded_rows(r.staged.narrow(1, p.offset, p.segment_numel()).view({n, p.padded_rows, p.row_numel}),
                      full_grads[j], p.rows);
  }
  r.reduced = at::empty({flat_numel_}, ropts);
  r.rs_issued_us = event_clock_us();
  // Avg: each rank's loss is the mean over its own batch, the job's loss the
  // mean over ranks, so the job's gradient is the mean of the ranks'.
  r.rs = shard_group_->reduce_scatter_async(r.staged.view({-1}), r.reduced, dist::ReduceOp::Avg);
  inflight.queue.push_back(std::move(r));
}

void FsdpUnit::add_unsynced(const std::vector<at::Tensor>& full_grads) {
  TITAN_INTERNAL_ASSERT(full_grads.size() == params_.size(), "fsdp: unit ", name_, " got ", full_grads.size(),
                        " gradients for ", params_.size(), " parameters");
  at::NoGradGuard no_grad;
  if (unsynced_grads_.empty()) unsynced_grads_.resize(params_.size());
  for (size_t j = 0; j < params_.size(); ++j) {
    const at::Tensor& g = full_grads[j];
    if (!g.defined()) continue;
    at::Tensor& sum = unsynced_grads_[j];
    // In reduce_dtype, as FSDP2 keeps its unsharded accumulated gradient:
    // bf16 compute with fp32 reduction sums the micro-batches in fp32.
    if (!sum.defined()) sum = g.to(reduce_dtype(), /*non_blocking=*/false, /*copy=*/true);
    else sum.add_(g);
  }
}

void FsdpUnit::accumulate_gradients(const at::Tensor& reduced) {
  at::NoGradGuard no_grad;
  for (FsdpParam& p : params_) {
    if (!p.requires_grad) continue;
    std::vector<int64_t> padded_shape = p.shape;
    padded_shape[0] = p.padded_rows;
    // reduce_dtype → shard dtype, compute device → CPU with offload; a view
    // of `reduced` when neither changes.
    at::Tensor g = reduced.narrow(0, p.offset, p.segment_numel())
                       .view(padded_shape)
                       .narrow(0, 0, p.local_rows)
                       .to(p.shard.device(), p.shard.scalar_type());
    at::Tensor& grad = p.shard.mutable_grad();
    if (grad.defined())
      grad.add_(g);  // a later micro-batch: accumulate, as AccumulateGrad does
    else
      // .grad must own its memory, not be a view of the flat buffer: the
      // optimizer's zero_grad() detaches it in place, which views refuse.
      grad = g.is_alias_of(reduced) ? g.clone() : g.contiguous();
    // The shard's gradient is final for this backward: its post-accumulate-
    // grad hook runs now, as AccumulateGrad runs a plain leaf's (torch's
    // FSDP2 does the same; the optimizer's step in backward hangs there).
    if (auto& hook = torch::autograd::impl::post_acc_grad_hooks(p.shard)) (*hook)(p.shard);
  }
}

void FsdpUnit::install(const std::vector<at::Tensor>& tensors) {
  for (size_t j = 0; j < params_.size(); ++j) {
    FsdpParam& p = params_[j];
    p.owner->replace_parameter(p.name, tensors[j]);
  }
}

void FsdpUnit::install_shards() {
  for (FsdpParam& p : params_) {
    p.owner->replace_parameter(p.name, p.shard);
    p.shard.set_requires_grad(p.requires_grad);
  }
}

}  // namespace titan::fsdp
