// cpu_matmul.hpp: the process-wide GEMM choice and the oneDNN Linear node.
#include "titan/ops/gemm/cpu_matmul.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <atomic>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "titan/ops/cpu_isa.hpp"
#include "titan/ops/gemm/onednn_sgemm.hpp"
#include "titan/util/error.hpp"
#include "titan/util/strings.hpp"
#include "titan/util/strprintf.hpp"

namespace titan::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::atomic<CpuMatmul> g_cpu_matmul{CpuMatmul::aten};

// A 2-D tensor as oneDNN's strided operand: dense row-major or dense
// column-major (a transposed view) as it is, anything else (size-1
// dimensions, whose strides say nothing, or rows with gaps, which oneDNN
// 2.6's jit GEMM failed to execute) copied to row-major first. `keep`
// holds the copy alive.
onednn::Matrix as_matrix(const at::Tensor& t, at::Tensor& keep) {
  const int64_t rows = t.size(0), cols = t.size(1);
  const int64_t rs = t.stride(0), cs = t.stride(1);
  const bool row_major = cs == 1 && rs == cols, col_major = rs == 1 && cs == rows;
  if (rows > 1 && cols > 1 && (row_major || col_major)) return {t.const_data_ptr<float>(), rows, cols, rs, cs};
  keep = t.contiguous();
  return {keep.const_data_ptr<float>(), rows, cols, cols, 1};
}

bool takes(const at::Tensor& x, const at::Tensor& w) {
  return g_cpu_matmul.load(std::memory_order_relaxed) == CpuMatmul::onednn && x.device().is_cpu() &&
         w.device().is_cpu() && x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat && w.dim() == 2 &&
         x.dim() >= 1 && x.size(-1) == w.size(1) && !at::autocast::is_autocast_enabled(at::kCPU);
}

struct OnednnLinearFunction : torch::autograd::Function<OnednnLinearFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w) {
    ctx->save_for_backward({x, w});
    const at::Tensor x2 = x.reshape({-1, x.size(-1)});
    std::vector<int64_t> out_shape = x.sizes().vec();
    out_shape.back() = w.size(0);
    return onednn_mm(x2, w.t()).view(out_shape);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const at::Tensor &x = s[0], &w = s[1];
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor()};
    const at::Tensor dy = grads[0].reshape({-1, w.size(0)});
    at::Tensor dx, dw;
    // A zero-bubble schedule's input step asks for dx alone and its weight
    // step for dW alone: each GEMM only where autograd wants its result.
    if (ctx->needs_input_grad(0)) dx = onednn_mm(dy, w).view(x.sizes());
    if (ctx->needs_input_grad(1)) dw = onednn_mm(dy.t(), x.reshape({-1, x.size(-1)}));
    return {dx, dw};
  }
};

// One product of the check below: `a`·`b` through oneDNN, executed twice
// (a kernel that was never made can pass its first call: oneDNN 2.6's jit
// GEMM did), against float64. "" when both agree to fp32's rounding, else
// what went wrong.
std::string check_one_product(const at::Tensor& a, const at::Tensor& b, const char* layout) {
  at::Tensor c;
  try {
    onednn_mm(a, b);
    c = onednn_mm(a, b);
  } catch (const std::exception& e) {
    return std::string(layout) + ": " + first_line(e.what());
  }
  const at::Tensor exact = at::mm(a.to(at::kDouble), b.to(at::kDouble));
  // The classical bound of a K-term fp32 dot product, |ĉ - c| ≤ γ_K·(|a|·|b|)
  // with γ_K ≈ K·2⁻²⁴, doubled for the fp32 rounding of the result; a kernel
  // that computed nothing, or another product, is off by O(|a|·|b|).
  const double gamma = 2.0 * static_cast<double>(a.size(1)) * std::ldexp(1.0, -24);
  const at::Tensor bound = gamma * at::mm(a.abs().to(at::kDouble), b.abs().to(at::kDouble)) + 1e-30;
  const double worst = ((c.to(at::kDouble) - exact).abs() / bound).max().item<double>();
  if (!(worst <= 1.0))
    return strprintf("%s: off by %.3g of the fp32 bound against float64", layout, worst);
  return "";
}

// Whether oneDNN's GEMM computes what aten::mm does on this machine, once
// per process: the three products of a Linear (x·Wᵀ, dy·W, dyᵀ·x: row- and
// column-major operands) on small random matrices, each executed twice.
// A few milliseconds (three primitives made); "" when it passes, else why not.
const std::string& onednn_check_failure() {
  static const std::string failure = [] {
    if (!onednn::available()) return "oneDNN's plugin did not load: " + onednn::unavailable_reason();
    at::NoGradGuard no_grad;
    const auto gen = at::make_generator<at::CPUGeneratorImpl>(20261207);
    const auto opts = at::TensorOptions().dtype(at::kFloat);
    const int64_t tokens = 96, in = 80, out = 72;
    const at::Tensor x = at::randn({tokens, in}, gen, opts), w = at::randn({out, in}, gen, opts);
    const at::Tensor dy = at::randn({tokens, out}, gen, opts);
    for (const std::string& why : {check_one_product(x, w.t(), "x·Wᵀ"), check_one_product(dy, w, "dy·W"),
                                   check_one_product(dy.t(), x, "dyᵀ·x")})
      if (!why.empty()) return "oneDNN's GEMM failed its check against float64 (" + why + ")";
    return std::string();
  }();
  return failure;
}

