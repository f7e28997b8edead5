#include "titan/parallel/data_parallel.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>

#include <mutex>
#include <sstream>

#include "titan/dist/device_mesh.hpp"
#include "titan/ops/backward_callbacks.hpp"
#include "titan/util/error.hpp"
#include "titan/util/internal_assert.hpp"

namespace titan::parallel {

std::vector<std::vector<size_t>> plan_buckets(const std::vector<int64_t>& bytes,
                                              const std::vector<int64_t>& kinds, int64_t cap_bytes) {
  TITAN_CHECK(cap_bytes > 0, "DDP bucket size must be positive, got ", cap_bytes, " bytes");
  TITAN_CHECK(bytes.size() == kinds.size(), "plan_buckets: ", bytes.size(), " sizes but ", kinds.size(), " kinds");
  std::vector<std::vector<size_t>> buckets;
  int64_t filled = 0;
  // Backward produces gradients roughly in reverse registration order (the
  // output layer's first, the embedding's last), so filling buckets in that
  // order makes the first bucket complete first and its all-reduce start
  // while the earlier layers are still computing their gradients.
  for (size_t k = bytes.size(); k-- > 0;) {
    bool fresh = buckets.empty() || filled + bytes[k] > cap_bytes || kinds[buckets.back().front()] != kinds[k];
    if (fresh) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(k);
    filled += bytes[k];
  }
  return buckets;
}

namespace {

using torch::autograd::Node;
using torch::autograd::variable_list;

}  // namespace

struct DataParallel::State : std::enable_shared_from_this<DataParallel::State> {
  // A parameter and a bucket as the reducer tracks them (members, not
  // file-local types: State has external linkage).
  struct Param {
    std::string name;
    at::Tensor tensor;
    size_t bucket = 0;
    int64_t offset = 0;  // in elements, inside the bucket buffer
    // Keeping the AccumulateGrad node alive keeps our hook on it: the tensor
    // itself holds only a weak reference and would build a fresh node (with
    // no hooks) for the next graph otherwise.
    std::shared_ptr<Node> accumulator;
    uintptr_t hook_key = 0;
    bool ready = false;
  };

  struct Bucket {
    std::vector<size_t> params;
    at::Tensor buffer;
    int64_t pending = 0;  // parameters whose gradient has not arrived this backward
    bool launched = false;
    std::shared_ptr<dist::PendingWork> work;
  };

  std::shared_ptr<dist::ProcessGroup> group;
  std::vector<Param> params;
  std::vector<Bucket> buckets;
  size_t next_bucket = 0;  // buckets launch strictly in this order
  bool in_backward = false;
  bool no_sync = false;
  int64_t launched_in_backward = 0;
  // The autograd engine runs CUDA work on one thread per device, so hooks of
  // parameters on different devices could race; one lock keeps it simple.
  std::mutex mu;

  void start_backward() {
    in_backward = true;
    next_bucket = 0;
    launched_in_backward = 0;
    for (auto& b : buckets) {
      b.pending = static_cast<int64_t>(b.params.size());
      b.launched = false;
      b.work.reset();
    }
    for (auto& p : params) p.ready = false;
    // The end-of-backward callback is what makes `loss.backward()` alone
    // leave averaged gradients behind (the engine runs it once every node,
    // hooks included, has finished): the whole backward's end, also when
    // the first gradient arrives inside a checkpointed block's recompute.
    // A weak pointer: a DataParallel destroyed mid-backward must not be
    // touched.
    std::weak_ptr<State> weak = shared_from_this();
    ops::queue_final_callback([weak] {
      if (auto s = weak.lock()) s->finish();
    });
  }

  void mark_ready(size_t index) {
    std::lock_guard<std::mutex> lock(mu);
    if (no_sync) return;
    if (!in_backward) start_backward();
    Param& p = params[index];
    TITAN_CHECK(!p.ready, "DDP: gradient of ", p.name, " arrived twice in one backward");
    p.ready = true;
    --buckets[p.bucket].pending;
    // Launch every complete bucket at the head of the queue. A bucket that
    // completes out of order waits for its predecessors, because collectives
    // must be issued in the same order on every rank.
    while (next_bucket < buckets.size() && buckets[next_bucket].pending == 0) {
      launch(buckets[next_bucket]);
      ++next_bucket;
      ++launched_in_backward;
    }
  }

