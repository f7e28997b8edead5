#include "titan/dtensor/dtensor.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include "titan/util/error.hpp"

namespace titan {
namespace {


// The gradient of a Partial input is the same on every contributor.
Placements grad_placements(const Placements& ps) {
  Placements out = ps;
  for (Placement& p : out)
    if (p.is_partial()) p = Placement::replicate();
  return out;
}

// The autograd node of a redistribution: a Node of our own (rather than an
// autograd::Function) so that it can hold the mesh and placements as C++
// members.
struct RedistributeSpec {
  std::shared_ptr<const dist::DeviceMesh> mesh;
  std::vector<int64_t> global_shape;
  Placements from, to;
  Placements grad_to;  // where the result's gradient lies; empty = to, Partial read as Replicate
};

struct RedistributeBackward : torch::autograd::Node {
  std::shared_ptr<RedistributeSpec> spec;
  std::string name() const override { return "titan::RedistributeBackward"; }
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    if (!grads[0].defined()) return {at::Tensor()};
    const Placements& grad_from = spec->grad_to.empty() ? grad_placements(spec->to) : spec->grad_to;
    return {redistribute_local(grads[0].contiguous(), *spec->mesh, spec->global_shape, grad_from,
                               grad_placements(spec->from))};
  }
};

at::Tensor redistribute_with_grad(const at::Tensor& local, std::shared_ptr<RedistributeSpec> spec) {
  at::Tensor out = redistribute_local(local.detach(), *spec->mesh, spec->global_shape, spec->from, spec->to);
  // An unchanged piece must still be a new tensor to carry its own history.
  if (out.data_ptr() == local.data_ptr()) out = out.clone();
  if (local.requires_grad() && at::GradMode::is_enabled()) {
    auto node = std::shared_ptr<RedistributeBackward>(new RedistributeBackward(), torch::autograd::deleteNode);
    node->spec = std::move(spec);
    node->set_next_edges(torch::autograd::collect_next_edges(local));
    torch::autograd::set_history(out, node);
  }
  return out;
}

}  // namespace

std::vector<int64_t> local_shape_at(const std::vector<int64_t>& global_shape, const dist::DeviceMesh& mesh,
                                    const Placements& placements, const std::vector<int64_t>& coord) {
  std::vector<int64_t> shape = global_shape;
  for (int i = 0; i < mesh.ndim(); ++i)
    if (placements[i].is_shard())
      shape[placements[i].dim] = shard_size_and_offset(shape[placements[i].dim], mesh.size(i), coord[i]).first;
  return shape;
}

DTensor::DTensor(at::Tensor local, std::shared_ptr<const dist::DeviceMesh> mesh, Placements placements,
                 std::vector<int64_t> global_shape)
    : local_(std::move(local)), mesh_(std::move(mesh)), placements_(std::move(placements)),
      global_shape_(std::move(global_shape)) {
  TITAN_CHECK(mesh_ != nullptr, "DTensor needs a mesh");
  TITAN_CHECK(static_cast<int>(placements_.size()) == mesh_->ndim(), "DTensor: ", placements_.size(),
              " placements for a ", mesh_->ndim(), "-D mesh");
  if (global_shape_.empty()) {
    global_shape_ = local_.sizes().vec();
    for (int i = 0; i < mesh_->ndim(); ++i)
      if (placements_[i].is_shard()) global_shape_.at(placements_[i].dim) *= mesh_->size(i);
  }
  for (const Placement& p : placements_)
    TITAN_CHECK(!p.is_shard() || (p.dim >= 0 && p.dim < static_cast<int64_t>(global_shape_.size())),
                "DTensor: ", p.str(), " on a ", global_shape_.size(), "-D tensor");
  TITAN_CHECK(local_.sizes().vec() == local_shape(), "DTensor: local shape ", local_.sizes(),
              " does not match ", to_string(placements_), " of global shape ", c10::IntArrayRef(global_shape_));
}

int64_t DTensor::numel() const {
  int64_t n = 1;
  for (int64_t s : global_shape_) n *= s;
  return n;
}

std::vector<int64_t> DTensor::local_shape() const {
  return local_shape_at(global_shape_, *mesh_, placements_, mesh_->coordinate());
}

std::vector<int64_t> DTensor::local_offset() const {
  std::vector<int64_t> size = global_shape_;
  std::vector<int64_t> offset(global_shape_.size(), 0);
  for (int i = 0; i < mesh_->ndim(); ++i) {
    if (!placements_[i].is_shard()) continue;
    int64_t d = placements_[i].dim;
    auto [len, off] = shard_size_and_offset(size[d], mesh_->size(i), mesh_->coordinate()[i]);
    offset[d] += off;
    size[d] = len;
  }
  return offset;
}

DTensor DTensor::redistribute(const Placements& placements) const {
  return redistribute(placements, {});
}

DTensor DTensor::redistribute(const Placements& placements, const Placements& grad_to) const {
  TITAN_CHECK(grad_to.empty() || static_cast<int>(grad_to.size()) == mesh_->ndim(), "DTensor: ", grad_to.size(),
              " gradient placements for a ", mesh_->ndim(), "-D mesh");
  auto spec = std::make_shared<RedistributeSpec>(
      RedistributeSpec{mesh_, global_shape_, placements_, placements, grad_to});
  at::Tensor out = redistribute_with_grad(local_, std::move(spec));
  return DTensor(out, mesh_, placements, global_shape_);
}

at::Tensor DTensor::full_tensor() const {
  return redistribute(Placements(mesh_->ndim(), Placement::replicate())).local();
}

DTensor distribute_tensor(const at::Tensor& full, std::shared_ptr<const dist::DeviceMesh> mesh,
                          const Placements& placements) {
  TITAN_CHECK(static_cast<int>(placements.size()) == mesh->ndim(), "distribute_tensor: ", placements.size(),
              " placements for a ", mesh->ndim(), "-D mesh");
  at::Tensor local = full;
  for (int i = 0; i < mesh->ndim(); ++i) {
    const Placement& p = placements[i];
    TITAN_CHECK(!p.is_partial(), "distribute_tensor: ", p.str(), " cannot be made from a full tensor");
    if (!p.is_shard()) continue;
    TITAN_CHECK(p.dim >= 0 && p.dim < full.dim(), "distribute_tensor: ", p.str(), " on a ", full.dim(), "-D tensor");
    auto [len, off] = shard_size_and_offset(local.size(p.dim), mesh->size(i), mesh->coordinate()[i]);
    local = local.narrow(p.dim, off, len);
  }
  return DTensor(local.contiguous(), std::move(mesh), placements, full.sizes().vec());
}

}  // namespace titan
