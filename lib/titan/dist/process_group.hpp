#pragma once
/// @file
/// @brief ProcessGroup: a named set of ranks and the collectives they run,
/// with timeouts, errors that name the operation, group and failed peer, and
/// communication accounting.

#include <ATen/core/Tensor.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "titan/dist/comm_log.hpp"
#include "titan/util/error.hpp"

namespace titan::dist {

/// @brief Reduction applied by all_reduce / reduce_scatter / reduce.
/// Avg is Sum followed by a division (Gloo has no native average).
enum class ReduceOp { Sum, Avg, Max, Min };

/// @brief The error a collective throws when it fails; `caused_by_peer`
/// tells a knock-on failure (a peer went away) from a rank's own.
class CommError : public Error {
 public:
  explicit CommError(const std::string& message) : Error(message) {}
};

/// @brief Where ranks leave word that they failed, so that their peers can
/// name them. Keys live in the job's rendezvous store (hosted by rank 0).
class FailureBoard {
 public:
  /// Records that `rank` failed with `message` (best effort; never throws).
  /// `knock_on` marks a failure caused by another rank's (a CommError).
  static void report(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                     const std::string& message, bool knock_on = false);
  /// "rank 1 failed: ..." for the ranks in `ranks` that reported, waiting up
  /// to `wait` for a report to appear; ranks that failed on their own are
  /// named in preference to knock-on failures. Empty when none reported.
  static std::string describe(const c10::intrusive_ptr<c10d::Store>& store,
                              const std::vector<int>& ranks, std::chrono::milliseconds wait);
  /// True when every rank in `ranks` has reported.
  static bool all_reported(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks);
};

class ProcessGroup;

/// @brief One point-to-point operation of ProcessGroup::batch_p2p.
struct P2POp {
  bool is_send = true;  ///< send `tensor` to `peer`, or receive into it from `peer`
  at::Tensor tensor;    ///< contiguous; a receive fills it in place
  int peer = 0;         ///< group rank
  int tag = 0;          ///< matched with the peer's (Gloo; NCCL matches by order)
};

/// @brief An operation in flight (from an *_async call). wait() finishes it,
/// records it in the CommLog and turns a backend failure into titan::Error.
class PendingWork {
 public:
  PendingWork(const ProcessGroup* group, CommRecord record, c10::intrusive_ptr<c10d::Work> work,
              std::function<void()> on_done);
  /// Blocks until done; safe to call more than once.
  void wait();
  bool completed() const { return done_; }

 private:
  const ProcessGroup* group_;
  CommRecord record_;
  c10::intrusive_ptr<c10d::Work> work_;
  std::function<void()> on_done_;
  bool done_ = false;
};

/// @brief A group of ranks that communicate, over Gloo (CPU) or NCCL (CUDA).
///
/// Every method is a collective: all members must call it in the same order
/// with tensors of the same shape and dtype (except where noted). Ranks
/// passed to and returned by methods are *group* ranks (0..size()-1);
/// global_rank() translates. Failures and timeouts throw titan::Error whose
/// message names the operation, the group and, where a peer left word on the
/// FailureBoard, the failed rank.
class ProcessGroup {
 public:
  ProcessGroup(std::string name, std::vector<int> global_ranks, int group_rank,
               c10::intrusive_ptr<c10d::Backend> backend, c10::intrusive_ptr<c10d::Store> job_store,
               std::chrono::milliseconds timeout);

  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(ranks_.size()); }
  /// Global ranks of the members, in group-rank order.
  const std::vector<int>& global_ranks() const { return ranks_; }
  int global_rank(int group_rank) const { return ranks_.at(group_rank); }
  std::chrono::milliseconds timeout() const { return timeout_; }
  /// "ranks [0, 2]" style description used in messages.
  std::string describe() const;
  const c10::intrusive_ptr<c10d::Backend>& backend() const { return backend_; }
  /// False behind the fake backend ([comm] mode = "fake_backend"): no
  /// peer's data arrives (collectives mirror this rank, receives read
  /// ones), so a handshake that checks a peer's word has nothing to check.
  bool communicates() const { return backend_->getBackendName() != "fake"; }
  /// True when a send or receive of `tensor` goes through a host buffer:
  /// on Gloo with a CUDA tensor (Gloo's collectives take CUDA tensors,
  /// its send and recv do not), or with any tensor when TITAN_STAGE_P2P=1
  /// (the test of that path on a machine without a GPU).
  bool stages_p2p(const at::Tensor& tensor) const;

  /// In-place all-reduce of `tensor`.
  void all_reduce(at::Tensor& tensor, ReduceOp op = ReduceOp::Sum) const;
  /// Starts an in-place all-reduce and returns at once (DDP overlaps these
  /// with backward). Avg divides when wait() is called.
  std::shared_ptr<PendingWork> all_reduce_async(at::Tensor tensor, ReduceOp op = ReduceOp::Sum) const;

