#pragma once
/// @file
/// @brief FsdpUnit: the parameters one fully_shard() call owns, and the four
/// things FSDP does to them — shard, unshard (all-gather), reshard (free),
/// reduce-scatter the gradients.
///
/// Lifecycle of one unit in a training step (reshard_after_forward on),
/// with its TrainingState / ShardedState after each hook:
///
/// ```
///  forward   pre_forward:  wait all-gather (or run it) ─ prefetch next unit    Forward / Unsharded
///            ─ install full params
///            compute
///            post_forward: put the shards back in the module                  Idle / ShardedPostForward
///                          ─ free the full storage
///  backward  PreBackward node (on the unit's output): all-gather into the    PreBackward / Unsharded
///                          same storage ─ prefetch the unit before it
///            the unit's backward (uses the saved full params)
///            UnshardBackward node: stage the full grads ─ issue their        PostBackward / Sharded
///                          reduce-scatter (async) ─ free; the unit before
///                          it computes meanwhile
///  end of backward (engine final callback): wait what is still in flight    Idle / Sharded
///                          ─ shard.grad
/// ```
///
/// What each hook does with the full weights turns on two named
/// predicates (hooks.cpp), not on the counters behind them:
/// `full_weights_still_needed()` (graphs of other micro-batches in flight,
/// the step's unsynced gradient sums, a checkpointed first pass kept for
/// its recompute) and `may_free_between_uses()` (reshard_after_forward, not
/// the root, no backward of the unit begun and unfinished):
///
/// | hook          | state in → out            | full weights                                                        |
/// |---------------|---------------------------|---------------------------------------------------------------------|
/// | pre_forward   | any → Forward             | reused if Unsharded and still needed; refilled into the saved storage if ShardedPostForward and still needed; else released and gathered afresh |
/// | post_forward  | Forward → Idle            | with autograd: storage freed if may_free_between_uses (not in a recompute); without: kept for the recompute if the unit does not reshard, else released unless still needed |
/// | pre_backward  | not Forward → PreBackward | refilled if ShardedPostForward; the unit before it prefetched        |
/// | post_backward | not Forward → PostBackward (Idle at the backward's end) | released unless still needed, else storage freed if may_free_between_uses |
///
/// A transition from another state is a bug in titan (FsdpUnit::enter).
///
/// With activation checkpointing a block's forward runs twice: first
/// without autograd (gather, compute, release: Sharded, awaits_recompute();
/// a unit with reshard_after_forward = false keeps them Unsharded instead,
/// as FSDP2 does under torch's non-reentrant checkpoint), then inside
/// backward as its recompute, whose hooks gather (or reuse) and install
/// again and run its backward at once. The unit after it in backward order
/// prefetches that gather from its pre_backward, and the end-of-backward
/// wait belongs to the whole backward (ops::queue_final_callback), so the
/// all-gathers and reduce-scatters overlap as without checkpointing.
///
/// The root never reshards after forward (its output layer's backward comes
/// first), and neither does a unit with reshard_after_forward = false (a
/// pipeline's default): it stays Unsharded from forward to the end of its
/// last backward. Under a pipeline schedule with reshard_after_forward on,
/// several micro-batches' graphs share one set of full parameters: each
/// forward gathers into the storage the others saved and frees it again,
/// except while a backward of the unit has begun and not ended (a
/// zero-bubble I before its W), and a backward without gradient sync keeps
/// what it gathered for the next micro-batch. A forward without autograd
/// releases at once.
///
/// Gradient reduction is asynchronous, as in FSDP2: unit k's reduce-scatter
/// runs while unit k−1 computes its backward. At most one reduce-scatter is
/// in flight per process: unit k−1 waits for unit k's before staging its own
/// gradients, so only one staged buffer (a whole unit's gradients in
/// reduce_dtype, the big one) exists at a time, as with FSDP2's single
/// reduce-scatter state. With HSDP the replica all-reduce of unit k's
/// (1/shard-sized) result is chained: started when its reduce-scatter is
/// waited, waited at the next unit's issue; so at most one all-reduce is in
/// flight as well. The waited results are added to shard.grad by us (not by
/// autograd's AccumulateGrad), the last ones in a final callback queued on the
/// autograd engine, so `loss.backward()` returns with complete shard
/// gradients.
///
/// Why storage is freed rather than tensors dropped: the autograd graph saved
/// the full parameters (matmul saves its weight). FSDP2 frees their memory
/// by resizing the storage to 0 and refills the very same storage before
/// backward, so the saved tensors see valid data again; we do the same on
/// the c10::StorageImpl, writing through a separate alias so that the saved
/// tensors' version counters do not change.

