#include "titan/parallel/float8/float8_linear.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/nn/module.h>

#include <limits>
#include <memory>

#include "titan/dist/process_group.hpp"
#include "titan/ops/forward_hooks.hpp"
#include "titan/ops/linear.hpp"
#include "titan/util/error.hpp"

namespace titan::float8 {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

double max_of(at::ScalarType t) {
  return t == at::kFloat8_e4m3fn ? 448.0 : 57344.0;  // e4m3fn, e5m2
}

// _scaled_mm wants its second operand column-major.
at::Tensor column_major(const at::Tensor& m) { return m.t().contiguous().t(); }

// a·b with the float8 operands' dequantising scales (1/scale) applied by
// the kernel, in `out` dtype.
at::Tensor scaled_mm(const Scaled& a, const Scaled& b_colmajor, at::ScalarType out) {
  return at::_scaled_mm(a.data, b_colmajor.data, a.scale.reciprocal(), b_colmajor.scale.reciprocal(), {}, {}, out);
}

// The amax group travels to backward as a number in saved_data (an IValue
// cannot hold a pointer); the Float8Hook that owns the group outlives the graph.
const dist::ProcessGroup* group_of(AutogradContext* ctx) {
  return reinterpret_cast<const dist::ProcessGroup*>(ctx->saved_data["amax_group"].toInt());
}

struct Float8Matmul : public torch::autograd::Function<Float8Matmul> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x2d, const at::Tensor& w, int64_t group) {
    const auto* amax_group = reinterpret_cast<const dist::ProcessGroup*>(group);
    ctx->saved_data["amax_group"] = group;
    Scaled xq = scale_tensorwise(x2d, at::kFloat8_e4m3fn, amax_group);
    Scaled wq = scale_tensorwise(w, at::kFloat8_e4m3fn, amax_group);
    ctx->save_for_backward({xq.data, xq.scale, wq.data, wq.scale});
    ctx->saved_data["out_dtype"] = static_cast<int64_t>(x2d.scalar_type());
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(w.scalar_type());
    // wq.t() of a row-major [out, in] is the column-major [in, out] the kernel wants.
    return scaled_mm(xq, Scaled{wq.data.t(), wq.scale}, x2d.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Scaled xq{saved[0], saved[1]}, wq{saved[2], saved[3]};
    const auto out_dtype = static_cast<at::ScalarType>(ctx->saved_data["out_dtype"].toInt());
    const auto w_dtype = static_cast<at::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    Scaled g = scale_tensorwise(grads[0].contiguous(), at::kFloat8_e5m2, group_of(ctx));
    // grad_x [N, in] = g [N, out] · W [out, in]
    at::Tensor grad_x = scaled_mm(g, Scaled{column_major(wq.data), wq.scale}, out_dtype);
    // grad_W [out, in] = gᵀ [out, N] · x [N, in]
    at::Tensor grad_w =
        scaled_mm(Scaled{g.data.t().contiguous(), g.scale}, Scaled{column_major(xq.data), xq.scale}, w_dtype);
    return {grad_x, grad_w, at::Tensor()};
  }
};

// Replaces its Linear's matmul (ForwardHook::forward_override), reading the
// weight at each call: FSDP installs the gathered one before forward.
class Float8Hook : public ops::ForwardHook {
 public:
  Float8Hook(ops::LinearImpl* linear, std::shared_ptr<dist::ProcessGroup> group)
      : linear_(linear), group_(std::move(group)) {}
  at::Tensor forward_override(const at::Tensor& input) override {
    return float8_linear(input, linear_->weight, group_.get());
  }

 private:
  ops::LinearImpl* linear_;  // the module owns this hook
  std::shared_ptr<dist::ProcessGroup> group_;
};

}  // namespace

Scaled scale_tensorwise(const at::Tensor& x, at::ScalarType dtype, const dist::ProcessGroup* amax_group) {
  TITAN_CHECK(dtype == at::kFloat8_e4m3fn || dtype == at::kFloat8_e5m2, "float8: unsupported dtype ", dtype);
  const double fmax = max_of(dtype);
  at::Tensor amax = x.detach().abs().max().to(at::kFloat).reshape({1});
  if (amax_group) amax_group->all_reduce(amax, dist::ReduceOp::Max);
  amax = amax.reshape({}).clamp_min(1e-12);
  at::Tensor scale = (fmax / amax).to(at::kFloat);
  at::Tensor data = (x.detach().to(at::kFloat) * scale).clamp(-fmax, fmax).to(dtype);
  return {data, scale};
}

at::Tensor float8_linear(const at::Tensor& x, const at::Tensor& w, const dist::ProcessGroup* amax_group) {
  TITAN_CHECK(x.size(-1) == w.size(1), "float8_linear: input has ", x.size(-1), " features, weight expects ", w.size(1));
  std::vector<int64_t> out_shape = x.sizes().vec();
  out_shape.back() = w.size(0);
  at::Tensor y = Float8Matmul::apply(x.reshape({-1, x.size(-1)}).contiguous(), w,
                                     reinterpret_cast<int64_t>(amax_group));
  return y.view(out_shape);
}

std::vector<std::string> convert_to_float8_training(torch::nn::Module& root, const std::vector<std::string>& skip,
                                                    std::shared_ptr<dist::ProcessGroup> tp_group) {
  std::vector<std::string> converted;
  for (const auto& item : root.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    auto* linear = dynamic_cast<ops::LinearImpl*>(item.value().get());
    if (!linear) continue;
    const std::string& name = item.key();
    bool skipped = false;
    for (const std::string& s : skip)
      skipped = skipped || name == s ||
                (name.size() > s.size() && name.compare(name.size() - s.size() - 1, s.size() + 1, "." + s) == 0);
    // A tied output shares the embedding's weight, which a lookup reads in
    // full precision: it stays a plain matmul.
    if (skipped || linear->tied() || linear->weight.size(0) % 16 != 0 || linear->weight.size(1) % 16 != 0) continue;
    linear->add_forward_hook(std::make_shared<Float8Hook>(linear, tp_group));
    converted.push_back(name);
  }
  return converted;
}

}  // namespace titan::float8