  void launch(Bucket& b) {
    for (size_t i : b.params) {
      const Param& p = params[i];
      const at::Tensor& grad = p.tensor.grad();
      b.buffer.narrow(0, p.offset, grad.numel()).view(grad.sizes()).copy_(grad);
    }
    // Avg = sum, then divide by the group size once the sum is in: the
    // gradient of the mean loss over the global batch, as one process would
    // compute it on the whole batch.
    b.work = group->all_reduce_async(b.buffer, dist::ReduceOp::Avg);
    b.launched = true;
  }

  void finish() {
    std::lock_guard<std::mutex> lock(mu);
    if (!in_backward) return;
    in_backward = false;
    std::vector<std::string> missing;
    for (const auto& p : params)
      if (!p.ready) missing.push_back(p.name);
    // Wait for what did launch even when failing, so that no collective is
    // left running on a buffer we are about to forget.
    for (auto& b : buckets)
      if (b.work) b.work->wait();
    if (!missing.empty()) {
      std::ostringstream os;
      for (size_t i = 0; i < missing.size() && i < 3; ++i) os << (i ? ", " : "") << missing[i];
      if (missing.size() > 3) os << " and " << missing.size() - 3 << " more";
      throw Error("DDP: backward produced no gradient for " + os.str() +
                  "; every trainable parameter must take part in the loss on every rank");
    }
    for (auto& b : buckets) {
      for (size_t i : b.params) {
        Param& p = params[i];
        at::Tensor grad = p.tensor.mutable_grad();
        grad.copy_(b.buffer.narrow(0, p.offset, grad.numel()).view(grad.sizes()));
      }
      b.work.reset();
    }
  }
};

namespace {

// Runs after AccumulateGrad has written the parameter's .grad.
class ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(std::weak_ptr<DataParallel::State> state, size_t index) : state_(std::move(state)), index_(index) {}
  variable_list operator()(const variable_list& outputs, const variable_list& /*inputs*/) override {
    if (auto s = state_.lock()) s->mark_ready(index_);
    return outputs;
  }

 private:
  std::weak_ptr<DataParallel::State> state_;
  size_t index_;
};

int64_t kind_of(const at::Tensor& t) {
  return static_cast<int64_t>(t.scalar_type()) * 1000 + static_cast<int64_t>(t.device().type()) * 100 +
         t.device().index() + 1;
}

}  // namespace

DataParallel::DataParallel(torch::nn::Module& module, std::shared_ptr<dist::ProcessGroup> group,
                           ReplicateOptions options)
    : state_(std::make_shared<State>()) {
  TITAN_CHECK(group, "replicate: no process group given");
  TITAN_CHECK(options.bucket_cap_mb > 0, "replicate: bucket_cap_mb must be positive, got ", options.bucket_cap_mb);
  State& s = *state_;
  s.group = std::move(group);

  std::vector<int64_t> bytes, kinds;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    State::Param p;
    p.name = item.key();
    p.tensor = item.value();
    TITAN_CHECK(p.tensor.is_contiguous(), "replicate: parameter ", p.name, " is not contiguous");
    bytes.push_back(p.tensor.numel() * static_cast<int64_t>(p.tensor.element_size()));
    kinds.push_back(kind_of(p.tensor));
    s.params.push_back(std::move(p));
  }
  TITAN_CHECK(!s.params.empty(), "replicate: the module has no trainable parameters");

  auto plan = plan_buckets(bytes, kinds, static_cast<int64_t>(options.bucket_cap_mb * 1024 * 1024));
  for (size_t b = 0; b < plan.size(); ++b) {
    State::Bucket bucket;
    int64_t numel = 0;
    for (size_t i : plan[b]) {
      s.params[i].bucket = b;
      s.params[i].offset = numel;
      numel += s.params[i].tensor.numel();
    }
    bucket.params = plan[b];
    bucket.buffer = at::zeros({numel}, s.params[plan[b].front()].tensor.options());
    s.buckets.push_back(std::move(bucket));
  }

  if (options.broadcast_from_rank0) {
    // Broadcast through the bucket buffers: one collective per bucket
    // instead of one per parameter.
    at::NoGradGuard no_grad;
    for (auto& b : s.buckets) {
      for (size_t i : b.params)
        b.buffer.narrow(0, s.params[i].offset, s.params[i].tensor.numel()).copy_(s.params[i].tensor.reshape(-1));
      s.group->broadcast(b.buffer, 0);
      for (size_t i : b.params) {
        State::Param& p = s.params[i];
        p.tensor.copy_(b.buffer.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.sizes()));
      }
    }
    for (auto buffer : module.buffers(/*recurse=*/true)) {
      at::Tensor contiguous = buffer.contiguous();
      s.group->broadcast(contiguous, 0);
      if (!contiguous.is_same(buffer)) buffer.copy_(contiguous);
    }
  }

  for (size_t i = 0; i < s.params.size(); ++i) {
    State::Param& p = s.params[i];
    p.accumulator = torch::autograd::impl::grad_accumulator(p.tensor);
    TITAN_CHECK(p.accumulator, "replicate: parameter ", p.name, " is not a leaf that accumulates gradients");
    p.hook_key = p.accumulator->add_post_hook(std::make_unique<ReadyHook>(state_, i));
  }
}

