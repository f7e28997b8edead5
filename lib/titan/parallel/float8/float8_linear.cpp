#include "titan/parallel/float8/float8_linear.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>

#include "titan/dist/process_group.hpp"
#include "titan/dist/world.hpp"
#include "titan/ops/forward_hooks.hpp"
#include "titan/ops/linear.hpp"
#include "titan/parallel/fsdp/all_gather_extension.hpp"
#include "titan/parallel/fsdp/fully_shard.hpp"
#include "titan/util/error.hpp"

namespace titan::float8 {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

double max_of(at::ScalarType t) {
  return t == at::kFloat8_e4m3fn ? 448.0 : 57344.0;  // e4m3fn, e5m2
}

// max |x| as an fp32 [1] tensor; 0 for an empty x (an FSDP shard may
// have no rows, and max() of nothing is an error).
at::Tensor local_amax(const at::Tensor& x) {
  if (x.numel() == 0) return at::zeros({1}, x.options().dtype(at::kFloat));
  return x.detach().abs().max().to(at::kFloat).reshape({1});
}

// scale = max(dtype) / amax, amax clamped below at 1e-12 (a zero tensor
// gets a finite scale), in fp32.
at::Tensor scale_from_amax(const at::Tensor& amax, at::ScalarType dtype) {
  return (max_of(dtype) / amax.clamp_min(1e-12)).to(at::kFloat);
}

// clamp(x · scale, ±max(dtype)) cast to dtype.
at::Tensor cast_scaled(const at::Tensor& x, const at::Tensor& scale, at::ScalarType dtype) {
  const double fmax = max_of(dtype);
  return (x.detach().to(at::kFloat) * scale).clamp(-fmax, fmax).to(dtype);
}

// cuBLASLt's float8 GEMMs (and so _scaled_mm) need every dimension to be a
// multiple of 16. The features are (convert_to_float8_training skips other
// Linears); the token count is the forward's M and grad_W's K, so a batch x
// seq that is not would fail deep in cuBLAS, in backward. Checked up front
// on CUDA (the CPU kernel has no such limit, and tests use small shapes).
void check_tokens_fit(const at::Tensor& x) {
  if (!x.is_cuda() || emulated_gemms()) return;
  const std::string problem = float8_token_count_error(x.sizes());
  TITAN_CHECK(problem.empty(), problem);
}

// The amax group travels to backward as a number in saved_data (an IValue
// cannot hold a pointer); the Float8Hook that owns the group outlives the graph.
const dist::ProcessGroup* group_of(AutogradContext* ctx) {
  return reinterpret_cast<const dist::ProcessGroup*>(ctx->saved_data["amax_group"].toInt());
}

// `cast_weight`, when not 0, points to the weight already in e4m3 with its
// scale (FSDP's float8 all-gather; valid during forward); then w is only
// the tensor its gradient goes to. (A pointer as a number, like the group:
// autograd Functions take no undefined tensor arguments.)
//
// `kept`, when not 0, points to this matmul's output kept by per-op
// activation checkpointing's first pass: the recompute casts x and W again
// (what backward needs) and hands the kept output back, no GEMM.
struct Float8Matmul : public torch::autograd::Function<Float8Matmul> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x2d, const at::Tensor& w, int64_t group,
                            int64_t cast_weight, int64_t kept) {
    const auto* amax_group = reinterpret_cast<const dist::ProcessGroup*>(group);
    ctx->saved_data["amax_group"] = group;
    Scaled xq = scale_tensorwise(x2d, at::kFloat8_e4m3fn, amax_group);
    Scaled wq = cast_weight ? *reinterpret_cast<const Scaled*>(cast_weight)
                            : scale_tensorwise(w, at::kFloat8_e4m3fn, amax_group);
    ctx->save_for_backward({xq.data, xq.scale, wq.data, wq.scale});
    ctx->saved_data["out_dtype"] = static_cast<int64_t>(x2d.scalar_type());
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(w.scalar_type());
    if (kept) return *reinterpret_cast<const at::Tensor*>(kept);
    // wq.t() of a row-major [out, in] is the column-major [in, out] the kernel wants.
    return scaled_mm(xq, Scaled{wq.data.t(), wq.scale}, x2d.scalar_type(), /*fast_accum=*/true);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Scaled xq{saved[0], saved[1]}, wq{saved[2], saved[3]};
    const auto out_dtype = static_cast<at::ScalarType>(ctx->saved_data["out_dtype"].toInt());
    const auto w_dtype = static_cast<at::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    Scaled g = scale_tensorwise(grads[0].contiguous(), at::kFloat8_e5m2, group_of(ctx));
    // Only the gradients autograd asks for: a zero-bubble schedule's I wants
    // grad_x alone and its W grad_W alone (pipeline/split_backward.hpp).
    // grad_x [N, in] = g [N, out] · W [out, in]
    at::Tensor grad_x = ctx->needs_input_grad(0)
                            ? scaled_mm(g, Scaled{column_major(wq.data), wq.scale}, out_dtype, /*fast_accum=*/false)
                            : at::Tensor();
    // grad_W [out, in] = gᵀ [out, N] · x [N, in]
    at::Tensor grad_w;
    if (ctx->needs_input_grad(1))
      grad_w = scaled_mm(Scaled{g.data.t().contiguous(), g.scale}, Scaled{column_major(xq.data), xq.scale}, w_dtype,
                         /*fast_accum=*/false);
    return {grad_x, grad_w, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Rowwise-scaled a · b: a [M, K] with scale [M, 1], b [K, N] column-major
// with scale [1, N] (quantising scales; the kernel wants their inverses).
// `fast_accum` as for scaled_mm: forward yes, backward no (torchao's
// defaults for every recipe).
at::Tensor rowwise_mm(const Scaled& a, const Scaled& b, at::ScalarType out, bool fast_accum) {
  const at::Tensor inv_a = a.scale.reciprocal(), inv_b = b.scale.reciprocal();
  if (a.data.is_cuda() && !emulated_gemms())
    return at::_scaled_mm(a.data, b.data, inv_a, inv_b, {}, {}, out, fast_accum);
  // ATen 2.11's CPU kernel asserts per-tensor scales: the same arithmetic
  // by hand (fp32 products of the float8 values, then the scales); also
  // what an emulating GPU computes.
  return (at::mm(a.data.to(at::kFloat), b.data.to(at::kFloat)) * inv_a * inv_b).to(out);
}

// Which dimension of a rowwise-scaled Linear tensor parallelism cut (its
// weight's TP placement): the amaxes taken along it are reduced over the
// TP group so that each piece scales as the whole layer would.
enum class TpCut : int64_t {
  None = 0,      // whole (no TP, or a replicated weight)
  Input = 1,     // RowwiseParallel: W [out, in/t], x [N, in/t]
  Output = 2,    // ColwiseParallel: W [out/t, in], the output gradient [N, out/t]
};

// torchao's rowwise recipe (Float8LinearRecipeName.ROWWISE): every GEMM
// operand scaled per row along its contraction dimension, all in e4m3;
// backward re-casts the saved high-precision x and W along the backward
// GEMMs' contraction dimensions (so x and W are kept, not their casts).
// (`kept` as Float8Matmul's: the output of per-op AC's first pass; `group`
// as Float8Matmul's, used only along the `cut` dimension.)
struct Float8RowwiseMatmul : public torch::autograd::Function<Float8RowwiseMatmul> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x2d, const at::Tensor& w, int64_t kept,
                            int64_t group, int64_t cut) {
    ctx->save_for_backward({x2d, w});
    ctx->saved_data["amax_group"] = group;
    ctx->saved_data["cut"] = cut;
    if (kept) return *reinterpret_cast<const at::Tensor*>(kept);  // backward re-casts x and W itself
    // Along `in`: reduced when TP cut the input features.
    const auto* along_in = static_cast<TpCut>(cut) == TpCut::Input ? reinterpret_cast<const dist::ProcessGroup*>(group)
                                                                    : nullptr;
    const Scaled xq = scale_axiswise(x2d, at::kFloat8_e4m3fn, 1, along_in);  // [N, 1]: per token
    const Scaled wq = scale_axiswise(w, at::kFloat8_e4m3fn, 1, along_in);    // [out, 1]: per output feature
    return rowwise_mm(xq, Scaled{wq.data.t(), wq.scale.t()}, x2d.scalar_type(), /*fast_accum=*/true);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x2d = saved[0], &w = saved[1];
    const at::Tensor g = grads[0].contiguous();
    // Along `out`: reduced when TP cut the output features.
    const auto* along_out =
        static_cast<TpCut>(ctx->saved_data["cut"].toInt()) == TpCut::Output ? group_of(ctx) : nullptr;
    // Only the gradients autograd asks for (as Float8Matmul); every TP rank
    // asks the same, so the amax all-reduces below still pair up.
    // grad_x [N, in] = g [N, out] · W [out, in]: g per row, W per column.
    at::Tensor grad_x, grad_w;
    if (ctx->needs_input_grad(0)) {
      const Scaled g_rows = scale_axiswise(g, at::kFloat8_e4m3fn, 1, along_out);
      const Scaled w_cols = scale_axiswise(w, at::kFloat8_e4m3fn, 0, along_out);  // [1, in]
      grad_x = rowwise_mm(g_rows, Scaled{column_major(w_cols.data), w_cols.scale}, x2d.scalar_type(),
                          /*fast_accum=*/false);
    }
    // grad_W [out, in] = gᵀ [out, N] · x [N, in]: both per column (over tokens).
    if (ctx->needs_input_grad(1)) {
      const Scaled g_cols = scale_axiswise(g, at::kFloat8_e4m3fn, 0);    // [1, out]
      const Scaled x_cols = scale_axiswise(x2d, at::kFloat8_e4m3fn, 0);  // [1, in]
      grad_w = rowwise_mm(Scaled{g_cols.data.t().contiguous(), g_cols.scale.t()},
                          Scaled{column_major(x_cols.data), x_cols.scale}, w.scalar_type(),
                          /*fast_accum=*/false);
    }
    // grad_W's casts are along the tokens, which every TP rank holds whole.
    return {grad_x, grad_w, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// y = x Wᵀ through Float8Matmul, for x of any rank.
at::Tensor float8_matmul(const at::Tensor& x, const at::Tensor& w, const dist::ProcessGroup* amax_group,
                         const Scaled* cast_weight, const at::Tensor* kept = nullptr) {
  TITAN_CHECK(x.size(-1) == w.size(1), "float8_linear: input has ", x.size(-1), " features, weight expects ", w.size(1));
  check_tokens_fit(x);
  std::vector<int64_t> out_shape = x.sizes().vec();
  out_shape.back() = w.size(0);
  at::Tensor kept2d;
  if (kept) kept2d = kept->reshape({-1, w.size(0)});
  at::Tensor y = Float8Matmul::apply(x.reshape({-1, x.size(-1)}).contiguous(), w, reinterpret_cast<int64_t>(amax_group),
                                     reinterpret_cast<int64_t>(cast_weight),
                                     kept ? reinterpret_cast<int64_t>(&kept2d) : 0);
  return y.view(out_shape);
}

// The float8 all-gather of one converted weight (FSDP's extension, a
// forward hook of its Linear only so that fully_shard finds it): casts the
// shard to e4m3 before the all-gather and keeps the gathered float8 weight
// for the matmul.
class Float8WeightGather : public ops::ForwardHook, public fsdp::AllGatherExtension {
 public:
  explicit Float8WeightGather(std::shared_ptr<dist::ProcessGroup> tp_group) : tp_group_(std::move(tp_group)) {}

  std::string param_name() const override { return "weight"; }
  at::ScalarType all_gather_dtype() const override { return at::kFloat8_e4m3fn; }
  void on_fully_shard(std::shared_ptr<dist::ProcessGroup> shard_group) override { shard_group_ = std::move(shard_group); }
  at::Tensor pre_all_gather(const at::Tensor& shard) override {
    at::NoGradGuard no_grad;
    at::Tensor scale = precomputed_scale_;
    if (!scale.defined()) {
      // The whole weight's amax: over the shard group, then over TP for a
      // TP-sharded layer (the unsharded layer's scale, as without FSDP).
      at::Tensor amax = local_amax(shard);
      shard_group_->all_reduce(amax, dist::ReduceOp::Max);
      if (tp_group_) tp_group_->all_reduce(amax, dist::ReduceOp::Max);
      scale = scale_from_amax(amax.reshape({}), at::kFloat8_e4m3fn);
    }
    pending_scale_ = scale;
    return cast_scaled(shard, scale, at::kFloat8_e4m3fn);
  }
  void post_all_gather(const at::Tensor& gathered, const at::Tensor& stand_in) override {
    gathered_ = Scaled{gathered, pending_scale_};
    stand_in_ = stand_in.getIntrusivePtr();
  }

  /// The gathered e4m3 weight when `w` is the stand-in FSDP installed for it, else null.
  const Scaled* gathered_for(const at::Tensor& w) const {
    return gathered_.data.defined() && stand_in_.lock().get() == w.unsafeGetTensorImpl() ? &gathered_ : nullptr;
  }
  bool sharded() const { return shard_group_ != nullptr; }
  const std::shared_ptr<dist::ProcessGroup>& shard_group() const { return shard_group_; }
  const std::shared_ptr<dist::ProcessGroup>& tp_group() const { return tp_group_; }
  void set_precomputed_scale(at::Tensor s) { precomputed_scale_ = std::move(s); }

 private:
  std::shared_ptr<dist::ProcessGroup> tp_group_;
  std::shared_ptr<dist::ProcessGroup> shard_group_;  // set by fully_shard
  at::Tensor precomputed_scale_;  // precompute_float8_dynamic_scale_for_fsdp
  at::Tensor pending_scale_;      // of the all-gather in flight
  // The gathered e4m3 weight of the current forward (FSDP's storage) and
  // the stand-in the module holds meanwhile; weak, so that the stand-in's
  // graph (which holds the FSDP unit, which holds this extension) is no cycle.
  Scaled gathered_;
  c10::weak_intrusive_ptr<c10::TensorImpl> stand_in_{c10::intrusive_ptr<c10::TensorImpl>()};
};

at::Tensor rowwise_matmul(const at::Tensor& x, const at::Tensor& w, const at::Tensor* kept = nullptr,
                          const dist::ProcessGroup* tp_group = nullptr, TpCut cut = TpCut::None) {
  TITAN_CHECK(x.size(-1) == w.size(1), "float8_linear: input has ", x.size(-1), " features, weight expects ", w.size(1));
  check_tokens_fit(x);
  std::vector<int64_t> out_shape = x.sizes().vec();
  out_shape.back() = w.size(0);
  at::Tensor kept2d;
  if (kept) kept2d = kept->reshape({-1, w.size(0)});
  return Float8RowwiseMatmul::apply(x.reshape({-1, x.size(-1)}).contiguous(), w,
                                    kept ? reinterpret_cast<int64_t>(&kept2d) : 0,
                                    reinterpret_cast<int64_t>(cut == TpCut::None ? nullptr : tp_group),
                                    static_cast<int64_t>(cut))
      .view(out_shape);
}

// Replaces its Linear's matmul (ForwardHook::forward_override), reading the
// weight at each call: FSDP installs the gathered one before forward (or,
// with the float8 all-gather, a stand-in whose float8 data `gather` holds).
class Float8Hook : public ops::ForwardHook {
 public:
  Float8Hook(ops::LinearImpl* linear, std::shared_ptr<dist::ProcessGroup> tp_group,
             std::shared_ptr<Float8WeightGather> gather, Recipe recipe, TpCut cut = TpCut::None)
      : linear_(linear), tp_group_(std::move(tp_group)), gather_(std::move(gather)), recipe_(recipe), cut_(cut) {}

  at::Tensor forward_override(const at::Tensor& input) override {
    const at::Tensor& w = linear_->weight;
    if (recipe_ == Recipe::Rowwise) return rowwise_matmul(input, w, nullptr, tp_group_.get(), cut_);
    return float8_matmul(input, w, tp_group_.get(), gather_ ? gather_->gathered_for(w) : nullptr);
  }
  // Per-op AC's recompute: the same casts (backward needs them), the kept output.
  at::Tensor reuse_output(const at::Tensor& input, const at::Tensor& kept) override {
    const at::Tensor& w = linear_->weight;
    if (recipe_ == Recipe::Rowwise) return rowwise_matmul(input, w, &kept, tp_group_.get(), cut_);
    return float8_matmul(input, w, tp_group_.get(), gather_ ? gather_->gathered_for(w) : nullptr, &kept);
  }
  ops::LinearImpl* linear() const { return linear_; }
  Float8WeightGather* gather() const { return gather_.get(); }
  Recipe recipe() const { return recipe_; }
  const dist::ProcessGroup* tp_group() const { return tp_group_.get(); }

 private:
  ops::LinearImpl* linear_;  // the module owns this hook
  std::shared_ptr<dist::ProcessGroup> tp_group_;
  std::shared_ptr<Float8WeightGather> gather_;  // null without the float8 all-gather
  Recipe recipe_;
  TpCut cut_;  // rowwise: the dimension TP cut, whose amaxes go over tp_group_
};

std::vector<Float8Hook*> hooks_under(torch::nn::Module& root) {
  std::vector<Float8Hook*> out;
  for (const auto& item : root.named_modules("", /*include_self=*/true))
    if (auto* linear = dynamic_cast<ops::LinearImpl*>(item.value().get()))
      for (const auto& h : linear->forward_hooks())
        if (auto* f8 = dynamic_cast<Float8Hook*>(h.get())) out.push_back(f8);
  return out;
}

}  // namespace

// The kernel applies the dequantising scales (1/scale).
//
// `fast_accum`: torchao's Float8GemmConfig. The forward GEMM (output) uses
// fast accumulation, the two backward GEMMs (grad_input, grad_weight) do
// not: on Hopper fast accumulation keeps the tensor cores' partial sums in
// lower precision, worth ~10-20 % of the GEMM and harmless in forward,
// while gradients summed over thousands of tokens need the full-precision
// accumulator. CUDA only: the CPU kernel has one (exact fp32) way, and
// asking it for the other would change nothing but could be refused.
//
// On the CPU the product is computed here, as ATen's own emulation
// (`_scaled_mm_out_cpu_emulated`) computes it: both operands upcast to fp32
// and multiplied by their dequantising scale, one fp32 matmul, the cast.
// ATen 2.11 takes that path only on CPUs without AMX-INT8; on those with it
// (Sapphire Rapids and later Xeons) it calls oneDNN's float8 matmul, which
// has no native kernel there. CI on such a machine most likely met that
// path: the float8 configs of train_configs/ took 209 s (llama3_405b) and
// over 600 s (llama3_8b_h100x8) where they take 9-11 s on a CPU without
// AMX. Computing it here gives every CPU the same speed and the same bits.

at::Tensor column_major(const at::Tensor& m) { return m.t().contiguous().t(); }

at::Tensor scaled_mm(const Scaled& a, const Scaled& b_colmajor, at::ScalarType out, bool fast_accum) {
  const at::Tensor inv_a = a.scale.reciprocal(), inv_b = b_colmajor.scale.reciprocal();
  if (a.data.is_cuda() && !emulated_gemms())
    return at::_scaled_mm(a.data, b_colmajor.data, inv_a, inv_b, {}, {}, out, fast_accum);
  return at::matmul(a.data.to(at::kFloat) * inv_a, b_colmajor.data.contiguous().to(at::kFloat) * inv_b).to(out);
}

namespace {
std::atomic<bool> g_emulated_gemms{false};
}  // namespace

void set_emulated_gemms(bool on) { g_emulated_gemms.store(on); }

bool emulated_gemms() { return g_emulated_gemms.load(); }

std::string float8_gpu_error(const std::string& device_name, int major, int minor, bool emulate) {
  if (emulate || major > 8 || (major == 8 && minor >= 9)) return "";
  return "float8 training needs a GPU of compute capability 8.9 or later (Ada, Hopper) for its float8 GEMMs; " +
         device_name + " is " + std::to_string(major) + "." + std::to_string(minor) +
         ": set [float8] emulate = true to test float8's numerics on it (emulated GEMMs, no speed-up)";
}

Scaled scale_tensorwise(const at::Tensor& x, at::ScalarType dtype, const dist::ProcessGroup* amax_group) {
  TITAN_CHECK(dtype == at::kFloat8_e4m3fn || dtype == at::kFloat8_e5m2, "float8: unsupported dtype ", dtype);
  at::Tensor amax = local_amax(x);
  if (amax_group) amax_group->all_reduce(amax, dist::ReduceOp::Max);
  at::Tensor scale = scale_from_amax(amax.reshape({}), dtype);
  return {cast_scaled(x, scale, dtype), scale};
}

Recipe recipe_from_name(const std::string& name) {
  if (name == "tensorwise") return Recipe::Tensorwise;
  if (name == "rowwise") return Recipe::Rowwise;
  throw Error("float8 recipe_name \"" + name + "\" is not one of \"tensorwise\", \"rowwise\"" +
              (name == "rowwise_with_gw_hp" ? " (torchao's rowwise_with_gw_hp is not supported yet)" : ""));
}

std::string to_string(Recipe recipe) { return recipe == Recipe::Rowwise ? "rowwise" : "tensorwise"; }

Scaled scale_axiswise(const at::Tensor& x, at::ScalarType dtype, int64_t dim, const dist::ProcessGroup* amax_group) {
  TITAN_CHECK(dtype == at::kFloat8_e4m3fn || dtype == at::kFloat8_e5m2, "float8: unsupported dtype ", dtype);
  at::NoGradGuard no_grad;
  // An empty piece (no rows here) contributes 0, the identity of the max.
  at::Tensor amax;
  if (x.size(dim) == 0) {
    std::vector<int64_t> shape = x.sizes().vec();
    shape[static_cast<size_t>(dim)] = 1;
    amax = at::zeros(shape, x.options().dtype(at::kFloat));
  } else {
    amax = x.detach().abs().amax({dim}, /*keepdim=*/true).to(at::kFloat);
  }
  if (amax_group && amax_group->size() > 1) amax_group->all_reduce(amax, dist::ReduceOp::Max);
  // torchao's round_scales_to_power_of_2: the scaling and unscaling are
  // then exact, only the cast rounds.
  const at::Tensor scale = at::exp2(at::floor(at::log2(scale_from_amax(amax, dtype))));
  return {cast_scaled(x, scale, dtype), scale};
}

std::string float8_token_count_error(at::IntArrayRef input_shape) {
  if (input_shape.size() < 2) return "";
  int64_t tokens = 1;
  for (size_t i = 0; i + 1 < input_shape.size(); ++i) tokens *= input_shape[i];
  if (tokens % 16 == 0) return "";
  std::string shape = "[";
  for (size_t i = 0; i < input_shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(input_shape[i]);
  shape += "]";
  std::string msg = "float8 linear: at::_scaled_mm needs the token count to be a multiple of 16 (it is grad_W's "
                    "inner dimension), but this rank's input " + shape + " has " + std::to_string(tokens) + " tokens";
  if (input_shape.size() == 3) {
    // The nearest batch x seq that fit, changing one of the two (seq here is
    // this rank's: the training seq_len / cp, / tp under sequence parallel).
    const int64_t b = input_shape[0], s = input_shape[1];
    int64_t s2 = s + 1, b2 = b + 1;
    while ((b * s2) % 16 != 0) ++s2;
    while ((b2 * s) % 16 != 0) ++b2;
    msg += " (batch " + std::to_string(b) + " x seq " + std::to_string(s) + "); batch x seq that fit: " +
           std::to_string(b) + " x " + std::to_string(s2) + " or " + std::to_string(b2) + " x " + std::to_string(s);
  }
  return msg;
}

at::Tensor float8_linear_rowwise(const at::Tensor& x, const at::Tensor& w) { return rowwise_matmul(x, w); }

at::Tensor float8_linear(const at::Tensor& x, const at::Tensor& w, const dist::ProcessGroup* amax_group) {
  return float8_matmul(x, w, amax_group, nullptr);
}

std::optional<Float8LinearOperands> float8_operands(ops::LinearImpl& linear) {
  for (const auto& h : linear.forward_hooks()) {
    auto* f8 = dynamic_cast<Float8Hook*>(h.get());
    if (!f8) continue;
    TITAN_CHECK(f8->recipe() == Recipe::Tensorwise,
                "float8: recipe_name \"rowwise\" inside async tensor parallelism is not supported (the ring's "
                "chunked GEMMs take tensorwise scales); use \"tensorwise\" or synchronous TP");
    Float8LinearOperands o;
    o.amax_group = f8->tp_group();
    const at::Tensor& w = linear.weight;
    const Scaled* gathered = f8->gather() ? f8->gather()->gathered_for(w) : nullptr;
    o.weight = gathered ? *gathered : scale_tensorwise(w, at::kFloat8_e4m3fn, o.amax_group);
    return o;
  }
  return std::nullopt;
}

std::vector<std::string> convert_to_float8_training(torch::nn::Module& root, const Float8Options& options) {
  set_emulated_gemms(options.emulate);
  TITAN_CHECK(options.recipe == Recipe::Tensorwise || !options.fsdp_float8_all_gather,
              "float8: the float8 FSDP all-gather needs recipe_name \"tensorwise\" (torchao gathers tensorwise-scaled "
              "weights only); turn one of them off");
  // Rowwise under TP: which dimension TP cut, from each weight's placement.
  const bool rowwise_tp = options.recipe == Recipe::Rowwise && options.tp_group;
  TITAN_CHECK(!rowwise_tp || !options.tp_placements.empty(), "convert_to_float8_training: the rowwise recipe under ",
              "TP (tp_group set) needs Float8Options::tp_placements (tp::tp_placements(root)): the dimension TP cut ",
              "decides which amaxes are reduced over the group");
  static const std::map<std::string, Placement> kNone;
  const std::map<std::string, Placement>& placed = rowwise_tp ? options.tp_placements : kNone;
  std::vector<std::string> converted;
  for (const auto& item : root.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    auto* linear = dynamic_cast<ops::LinearImpl*>(item.value().get());
    if (!linear) continue;
    const std::string& name = item.key();
    bool skipped = false;
    for (const std::string& s : options.filter_fqns)
      skipped = skipped || name == s ||
                (name.size() > s.size() && name.compare(name.size() - s.size() - 1, s.size() + 1, "." + s) == 0);
    // A tied output shares the embedding's weight, which a lookup reads in
    // full precision: it stays a plain matmul.
    if (skipped || linear->tied() || linear->weight.size(0) % 16 != 0 || linear->weight.size(1) % 16 != 0) continue;
    TITAN_CHECK(!fsdp::is_fully_sharded(*linear) && hooks_under(*linear).empty(), "convert_to_float8_training: ",
                name, " is already converted or sharded (convert before fully_shard, once)");
    std::shared_ptr<Float8WeightGather> gather;
    if (options.fsdp_float8_all_gather) {
      gather = std::make_shared<Float8WeightGather>(options.tp_group);
      linear->add_forward_hook(gather);  // does nothing in forward; fully_shard finds it here
    }
    TpCut cut = TpCut::None;
    if (auto it = placed.find(name + ".weight"); it != placed.end() && it->second.is_shard())
      cut = it->second.dim == 0 ? TpCut::Output : TpCut::Input;  // [out, in]: Shard(0) colwise, Shard(1) rowwise
    linear->add_forward_hook(std::make_shared<Float8Hook>(linear, options.tp_group, gather, options.recipe, cut));
    converted.push_back(name);
  }
  return converted;
}

std::vector<std::string> convert_to_float8_training(torch::nn::Module& root, const std::vector<std::string>& skip,
                                                    std::shared_ptr<dist::ProcessGroup> tp_group) {
  Float8Options o;
  o.filter_fqns = skip;
  o.tp_group = std::move(tp_group);
  return convert_to_float8_training(root, o);
}

int64_t count_float8_linears(torch::nn::Module& root) { return static_cast<int64_t>(hooks_under(root).size()); }

int64_t precompute_float8_dynamic_scale_for_fsdp(torch::nn::Module& root) {
  at::NoGradGuard no_grad;
  std::vector<Float8Hook*> hooks;
  for (Float8Hook* h : hooks_under(root))
    if (h->gather() && h->gather()->sharded()) hooks.push_back(h);
  if (hooks.empty()) return 0;
  // Outside a forward each module holds its shard: the local amaxes of all
  // layers in one vector, reduced with one all-reduce per group (a model
  // has one shard group, and one TP group with TP). Every rank holds the
  // same layers in the same order, so the vectors line up.
  std::vector<at::Tensor> amaxes;
  for (Float8Hook* h : hooks) amaxes.push_back(local_amax(h->linear()->weight));
  // On the collectives' device (the shards are host memory under FSDP's
  // CPU offload, and NCCL takes CUDA tensors only).
  const at::Tensor local = at::cat(amaxes);
  at::Tensor all = dist::to_comm_device(local);
  std::vector<const dist::ProcessGroup*> groups;
  for (Float8Hook* h : hooks)
    for (const dist::ProcessGroup* g : {h->gather()->shard_group().get(), h->gather()->tp_group().get()})
      if (g && std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  for (const dist::ProcessGroup* g : groups) {
    // Layers outside g contribute nothing to its reduction (and get
    // nothing from it): zeros, the identity of a max over amaxes.
    at::Tensor member = at::zeros({static_cast<int64_t>(hooks.size())}, all.options().dtype(at::kBool));
    for (size_t i = 0; i < hooks.size(); ++i)
      if (hooks[i]->gather()->shard_group().get() == g || hooks[i]->gather()->tp_group().get() == g)
        member[static_cast<int64_t>(i)] = true;
    at::Tensor part = at::where(member, all, at::zeros_like(all));
    g->all_reduce(part, dist::ReduceOp::Max);
    all = at::where(member, part, all);
  }
  // The scales stay where the gathered weights are used (the job's device,
  // which is the collectives'), not with the shards: under CPU offload a
  // host scale would reach _scaled_mm beside CUDA operands.
  at::Tensor scales = scale_from_amax(all, at::kFloat8_e4m3fn);
  for (size_t i = 0; i < hooks.size(); ++i)
    hooks[i]->gather()->set_precomputed_scale(scales[static_cast<int64_t>(i)].clone());
  return static_cast<int64_t>(hooks.size());
}

}  // namespace titan::float8
