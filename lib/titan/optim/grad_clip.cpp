#include "titan/optim/grad_clip.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "titan/dist/process_group.hpp"
#include "titan/dist/world.hpp"
#include "titan/ops/fused/fused_ops.hpp"
#include "titan/util/error.hpp"

namespace titan::optim {

namespace {

std::vector<at::Tensor> grads_of(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> grads;
  grads.reserve(params.size());
  for (const auto& p : params) {
    const at::Tensor& g = p.grad();
    if (g.defined()) grads.push_back(g);
  }
  return grads;
}

void check_norm_type(double norm_type) {
  TITAN_CHECK(norm_type == kInfNorm || (std::isfinite(norm_type) && norm_type > 0),
              "clip_grad_norm: norm_type must be > 0 or inf, got ", norm_type);
}

// Where a rank with no gradients puts its (zero) partial: the collective
// still needs a tensor on the backend's device (NCCL only takes CUDA).
c10::Device partial_device(const std::vector<at::Tensor>& params) {
  for (const auto& p : params)
    if (p.defined()) return p.device();
  return dist::is_initialized() ? dist::world().device() : c10::Device(c10::kCPU);
}

}  // namespace

at::Tensor grad_norm_partial(const std::vector<at::Tensor>& params, double norm_type) {
  check_norm_type(norm_type);
  const std::vector<at::Tensor> grads = grads_of(params);
  const auto f64 = at::TensorOptions().dtype(at::kDouble).device(partial_device(params));
  if (grads.empty()) return at::zeros({}, f64);
  // On the CPU, ATen's fp32 norm kernel accumulates sequentially in fp32 and
  // is off by ~2e-5 relative already at 65k elements (measured on a
  // 1024x64 gradient), and differently for a shard than for the whole
  // tensor — enough to make a sharded run's norm disagree with the
  // single-process one. So the CPU sums in double: for the 2-norm with
  // ops::sum_of_squares (one pass, no copy), for other norms through a
  // transient double copy per gradient (_foreach_norm in kDouble; the copies
  // cost 11 ms of a 150 ms debug-model step, which is why the 2-norm has
  // its own kernel).
  const bool on_cpu = grads.front().device().is_cpu();
  if (on_cpu && norm_type == 2.0) {
    double sum = 0.0;
    for (const auto& g : grads) sum += ops::sum_of_squares(g);
    return at::scalar_tensor(sum, f64);
  }
  // Elsewhere one fused kernel per (device, dtype) bucket for all the
  // per-tensor norms; at least fp32 accumulation so bf16 gradients do not
  // lose the sum. GPU reductions are tree-shaped and accurate in fp32.
  std::vector<at::Tensor> norms = at::_foreach_norm(grads, norm_type, on_cpu ? at::kDouble : at::kFloat);
  for (auto& n : norms) n = n.to(f64);
  at::Tensor stacked = at::stack(norms);
  if (norm_type == kInfNorm) return stacked.max();
  return stacked.pow(norm_type).sum();
}

namespace {

// grad_norm_partial all-reduced over `groups`: the whole gradient's partial,
// still on the device.
at::Tensor reduced_partial(at::Tensor partial, double norm_type, const std::vector<const dist::ProcessGroup*>& groups) {
  const bool inf = norm_type == kInfNorm;
  const c10::Device home = partial.device();  // the gradients' (the CPU under FSDP's CPU offload)
  for (const dist::ProcessGroup* g : groups) {
    if (g == nullptr || g->size() == 1) continue;
    partial = dist::to_comm_device(partial);
    g->all_reduce(partial, inf ? dist::ReduceOp::Max : dist::ReduceOp::Sum);
  }
  return partial.to(home);
}

}  // namespace

at::Tensor total_grad_norm_tensor(const std::vector<at::Tensor>& params, double norm_type,
                                  const std::vector<const dist::ProcessGroup*>& groups) {
  return total_grad_norm_from_partial(grad_norm_partial(params, norm_type), norm_type, groups);
}

at::Tensor total_grad_norm_from_partial(const at::Tensor& local, double norm_type,
                                        const std::vector<const dist::ProcessGroup*>& groups) {
  check_norm_type(norm_type);
  // The all-reduces work in place: on a copy, so the caller's partial stays.
  at::Tensor partial = reduced_partial(local.clone(), norm_type, groups);
  if (norm_type == kInfNorm) return partial;
  // sqrt is correctly rounded on host and device alike, so this is bit for
  // bit total_grad_norm's std::sqrt; other p go through pow.
  return norm_type == 2.0 ? partial.sqrt() : partial.pow(1.0 / norm_type);
}

double total_grad_norm(const std::vector<at::Tensor>& params, double norm_type,
                       const std::vector<const dist::ProcessGroup*>& groups) {
  const bool inf = norm_type == kInfNorm;
  const double v = reduced_partial(grad_norm_partial(params, norm_type), norm_type, groups).item<double>();
  if (inf) return v;
  return norm_type == 2.0 ? std::sqrt(v) : std::pow(v, 1.0 / norm_type);
}

void scale_grads(const std::vector<at::Tensor>& params, double max_norm, double total_norm) {
  TITAN_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  if (!std::isfinite(total_norm)) return;
  // torch computes the coefficient from a float32 norm; doing the same keeps
  // clipped gradients bit-identical to torch's for fp32 runs.
  const float coef = static_cast<float>(max_norm) / (static_cast<float>(total_norm) + 1e-6f);
  if (coef >= 1.0f) return;  // multiplying by 1 would change nothing
  std::vector<at::Tensor> grads = grads_of(params);
  if (!grads.empty()) at::_foreach_mul_(grads, at::Scalar(static_cast<double>(coef)));
}

void scale_grads(const std::vector<at::Tensor>& params, double max_norm, const at::Tensor& total_norm) {
  TITAN_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  std::vector<at::Tensor> grads = grads_of(params);
  if (grads.empty()) return;
  // The host rule, in the same float32 arithmetic, on the device: coef =
  // float(max_norm) / (float(norm) + 1e-6f), 1 where it would be >= 1
  // (multiplying by exactly 1 changes no value, so gradients below the
  // limit stay bit-identical) or where the norm is NaN/inf (left untouched,
  // as the double overload does).
  const at::Tensor norm32 = total_norm.to(at::kFloat);
  const at::Tensor limit = at::full({}, static_cast<float>(max_norm), norm32.options());
  at::Tensor coef = (limit / (norm32 + 1e-6f)).clamp_max(1.0f);
  coef = at::where(at::isfinite(total_norm), coef, at::ones_like(coef));
  // One _foreach_mul_ per device the gradients are on (CPU offload keeps
  // them on the host while the norm may be on a GPU).
  std::vector<std::pair<c10::Device, std::vector<at::Tensor>>> by_device;
  for (const at::Tensor& g : grads) {
    auto it = std::find_if(by_device.begin(), by_device.end(), [&](const auto& d) { return d.first == g.device(); });
    if (it == by_device.end()) by_device.push_back({g.device(), {g}});
    else it->second.push_back(g);
  }
  // As torch's clip_grads_with_norm_: _foreach_mul_ by the 0-dim
  // coefficient on the gradients' device, so nothing comes to the host.
  // (fp32 gradients, titan's, get exactly the host rule's product.)
  for (auto& [device, list] : by_device) at::_foreach_mul_(list, coef.to(device));
}

double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm, double norm_type,
                      const std::vector<const dist::ProcessGroup*>& groups) {
  TITAN_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  const double total = total_grad_norm(params, norm_type, groups);
  scale_grads(params, max_norm, total);
  return total;
}

double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm, double norm_type,
                      const dist::ProcessGroup* group) {
  std::vector<const dist::ProcessGroup*> groups;
  if (group != nullptr) groups.push_back(group);
  return clip_grad_norm(params, max_norm, norm_type, groups);
}

}  // namespace titan::optim