void require_onednn() {
  TITAN_CHECK(onednn_check_failure().empty(), "cpu_matmul = \"onednn\": ", onednn_check_failure(),
              "; \"aten\" runs ATen's GEMM");
}

// The oneDNN kernel of a Linear's forward product (x·Wᵀ, 512 tokens of
// width 256 into 768): "brg:avx512_core" where the CPU has AVX-512.
std::string onednn_linear_kernel() {
  const float* none = nullptr;
  const onednn::Matrix x{none, 512, 256, 256, 1}, wt{none, 256, 768, 1, 256};
  try {
    return onednn::implementation(x, wt, 768);
  } catch (const std::exception& e) {
    return first_line(e.what());
  }
}

// What "auto" takes, and why not oneDNN when it does not ("" then).
// oneDNN only where it is checked, faster and as reproducible as MKL:
// LibTorch's aten::mm is MKL's sgemm, and MKL picks its kernels by CPU
// vendor. On AMD CPUs it runs a generic AVX2 path, which oneDNN's AVX-512
// kernels (brgemm) beat: 1.4-1.6x on the debug model's GEMM shapes on a
// 2-core AMD EPYC, the training step 1.7x (docs/train.md). On Intel CPUs
// MKL runs its own best kernels, measured within 3 % of oneDNN's on an
// AVX-512 Xeon. Without AVX-512 oneDNN runs its jit GEMM ("gemm:jit"),
// 1.0-1.3x MKL's AVX2 path on the same AMD CPU, but its sums round unlike
// MKL's and under it 2 of 30 resumed runs of checkpoint_kill_loop ended
// off the uninterrupted run's bits (cause not found): eager PyTorch's GEMM
// stays in all three cases.
const std::pair<CpuMatmul, std::string>& auto_choice() {
  static const std::pair<CpuMatmul, std::string> choice = []() -> std::pair<CpuMatmul, std::string> {
    if (!onednn_check_failure().empty()) return {CpuMatmul::aten, onednn_check_failure()};
    if (cpu_vendor() == "GenuineIntel")
      return {CpuMatmul::aten, "an Intel CPU, where MKL's own kernels are as fast as oneDNN's"};
    const std::string kernel = onednn_linear_kernel();
    if (kernel.rfind("brg:avx512", 0) != 0)
      return {CpuMatmul::aten, "oneDNN would run " + kernel + " here, not its AVX-512 kernels"};
    return {CpuMatmul::onednn, ""};
  }();
  return choice;
}

}  // namespace

void set_cpu_matmul(CpuMatmul m) {
  if (m == CpuMatmul::onednn) require_onednn();
  g_cpu_matmul.store(m);
}

CpuMatmul cpu_matmul() { return g_cpu_matmul.load(); }

CpuMatmul parse_cpu_matmul(const std::string& name) {
  if (name == "auto") return auto_choice().first;
  if (name == "aten") return CpuMatmul::aten;
  TITAN_CHECK(name == "onednn", "cpu_matmul must be \"auto\", \"onednn\" or \"aten\", got \"", name, "\"");
  require_onednn();
  return CpuMatmul::onednn;
}

const char* cpu_matmul_name(CpuMatmul m) { return m == CpuMatmul::onednn ? "onednn" : "aten"; }

std::string describe_cpu_matmul(const std::string& requested) {
  if (cpu_matmul() == CpuMatmul::onednn) return "oneDNN";
  if (requested == "auto" && !auto_choice().second.empty()) return "aten::mm (" + auto_choice().second + ")";
  return "aten::mm";
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight) {
  if (!takes(x, weight)) return at::linear(x, weight);
  return OnednnLinearFunction::apply(x, weight);
}

at::Tensor mm(const at::Tensor& a, const at::Tensor& b) {
  if (a.dim() == 2 && b.dim() == 2 && takes(a, b.t())) return onednn_mm(a, b);
  return at::mm(a, b);
}

at::Tensor onednn_mm(const at::Tensor& a, const at::Tensor& b) {
  RECORD_FUNCTION(kOnednnMmRecord, std::vector<c10::IValue>({a, b}));
  TITAN_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "onednn_mm: cannot multiply ", a.sizes(),
              " by ", b.sizes());
  TITAN_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat && a.device().is_cpu() &&
                  b.device().is_cpu(),
              "onednn_mm: fp32 CPU tensors only, got ", a.toString(), " and ", b.toString());
  const int64_t m = a.size(0), n = b.size(1), k = a.size(1);
  if (m == 0 || n == 0 || k == 0) return at::zeros({m, n}, a.options());
  at::Tensor c = at::empty({m, n}, a.options());
  at::Tensor keep_a, keep_b;
  onednn::sgemm(as_matrix(a, keep_a), as_matrix(b, keep_b), c.mutable_data_ptr<float>(), n);
  return c;
}

}  // namespace titan::ops