  /// Concatenation along `dim` of every member's `tensor` (same shapes), as
  /// a contiguous tensor whatever `dim` (one copy when dim != 0, instead of
  /// one per consumer).
  at::Tensor all_gather(const at::Tensor& tensor, int64_t dim = 0) const;
  /// Starts an all-gather of the contiguous, flat `input` into the
  /// contiguous `output` (output.numel() == size() · input.numel(), same
  /// dtype; rank-major) and returns at once: FSDP prefetches a unit's
  /// weights this way while the unit before computes. `output` is valid
  /// after wait(); both tensors are kept alive until then.
  std::shared_ptr<PendingWork> all_gather_async(const at::Tensor& input, at::Tensor output) const;
  /// Like all_gather, but members may differ in size along `dim`: sizes are
  /// exchanged first, shards padded to the largest, the padding dropped.
  at::Tensor all_gather_uneven(const at::Tensor& tensor, int64_t dim = 0) const;
  /// Reduces `tensor` over members and returns this member's 1/size() chunk
  /// along `dim` (size along `dim` must divide by size()).
  at::Tensor reduce_scatter(const at::Tensor& tensor, int64_t dim = 0,
                            ReduceOp op = ReduceOp::Sum) const;
  /// Starts a reduce-scatter of the contiguous, flat `input` into the
  /// contiguous `output` (input.numel() == size() · output.numel(), same
  /// dtype) and returns at once: FSDP overlaps these with the backward of
  /// the units before. `output` is valid after wait() (Avg divides there);
  /// both tensors are kept alive until then.
  std::shared_ptr<PendingWork> reduce_scatter_async(const at::Tensor& input, at::Tensor output,
                                                    ReduceOp op = ReduceOp::Sum) const;
  /// Splits `tensor` into size() chunks along `split_dim`, sends chunk j to
  /// member j, and concatenates what arrives along `concat_dim`.
  at::Tensor all_to_all(const at::Tensor& tensor, int64_t split_dim, int64_t concat_dim) const;
  /// In-place broadcast from group rank `root`.
  void broadcast(at::Tensor& tensor, int root = 0) const;
  /// In-place reduce onto group rank `root` (other members' tensors are left
  /// in an unspecified state, as in c10d).
  void reduce(at::Tensor& tensor, int root = 0, ReduceOp op = ReduceOp::Sum) const;
  /// Point-to-point (not collective): only the two peers call.
  void send(const at::Tensor& tensor, int dst, int tag = 0) const;
  void recv(at::Tensor& tensor, int src, int tag = 0) const;
  /// Starts a send and returns at once (async TP passes chunks around a
  /// ring under the matmuls); `tensor` must stay alive until wait().
  std::shared_ptr<PendingWork> send_async(const at::Tensor& tensor, int dst, int tag = 0) const;
  /// Starts a receive into the contiguous `tensor`; valid after wait().
  std::shared_ptr<PendingWork> recv_async(at::Tensor& tensor, int src, int tag = 0) const;
  /// Posts point-to-point ops together, as torch's batch_isend_irecv:
  /// on a backend that coalesces (NCCL) as one group — a rank's sends and
  /// receives on one communicator could otherwise block each other (1F1B's
  /// "send this output, receive that gradient" on two neighbours would
  /// deadlock) —, else (Gloo) each as its own asynchronous op, all posted
  /// before any is waited. Returns once every receive has arrived; the
  /// returned works are sends still in flight (wait them before the
  /// buffers go; none with coalescing, where the group's work covers all).
  std::vector<std::shared_ptr<PendingWork>> batch_p2p(const std::vector<P2POp>& ops) const;
  /// Posts the ops as batch_p2p does (one coalesced group on NCCL, each
  /// its own asynchronous op on Gloo) but returns at once, so that compute
  /// can run under the transfers (ring attention passes the next K/V block
  /// while the current one is computed). Wait every returned work before
  /// reading a receive or reusing a send's buffer; the works keep the
  /// tensors alive until then.
  std::vector<std::shared_ptr<PendingWork>> batch_p2p_async(const std::vector<P2POp>& ops) const;
  void barrier() const;

  /// Throws the titan::Error this group reports for the failed op of
  /// `record` (shared by every path that waits on the backend), after the
  /// flight recorder has dumped this rank's buffer and the ranks waiting
  /// in the same collective have been told apart from those that never
  /// reached it.
  [[noreturn]] void fail(const CommRecord& record, const std::string& backend_message) const;

 private:
  /// The CommLog record of an op about to be issued, entered in the flight
  /// recorder with its tensors and (P2P) peer, a group rank.
  CommRecord start_record(CommOp op, int64_t payload_bytes, const at::Tensor& input,
                          const at::Tensor& output = {}, int peer = -1) const;
  void run(CommRecord record, const std::function<c10::intrusive_ptr<c10d::Work>()>& launch) const;

  std::string name_;
  std::vector<int> ranks_;
  int rank_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  c10::intrusive_ptr<c10d::Store> job_store_;
  std::chrono::milliseconds timeout_;
};

}  // namespace titan::dist
