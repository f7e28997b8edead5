#include "titan/parallel/tensor_parallel/layouts.hpp"

#include <ATen/ATen.h>
#include <c10/util/intrusive_ptr.h>

#include <mutex>
#include <unordered_map>

#include "titan/dtensor/dtensor.hpp"
#include "titan/util/error.hpp"

namespace titan::tp {
namespace {

struct Tag {
  c10::weak_intrusive_ptr<c10::TensorImpl> tensor;
  Placement layout;
  bool reduces_partial_gradient = false;
};

// Keyed by the TensorImpl's address; the weak pointer tells whether the
// entry still belongs to the same tensor (an address can be reused).
std::mutex& tags_mutex() {
  static std::mutex mu;
  return mu;
}
std::unordered_map<const c10::TensorImpl*, Tag>& tags() {
  static std::unordered_map<const c10::TensorImpl*, Tag> t;
  return t;
}

}  // namespace

Placement normalized(Placement p, int64_t ndim) {
  if (p.is_shard() && p.dim < 0) p.dim += ndim;
  TITAN_CHECK(!p.is_shard() || (p.dim >= 0 && p.dim < ndim), "tensor parallel: ", p.str(), " on a ", ndim,
              "-D activation");
  return p;
}

at::Tensor redistribute_activation(const at::Tensor& local, const std::shared_ptr<const dist::DeviceMesh>& mesh,
                                   Placement from, Placement to, std::optional<Placement> grad_of_result,
                                   std::vector<int64_t> global_shape) {
  const int64_t nd = local.dim();
  from = normalized(from, nd);
  to = normalized(to, nd);
  if (grad_of_result) grad_of_result = normalized(*grad_of_result, nd);
  if (from == to && (!grad_of_result || *grad_of_result == to)) return local;
  if (global_shape.empty()) {
    global_shape = local.sizes().vec();
    if (from.is_shard()) global_shape[from.dim] *= mesh->size(0);
  }
  DTensor d(local, mesh, {from}, global_shape);
  Placements grad;
  if (grad_of_result) grad = {*grad_of_result};
  return d.redistribute({to}, grad).local();
}

void tag_layout(const at::Tensor& t, Placement layout, bool reduces_partial_gradient) {
  std::lock_guard<std::mutex> lock(tags_mutex());
  auto& m = tags();
  // Drop the tags of tensors that are gone, so the table stays small.
  for (auto it = m.begin(); it != m.end();) it = it->second.tensor.expired() ? m.erase(it) : std::next(it);
  m.insert_or_assign(t.unsafeGetTensorImpl(),
                    Tag{c10::weak_intrusive_ptr<c10::TensorImpl>(t.getIntrusivePtr()), layout,
                        reduces_partial_gradient});
}

bool tag_reduces_partial_gradient(const at::Tensor& t) {
  if (!tagged_layout(t)) return false;  // also drops a stale entry
  std::lock_guard<std::mutex> lock(tags_mutex());
  auto it = tags().find(t.unsafeGetTensorImpl());
  return it != tags().end() && it->second.reduces_partial_gradient;
}

std::optional<Placement> tagged_layout(const at::Tensor& t) {
  if (!t.defined()) return std::nullopt;
  std::lock_guard<std::mutex> lock(tags_mutex());
  auto& m = tags();
  auto it = m.find(t.unsafeGetTensorImpl());
  if (it == m.end()) return std::nullopt;
  auto alive = it->second.tensor.lock();
  if (!alive || alive.get() != t.unsafeGetTensorImpl()) {
    m.erase(it);
    return std::nullopt;
  }
  return it->second.layout;
}

}  // namespace titan::tp