DataParallel::~DataParallel() {
  for (auto& p : state_->params)
    if (p.accumulator) p.accumulator->del_post_hook(p.hook_key);
}

void DataParallel::finish_gradient_sync() { state_->finish(); }

DdpStepHooks::DdpStepHooks(std::shared_ptr<DataParallel> ddp) : ddp_(std::move(ddp)) {
  TITAN_INTERNAL_ASSERT(ddp_ != nullptr, "DdpStepHooks: null DataParallel");
}

void DdpStepHooks::before_micro_batch_backward(bool last) {
  if (last) no_sync_.reset();
  else if (!no_sync_) no_sync_.emplace(*ddp_);
}

void DdpStepHooks::after_last_backward() { ddp_->finish_gradient_sync(); }

NoSyncGuard DataParallel::no_sync() { return NoSyncGuard(*this); }

bool DataParallel::sync_disabled() const { return state_->no_sync; }

std::vector<BucketInfo> DataParallel::buckets() const {
  std::vector<BucketInfo> out;
  for (const auto& b : state_->buckets) {
    BucketInfo info;
    for (size_t i : b.params) info.names.push_back(state_->params[i].name);
    info.numel = b.buffer.numel();
    info.bytes = b.buffer.numel() * static_cast<int64_t>(b.buffer.element_size());
    out.push_back(std::move(info));
  }
  return out;
}

const std::shared_ptr<dist::ProcessGroup>& DataParallel::group() const { return state_->group; }

int64_t DataParallel::bucket_buffer_bytes() const {
  int64_t total = 0;
  for (const auto& b : state_->buckets) total += b.buffer.numel() * static_cast<int64_t>(b.buffer.element_size());
  return total;
}

int64_t DataParallel::launched_in_backward() const { return state_->launched_in_backward; }

NoSyncGuard::NoSyncGuard(DataParallel& ddp) : ddp_(&ddp), previous_(ddp.state_->no_sync) {
  std::lock_guard<std::mutex> lock(ddp.state_->mu);
  ddp.state_->no_sync = true;
}

NoSyncGuard::~NoSyncGuard() {
  if (!ddp_) return;
  std::lock_guard<std::mutex> lock(ddp_->state_->mu);
  ddp_->state_->no_sync = previous_;
}

NoSyncGuard::NoSyncGuard(NoSyncGuard&& other) noexcept : ddp_(other.ddp_), previous_(other.previous_) {
  other.ddp_ = nullptr;
}

std::shared_ptr<DataParallel> replicate(torch::nn::Module& module, std::shared_ptr<dist::ProcessGroup> group,
                                        ReplicateOptions options) {
  return std::make_shared<DataParallel>(module, std::move(group), options);
}

std::shared_ptr<DataParallel> replicate(torch::nn::Module& module, const dist::DeviceMesh& dp_mesh,
                                        ReplicateOptions options) {
  TITAN_CHECK(dp_mesh.ndim() == 1, "replicate: needs a 1-D mesh (e.g. mesh[\"dp_replicate\"]), got ",
              dp_mesh.describe());
  return replicate(module, dp_mesh.group(0), options);
}

}  // namespace titan::parallel