#include <ATen/core/Tensor.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "titan/dist/process_group.hpp"
#include "titan/ops/forward_hooks.hpp"
#include "titan/ops/param_module.hpp"
#include "titan/parallel/fsdp/all_gather_extension.hpp"
#include "titan/parallel/fsdp/fully_shard.hpp"

namespace titan::fsdp {

/// @brief The clock of FsdpEvent times: CommLog's, so that FSDP's events
/// and the collectives' records line up.
inline double event_clock_us() { return dist::CommLog::instance().now_us(); }

/// @brief Where a unit's full parameters are (FSDP2's ShardedState).
enum class ShardedState {
  Sharded,             ///< only the shards: no full parameters (never gathered, or released)
  ShardedPostForward,  ///< resharded after forward: the full tensors live on in the autograd
                       ///< graph that saved them, their storage freed until backward refills it
  Unsharded,           ///< the full parameters hold valid data
};

/// @brief Which of its hooks a unit ran last (FSDP2's TrainingState).
enum class TrainingState {
  Idle,          ///< outside forward and backward (also after a forward without autograd)
  Forward,       ///< between pre_forward and post_forward
  PreBackward,   ///< its backward started (the PreBackward node ran)
  PostBackward,  ///< its gradients are in and their reduction issued; Idle when the backward ends
};

/// @brief "Sharded", "ShardedPostForward", "Unsharded" / "Idle", "Forward", ...
const char* state_name(ShardedState s);
const char* state_name(TrainingState s);

/// @brief One sharded parameter.
struct FsdpParam {
  ops::ParamModule* owner = nullptr;  ///< module that registered it
  std::string name;                   ///< its name there ("weight")
  std::string fqn;                    ///< name relative to the unit's module
  std::vector<int64_t> shape;         ///< global (unsharded) shape
  int64_t rows = 0;                   ///< shape[0]
  int64_t padded_rows = 0;            ///< ceil(rows / n): rows every rank sends
  int64_t row_numel = 1;              ///< elements per row
  int64_t local_rows = 0;             ///< rows this rank really holds (torch.chunk rule)
  int64_t offset = 0;                 ///< element offset of its segment in the flat shard buffer
  bool requires_grad = true;
  at::Tensor shard;                   ///< the registered parameter: [local_rows, ...]
  /// Gathered in a form of its own (float8 weights); null = its values in param_dtype.
  std::shared_ptr<AllGatherExtension> extension;
  /// Offset of its segment in the all-gather buffer, in that buffer's
  /// elements (bytes when the unit's parameters travel in different dtypes).
  int64_t gather_offset = 0;
  /// Elements of one rank's (padded) segment.
  int64_t segment_numel() const { return padded_rows * row_numel; }
};

/// @brief What every unit under one root shares, as FSDP2 keeps one comm
/// context per root module: the gradient reductions in flight
/// (reduce-scatter, then HSDP's all-reduce over replicas), in issue order.
/// fully_shard(root) hands the root's context to every unit below it; a
/// unit no parent claimed keeps its own. Every rank issues a root's
/// reductions in the same order (the backward graph is the same) and they
/// are finished oldest first, so the HSDP all-reduces, started as their
/// reduce-scatters are waited, are issued in the same order on every rank.
class CommContext {
 public:
  CommContext();
  ~CommContext();
  CommContext(const CommContext&) = delete;
  CommContext& operator=(const CommContext&) = delete;
  /// Waits for every reduction in flight, oldest first, and adds the
  /// results to the shards' .grad. The autograd engine calls it at the end
  /// of every backward that issued one; the root's forward calls it too,
  /// for a backward that failed before its end. A no-op when nothing is in
  /// flight.
  void finish();
  /// Units whose gradient reduction was issued but has not reached
  /// shard.grad yet (0 outside backward).
  int64_t in_flight() const;

  /// Appends one event to this root's timeline (any thread).
  void record_event(FsdpEvent e);
  /// This root's events since the last clear, in the order they ended.
  std::vector<FsdpEvent> events() const;
  /// Forgets this root's events.
  void clear_events();

 private:
  friend class FsdpUnit;
  struct Reductions;  // fsdp_unit.cpp
  std::unique_ptr<Reductions> reductions_;
  mutable std::mutex events_mu_;
  std::vector<FsdpEvent> events_;
};

/// @brief The state of one fully_shard() call. It is the ForwardHook the
/// module runs; the autograd nodes in hooks.cpp call back into it.
class FsdpUnit : public ops::ForwardHook, public std::enable_shared_from_this<FsdpUnit> {
 public:
  FsdpUnit(std::string name, std::vector<FsdpParam> params, const dist::DeviceMesh& mesh,
           const FullyShardOptions& options, at::Device compute_device);

  /// @name ForwardHook (defined in hooks.cpp)
  /// @{
  at::Tensor pre_forward(const at::Tensor& input) override;
  at::Tensor post_forward(const at::Tensor& output) override;
  /// @}

