#pragma once
// Lab 01: a bucketed, overlapped data-parallel gradient all-reduce.
//
// BucketedDDP attaches to a model: it broadcasts rank 0's parameters, groups
// the parameters into buckets (reverse registration order, capped in bytes),
// and installs a hook on every parameter that calls on_grad_ready() once the
// parameter's .grad is final. Your job is in ddp.cpp: on_grad_ready() and
// finish().

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "titan/dist/process_group.hpp"

namespace torch::nn {
class Module;
}
namespace torch::autograd {
struct Node;
}

namespace lab01 {

class BucketedDDP {
 public:
  BucketedDDP(torch::nn::Module& model, std::shared_ptr<titan::dist::ProcessGroup> group, int64_t bucket_cap_bytes);
  ~BucketedDDP();

  /// Called from the autograd hook of parameter `index` once its .grad holds
  /// this backward's gradient (the lab's hole).
  void on_grad_ready(size_t index);
  /// Waits for every bucket's all-reduce and writes the averaged gradients
  /// back into .grad; the training loop calls it before the optimizer step.
  void finish();
  /// false: backward only accumulates gradients locally (gradient
  /// accumulation); true (default): backward synchronises.
  void set_sync(bool on) { sync_ = on; }

  size_t num_buckets() const { return buckets_.size(); }
  const std::shared_ptr<titan::dist::ProcessGroup>& group() const { return group_; }

 private:
  struct Param {
    std::string name;
    at::Tensor tensor;
    size_t bucket = 0;
    int64_t offset = 0;  // where its gradient sits in the bucket buffer (elements)
    std::shared_ptr<torch::autograd::Node> accumulator;  // keeps our hook alive
    uintptr_t hook_key = 0;
  };
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    at::Tensor buffer;           // flat, one dtype, sized for all its gradients
    int64_t pending = 0;         // gradients still to arrive in this backward
    std::shared_ptr<titan::dist::PendingWork> work;  // the all-reduce in flight
  };

  std::shared_ptr<titan::dist::ProcessGroup> group_;
  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
  size_t next_bucket_ = 0;  // the next bucket to launch (launch in order!)
  bool sync_ = true;
};

}  // namespace lab01
