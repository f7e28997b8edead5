// The fake backend: collectives that return at once, with outputs of the
// right shape, dtype and device, computed as if every peer held exactly
// what this rank holds (a "mirror" world). So a fake rank of an N-rank job
// computes on sane values of the right magnitude: an all-reduce SUM of a
// token count is N times this rank's (the job's), an Avg is this rank's
// own value, an all-gather of FSDP shards repeats this rank's shard, and a
// gradient norm's sum of squares over N shards is N times this one's.
// Point-to-point receives cannot be mirrored (the sender's tensor is not
// this rank's): they read ones, a constant the next stage can normalise
// (zeros would leave an RMSNorm dividing by its eps alone).
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "titan/dist/backend.hpp"
#include "titan/util/error.hpp"
#include "titan/util/internal_assert.hpp"

namespace titan::dist {
namespace {

// A work that is complete when it is made: nothing was sent. It holds its
// tensors until it is dropped, as Gloo's and NCCL's works do (a ring's
// send buffer lives until the ring waits it): a fake rank's memory is
// the real rank's only if its buffers die when the real ones would.
class DoneWork : public c10d::Work {
 public:
  DoneWork(c10d::OpType type, std::vector<at::Tensor> tensors)
      : c10d::Work(-1, type), tensors_(std::move(tensors)) {
    finish();
  }

 private:
  std::vector<at::Tensor> tensors_;
};

c10::intrusive_ptr<c10d::Work> done(c10d::OpType type, std::vector<at::Tensor> tensors = {}) {
  return c10::make_intrusive<DoneWork>(type, std::move(tensors));
}

class FakeBackend : public c10d::Backend {
 public:
  FakeBackend(int rank, int size) : c10d::Backend(rank, size) {}

  const std::string getBackendName() const override { return "fake"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    for (at::Tensor& t : tensors) mirror_reduce(t, opts.reduceOp);
    return done(c10d::OpType::ALLREDUCE, tensors);
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    for (at::Tensor& t : tensors) mirror_reduce(t, opts.reduceOp);
    return done(c10d::OpType::REDUCE, tensors);
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions&) override {
    return done(c10d::OpType::BROADCAST, tensors);  // the root's tensor is this rank's
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions&) override {
    TITAN_INTERNAL_ASSERT(output.numel() == input.numel() * size_, "fake all_gather: output is not size x input");
    output.view({size_, input.numel()}).copy_(input.reshape({1, input.numel()}));
    return done(c10d::OpType::_ALLGATHER_BASE, {output, input});
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    TITAN_INTERNAL_ASSERT(input.numel() == output.numel() * size_, "fake reduce_scatter: input is not size x output");
    // Gloo, the CPU's engine, reduce-scatters by all-reducing a copy of the
    // whole input (ProcessGroupGloo); that copy is part of a CPU rank's
    // memory while the op runs. NCCL, the GPU's, copies nothing.
    const at::Tensor staged = input.is_cpu() ? input.clone() : input;
    output.view({-1}).copy_(staged.reshape({size_, output.numel()})[rank_]);
    mirror_reduce(output, opts.reduceOp);
    return done(c10d::OpType::_REDUCE_SCATTER_BASE, {output, input});
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions&) override {
    TITAN_INTERNAL_ASSERT(output_splits.empty() && input_splits.empty() && output.numel() == input.numel(),
                          "fake all_to_all: only even splits");
    // Peer j sends this rank its chunk for this rank: this rank's own.
    const int64_t chunk = input.numel() / size_;
    output.view({size_, chunk}).copy_(input.reshape({size_, chunk})[rank_].reshape({1, chunk}));
    return done(c10d::OpType::ALLTOALL_BASE, {output, input});
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int, int) override {
    return done(c10d::OpType::SEND, tensors);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int, int) override {
    for (at::Tensor& t : tensors) t.fill_(1);
    return done(c10d::OpType::RECV, tensors);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    return done(c10d::OpType::BARRIER);
  }

 private:
  // SUM over `size_` peers that each hold `t`; MAX and MIN of equal values
  // are the value.
  void mirror_reduce(at::Tensor& t, const c10d::ReduceOp& op) const {
    if (op == c10d::ReduceOp::SUM) {
      t.mul_(size_);
      return;
    }
    TITAN_INTERNAL_ASSERT(op == c10d::ReduceOp::MAX || op == c10d::ReduceOp::MIN,
                          "fake backend: reduce op not supported");
  }
};

}  // namespace

c10::intrusive_ptr<c10d::Backend> make_fake_backend(int rank, int size) {
  return c10::make_intrusive<FakeBackend>(rank, size);
}

}  // namespace titan::dist