  /// Starts the all-gather of the shards (async) unless it is running or
  /// the full parameters are present. `prefetch` marks it in the events.
  void issue_all_gather(bool prefetch);
  /// Waits for (or runs) the all-gather and copies the result out into the
  /// full parameters: fresh tensors, or the freed storage of the ones the
  /// autograd graph saved.
  void unshard();
  /// Frees the full parameters' storage but keeps the tensors (the graph
  /// holds them) for a re-gather in backward.
  void free_full_storage();
  /// Drops the full parameters altogether (after backward, or no-grad forward).
  void release_full();
  /// Stages the gradients of the full parameters (cast to reduce_dtype,
  /// padded, rank-major) and issues their reduce-scatter without waiting for
  /// it, after waiting for the one issued before (at most one in flight).
  /// The result reaches shard.grad when it is waited: at the next issue, or
  /// in CommContext::finish(). Undefined entries count as zeros.
  void issue_reduce_scatter(const std::vector<at::Tensor>& full_grads);
  /// Adds this rank's reduced flat segment (reduce_dtype, [flat]) to the
  /// shards' .grad, cast to the shard's dtype and device; creates .grad
  /// where it is undefined (so gradient accumulation over micro-batches adds up).
  void accumulate_gradients(const at::Tensor& reduced);

  /// Puts the full parameters (or the shards) into the owning modules.
  void install(const std::vector<at::Tensor>& tensors);
  void install_shards();

  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }
  std::vector<FsdpParam>& params() { return params_; }
  const std::vector<FsdpParam>& params() const { return params_; }
  const std::shared_ptr<const dist::DeviceMesh>& mesh() const { return mesh_; }
  const dist::ProcessGroup& shard_group() const { return *shard_group_; }
  /// HSDP: the group gradients are averaged over after the reduce-scatter;
  /// null for plain FSDP.
  const std::shared_ptr<dist::ProcessGroup>& replicate_group() const { return replicate_group_; }
  /// Placements of every parameter: [Shard(0)] or, with HSDP, [Replicate, Shard(0)].
  const Placements& placements() const { return placements_; }
  const FullyShardOptions& options() const { return options_; }
  /// Device the shards live on (CPU with offload).
  at::Device shard_device() const { return shard_device_; }
  at::Device compute_device() const { return compute_device_; }
  /// Dtype of the all-gathered parameters.
  at::ScalarType param_dtype() const;
  at::ScalarType reduce_dtype() const;
  /// Dtype parameter `p` travels in: its extension's, else param_dtype().
  at::ScalarType gather_dtype_of(const FsdpParam& p) const;

  /// The reductions in flight this unit shares with the others under its root.
  const std::shared_ptr<CommContext>& comm_context() const { return comm_; }
  /// Set by fully_shard on the root, for every unit below it.
  void set_comm_context(std::shared_ptr<CommContext> comm) { comm_ = std::move(comm); }

  /// Prefetch links and role, set by fully_shard on the root.
  bool is_root = true;
  FsdpUnit* next_forward = nullptr;   ///< all-gathered ahead when this unit's forward starts
  FsdpUnit* next_backward = nullptr;  ///< all-gathered ahead when this unit's backward starts

  /// The full parameters of the current step (empty when Sharded).
  std::vector<at::Tensor>& full() { return full_; }
  ShardedState sharded_state() const { return sharded_state_; }
  TrainingState training_state() const { return training_state_; }
  /// Called by the PreBackward node: refill, prefetch the next unit in
  /// backward order.
  void pre_backward();
  /// Called by the UnshardBackward node once every gradient of the full
  /// parameters is in: issue their reduction, free the full parameters, and
  /// make sure the end of this backward waits for it. Without gradient sync:
  /// add them to the unsynced sum instead and keep the full parameters.
  void post_backward(const std::vector<at::Tensor>& full_grads);

  /// FSDP2's set_requires_gradient_sync for this unit. false: the next
  /// backwards add their full gradients (in reduce_dtype) to a sum kept here
  /// and keep the full parameters gathered for the next micro-batch (torch's
  /// pipelining also turns off the reshard after backward then); the first
  /// backward with true adds its own and reduce-scatters the sum once. So a
  /// step of m micro-batches costs one all-gather and one reduce-scatter per
  /// unit instead of m, for a full copy of the unit's gradients in memory.
  void set_requires_gradient_sync(bool sync) { requires_gradient_sync_ = sync; }
  bool requires_gradient_sync() const { return requires_gradient_sync_; }
  /// True while gradients of backwards without sync wait here for theirs.
  bool holds_unsynced_gradients() const { return !unsynced_grads_.empty(); }
  /// True when the unit's last forward was activation checkpointing's
  /// first pass: its backward starts with a recompute that gathers again.
  bool awaits_recompute() const { return awaits_recompute_; }

