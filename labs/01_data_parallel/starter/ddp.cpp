// Lab 01 — your code. Fill in the two TODO(lab) holes; see README.md.
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
  // TODO(lab): parameter `index` has its final .grad. Count it off in its
  // bucket (buckets_[params_[index].bucket].pending). Then, while the bucket
  // at next_bucket_ is complete (pending == 0): copy each of its parameters'
  // .grad into the bucket's flat buffer at the parameter's offset, start
  // group_->all_reduce_async(buffer, titan::dist::ReduceOp::Avg), keep the
  // returned work in the bucket, and move next_bucket_ on. Launch strictly
  // in bucket order: every rank must issue the same collectives in the
  // same order.
  (void)index;
}

void BucketedDDP::finish() {
  if (!sync_) return;
  // TODO(lab): every bucket should have been launched by now. For each
  // bucket: wait() for its all-reduce, copy the averaged values from the
  // buffer back into each parameter's .grad (mutable_grad()), and reset
  // the bucket (pending = number of its parameters) for the next backward;
  // finally next_bucket_ = 0.
}

}  // namespace lab01
