// Lab 01 — reference solution.
#include "ddp.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>

#include "titan/parallel/data_parallel.hpp"
#include "titan/util/error.hpp"

namespace lab01 {
namespace {

// Runs after a parameter's AccumulateGrad node has written its .grad.
class ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(BucketedDDP* ddp, size_t index) : ddp_(ddp), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    ddp_->on_grad_ready(index_);
    return outputs;
  }

 private:
  BucketedDDP* ddp_;
  size_t index_;
};

}  // namespace

BucketedDDP::BucketedDDP(torch::nn::Module& model, std::shared_ptr<titan::dist::ProcessGroup> group,
                         int64_t bucket_cap_bytes)
    : group_(std::move(group)) {
  std::vector<int64_t> bytes, kinds;
  for (const auto& item : model.named_parameters()) {
    params_.push_back({item.key(), item.value()});
    bytes.push_back(item.value().numel() * static_cast<int64_t>(item.value().element_size()));
    kinds.push_back(static_cast<int64_t>(item.value().scalar_type()));
  }
  // Buckets in reverse registration order: the order backward makes grads.
  auto plan = titan::parallel::plan_buckets(bytes, kinds, bucket_cap_bytes);
  for (size_t b = 0; b < plan.size(); ++b) {
    Bucket bucket;
    int64_t numel = 0;
    for (size_t i : plan[b]) {
      params_[i].bucket = b;
      params_[i].offset = numel;
      numel += params_[i].tensor.numel();
    }
    bucket.params = plan[b];
    bucket.pending = static_cast<int64_t>(plan[b].size());
    bucket.buffer = at::zeros({numel}, params_[plan[b].front()].tensor.options());
    buckets_.push_back(std::move(bucket));
  }
  // Every replica starts from rank 0's weights.
  at::NoGradGuard no_grad;
  for (auto& p : params_) {
    at::Tensor t = p.tensor.detach().contiguous();
    group_->broadcast(t, 0);
    p.tensor.copy_(t);
  }
  // A post-hook on each parameter's AccumulateGrad node fires once .grad is final.
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].accumulator = torch::autograd::impl::grad_accumulator(params_[i].tensor);
    params_[i].hook_key = params_[i].accumulator->add_post_hook(std::make_unique<ReadyHook>(this, i));
  }
}

BucketedDDP::~BucketedDDP() {
  for (auto& p : params_) p.accumulator->del_post_hook(p.hook_key);
}

void BucketedDDP::on_grad_ready(size_t index) {
  if (!sync_) return;  // gradient accumulation: keep the local sum for now
  Bucket& mine = buckets_[params_[index].bucket];
  --mine.pending;
  // Launch every complete bucket at the head of the line: collectives must
  // be issued in the same order on every rank.
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& b = buckets_[next_bucket_++];
    for (size_t i : b.params) {
      const at::Tensor& g = params_[i].tensor.grad();
      b.buffer.narrow(0, params_[i].offset, g.numel()).view(g.sizes()).copy_(g);
    }
    b.work = group_->all_reduce_async(b.buffer, titan::dist::ReduceOp::Avg);
  }
}

void BucketedDDP::finish() {
  if (!sync_) return;
  TITAN_CHECK(next_bucket_ == buckets_.size(), "lab01: only ", next_bucket_, " of ", buckets_.size(),
              " buckets were launched in backward");
  for (auto& b : buckets_) {
    b.work->wait();
    for (size_t i : b.params) {
      at::Tensor g = params_[i].tensor.mutable_grad();
      g.copy_(b.buffer.narrow(0, params_[i].offset, g.numel()).view(g.sizes()));
    }
    b.work.reset();
    b.pending = static_cast<int64_t>(b.params.size());
  }
  next_bucket_ = 0;
}

}  // namespace lab01
