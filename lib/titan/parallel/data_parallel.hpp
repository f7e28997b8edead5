#pragma once
/// @file
/// @brief DDP in the manner of PyTorch's DistributedDataParallel and
/// torchtitan's `replicate`: every rank holds the whole model, trains on its
/// own slice of the global batch, and gradients are averaged over the group
/// by one all-reduce per bucket, launched from autograd hooks while the rest
/// of backward still runs.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "titan/dist/process_group.hpp"
#include "titan/parallel/step_hooks.hpp"

namespace torch::nn {
class Module;
}

namespace titan::dist {
class DeviceMesh;
}

namespace titan::parallel {

/// @brief How replicate() buckets and synchronises.
struct ReplicateOptions {
  /// Largest bucket, in MiB (PyTorch's bucket_cap_mb, default 25). A
  /// parameter bigger than the cap gets a bucket of its own.
  double bucket_cap_mb = 25.0;
  /// Broadcast parameters and buffers from group rank 0 at construction, so
  /// that ranks initialised differently start identical.
  bool broadcast_from_rank0 = true;
};

/// @brief One bucket: the parameters whose gradients travel together in one
/// flat all-reduce.
struct BucketInfo {
  std::vector<std::string> names;  ///< parameter names, in the order they sit in the buffer
  int64_t numel = 0;               ///< elements of the flat buffer
  int64_t bytes = 0;               ///< bytes of the flat buffer (the all-reduce payload)
};

/// @brief Groups parameters into buckets of at most `cap_bytes`, walking them
/// in *reverse* registration order (the order backward produces their
/// gradients, output layer first), and starting a new bucket whenever the
/// next parameter would overflow the cap or is of another kind (`kinds`
/// tells dtype/device combinations apart: one flat buffer has one dtype on
/// one device). Returns indices into the given lists; throws titan::Error
/// when `cap_bytes` is not positive.
std::vector<std::vector<size_t>> plan_buckets(const std::vector<int64_t>& bytes,
                                              const std::vector<int64_t>& kinds, int64_t cap_bytes);

class NoSyncGuard;

/// @brief The state replicate() attaches to a module: buckets, hooks and
/// the all-reduces in flight. Keep it alive as long as you train.
///
/// Per backward pass:
/// 1. a post-hook on each parameter's AccumulateGrad node fires once its
///    `.grad` is final and marks the parameter ready in its bucket;
/// 2. when the last parameter of a bucket is ready, its gradients are copied
///    into the bucket's flat buffer and an asynchronous all-reduce (average)
///    is launched — buckets launch strictly in index order, so every rank
///    issues the same collectives in the same order;
/// 3. at the end of backward a callback queued on the autograd engine waits
///    for every bucket and copies the averaged values back into `.grad`.
///
/// So after `loss.backward()` returns, gradients are already averaged and
/// the optimizer can step, exactly as with PyTorch's DDP.
/// finish_gradient_sync() does the same wait explicitly (a no-op when the
/// callback already ran); call it if you drive backward some other way.
class DataParallel {
 public:
  /// Use replicate().
  DataParallel(torch::nn::Module& module, std::shared_ptr<dist::ProcessGroup> group,
               ReplicateOptions options);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  /// Waits for every launched bucket and writes the averages into `.grad`.
  /// Throws titan::Error naming the parameters that got no gradient if a
  /// backward ran but some bucket never completed.
  void finish_gradient_sync();

  /// RAII: while the returned guard lives, backward accumulates gradients
  /// locally without communication (gradient accumulation). The backward
  /// after the guard is gone all-reduces the accumulated sum.
  NoSyncGuard no_sync();
  /// True while a no_sync guard is alive.
  bool sync_disabled() const;

  /// The buckets, in launch order.
  std::vector<BucketInfo> buckets() const;
  /// The group gradients are averaged over.
  const std::shared_ptr<dist::ProcessGroup>& group() const;
  /// Bytes of the flat bucket buffers (DDP's extra memory beyond the model).
  int64_t bucket_buffer_bytes() const;
  /// How many all-reduces the last synchronised backward launched from
  /// inside backward (before the end-of-backward callback ran).
  int64_t launched_in_backward() const;

  /// Implementation detail (buckets, hooks, work in flight), shared with the
  /// autograd hooks through weak pointers.
  struct State;

 private:
  friend class NoSyncGuard;
  std::shared_ptr<State> state_;
};

/// @brief Turns gradient synchronisation off for its lifetime (see
/// DataParallel::no_sync). Movable, not copyable.
class NoSyncGuard {
 public:
  explicit NoSyncGuard(DataParallel& ddp);
  ~NoSyncGuard();
  NoSyncGuard(NoSyncGuard&& other) noexcept;
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(NoSyncGuard&&) = delete;

 private:
  DataParallel* ddp_;
  bool previous_;
};

/// @brief DDP's part of the train step (step_hooks.hpp). Under gradient
/// accumulation a no_sync guard holds for the backward of every
/// micro-batch but the last, so only the accumulated sum is all-reduced;
/// after the last backward it waits for the buckets' all-reduces.
class DdpStepHooks : public TrainStepHooks {
 public:
  explicit DdpStepHooks(std::shared_ptr<DataParallel> ddp);
  std::string name() const override { return "DDP"; }
  void before_micro_batch_backward(bool last) override;
  void after_last_backward() override;
  const DataParallel& ddp() const { return *ddp_; }

 private:
  std::shared_ptr<DataParallel> ddp_;
  std::optional<NoSyncGuard> no_sync_;
};

/// @brief Applies DDP to `module` over `group` (see DataParallel): broadcasts
/// parameters from rank 0, plans the buckets and installs the hooks.
/// Every rank must call it with the same model structure (collective).
/// Throws titan::Error for a non-positive bucket size or a module without
/// trainable parameters.
std::shared_ptr<DataParallel> replicate(torch::nn::Module& module, std::shared_ptr<dist::ProcessGroup> group,
                                        ReplicateOptions options = {});

/// @brief replicate() over a 1-D mesh (torchtitan passes the "dp_replicate"
/// sub-mesh); throws titan::Error for a mesh of more than one dimension.
std::shared_ptr<DataParallel> replicate(torch::nn::Module& module, const dist::DeviceMesh& dp_mesh,
                                        ReplicateOptions options = {});

}  // namespace titan::parallel