 private:
  at::Tensor shard_send_buffer() const;
  void copy_out(const at::Tensor& gathered);
  // Parameter p's segment of one rank's row of the all-gather buffer, as
  // a 1-D tensor of p's gather dtype (a view).
  at::Tensor gather_segment(const at::Tensor& row, const FsdpParam& p) const;

  std::string name_;
  std::shared_ptr<CommContext> comm_ = std::make_shared<CommContext>();
  std::vector<FsdpParam> params_;
  std::shared_ptr<const dist::DeviceMesh> mesh_;
  std::shared_ptr<dist::ProcessGroup> shard_group_;
  std::shared_ptr<dist::ProcessGroup> replicate_group_;  // HSDP only
  Placements placements_;
  FullyShardOptions options_;
  at::Device compute_device_;
  at::Device shard_device_;
  int64_t flat_numel_ = 0;  // one rank's segment of the flat (reduce-scatter) buffer
  // The all-gather buffer: one dtype when every parameter travels in it,
  // else bytes (FSDP2 does the same), with 16-byte aligned segments so that
  // each can be viewed as its own dtype.
  at::ScalarType gather_dtype_ = at::kFloat;
  int64_t gather_numel_ = 0;  // one rank's row of it, in gather_dtype_ elements

  // All-gather in flight.
  std::shared_ptr<dist::PendingWork> pending_;
  at::Tensor gather_out_;
  at::Tensor gather_in_;
  double gather_issued_us_ = 0;
  bool gather_prefetched_ = false;

  std::vector<at::Tensor> full_;
  ShardedState sharded_state_ = ShardedState::Sharded;
  TrainingState training_state_ = TrainingState::Idle;
  // Forwards whose backward has not reached this unit yet: a pipeline
  // schedule runs several micro-batches' forwards before their backwards,
  // and they all share one set of full parameters (FSDP2 with
  // reshard_after_forward=False does the same), released after the last.
  int graphs_in_flight_ = 0;
  // Backwards whose PreBackward ran and whose UnshardBackward has not: the
  // weights stay gathered for them (a zero-bubble schedule's W step).
  int backwards_begun_ = 0;
  // The shards' version counters when full_ was gathered: the full
  // parameters may be reused only while the shards are unchanged (an
  // optimizer step bumps them).
  std::vector<int64_t> gathered_versions_;
  bool shards_unchanged() const;
  bool requires_gradient_sync_ = true;
  // The full gradients of the backwards run without sync, summed in
  // reduce_dtype (an entry stays undefined while no backward produced it);
  // empty when none waits.
  std::vector<at::Tensor> unsynced_grads_;
  void add_unsynced(const std::vector<at::Tensor>& full_grads);
  bool awaits_recompute_ = false;
  // Checkpointed first passes that kept the full parameters (no reshard
  // after forward) and whose recompute has not started yet.
  int recomputes_pending_ = 0;

  // The decisions of the hooks (hooks.cpp), each named once.
  //
  // Whether anyone besides the call at hand still needs the full
  // parameters: graphs of forwards whose backward has not reached this
  // unit (a pipeline's micro-batches), the step's unsynced gradient sums
  // (the next micro-batch reuses the weights), or a checkpointed first
  // pass that kept them for its recompute. While it holds, a forward
  // reuses (or refills) the gathered weights and nothing releases them.
  bool full_weights_still_needed() const {
    return graphs_in_flight_ > 0 || holds_unsynced_gradients() || recomputes_pending_ > 0;
  }
  // reshard_after_forward as this unit applies it: never on the root (its
  // output layer's backward comes first).
  bool reshards_after_forward() const { return options_.reshard_after_forward && !is_root; }
  // Whether the full parameters' storage may be freed now, between two
  // uses: the unit reshards after forward and no backward of it has begun
  // and not ended (a zero-bubble I before its W: the W reads the weights).
  bool may_free_between_uses() const { return reshards_after_forward() && backwards_begun_ == 0; }
  // Moves training_state_ to `next` from a state that may precede it, else
  // fails as a bug in titan naming the unit, the hook and both states:
  // post_forward follows pre_forward, and no backward hook runs inside the
  // unit's forward.
  void enter(TrainingState next, const char* hook);

  double forward_start_us_ = 0;
  double backward_start_us_ = 0;  // PreBackward done: the unit's backward compute starts
};

/// @brief The unit fully_shard attached to `module`, or null.
std::shared_ptr<FsdpUnit> unit_of(const torch::nn::Module& module);

/// @brief Units at or below `module` whose gradient reduction was issued
/// but has not reached shard.grad yet, over their roots' comm contexts (0
/// outside backward).
int64_t gradient_reductions_in_flight(const torch::nn::Module& module);

}  // namespace titan::fsdp
