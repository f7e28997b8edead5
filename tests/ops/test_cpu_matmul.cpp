// oneDNN's GEMM (ops/gemm) against float64 ("truth") next to ATen's
// aten::mm in float32: a different library may round differently, but not
// much worse. And titan's Linear through it: the output and both
// gradients against at::linear's, each GEMM run only where autograd asks
// for its result, the process-wide switch and its one-line errors.
//
// Measured on a 2-core AMD EPYC (AVX-512, oneDNN 2.6's brg:avx512_core
// kernels; 2026-12-07): the largest error against float64 relative to the
// result's largest magnitude is 1.16e-6 for oneDNN and 4.6e-7 for aten::mm
// over the shapes below (K up to 2048; at most 2.9x aten's on one shape);
// bounded at 4x aten's plus 1e-7. Linear's output and gradients differ
// from at::linear's by at most 1.05e-6 of their largest magnitude
// (bounded at 2e-6).

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "support/cpu_gemm_here.hpp"
#include "titan/ops/cpu_isa.hpp"
#include "titan/ops/gemm/cpu_matmul.hpp"
#include "titan/ops/gemm/onednn_sgemm.hpp"
#include "titan/ops/linear.hpp"
#include "titan/util/error.hpp"

namespace {

using titan::ops::CpuMatmul;

// Largest |x − truth| over the largest |truth|.
double relative_error(const at::Tensor& x, const at::Tensor& truth) {
  return (x.to(at::kDouble) - truth).abs().max().item<double>() / truth.abs().max().item<double>();
}

// Restores the process-wide choice when a test ends.
struct MatmulScope {
  CpuMatmul before = titan::ops::cpu_matmul();
  explicit MatmulScope(CpuMatmul m) { titan::ops::set_cpu_matmul(m); }
  ~MatmulScope() { titan::ops::set_cpu_matmul(before); }
};

}  // namespace

TEST(CpuMatmul, OnednnGemmIsAsAccurateAsAten) {
  if (!titan::ops::onednn::available()) GTEST_SKIP() << titan::ops::onednn::unavailable_reason();
  at::manual_seed(3);
  struct Case {
    int64_t m, k, n;
    bool a_t, b_t;  // operands given as transposed views
  };
  // The debug model's GEMMs (512 tokens, dim 256, FFN 768, vocabulary
  // 2048) in the three layouts of a Linear (x·Wᵀ, dy·W, dyᵀ·x), and odd
  // sizes, a single row and a single column.
  const std::vector<Case> cases = {{512, 256, 768, false, true},  {512, 768, 256, false, false},
                                   {768, 512, 256, true, false},  {512, 256, 2048, false, true},
                                   {2048, 512, 256, true, false}, {512, 2048, 256, false, false},
                                   {37, 129, 61, false, false},   {37, 129, 61, true, true},
                                   {1, 256, 768, false, true},    {512, 256, 1, false, true}};
  double worst_dnn = 0, worst_aten = 0;
  for (const Case& c : cases) {
    const at::Tensor a = c.a_t ? at::randn({c.k, c.m}).t() : at::randn({c.m, c.k});
    const at::Tensor b = c.b_t ? at::randn({c.n, c.k}).t() : at::randn({c.k, c.n});
    const at::Tensor truth = at::mm(a.to(at::kDouble), b.to(at::kDouble));
    const double e_dnn = relative_error(titan::ops::onednn_mm(a, b), truth);
    const double e_aten = relative_error(at::mm(a, b), truth);
    std::printf("  %4lld x %4lld x %4lld %s%s: oneDNN %.2e  aten::mm %.2e  (%s)\n", (long long)c.m, (long long)c.k,
                (long long)c.n, c.a_t ? "Aᵀ" : "A ", c.b_t ? "Bᵀ" : "B ", e_dnn, e_aten,
                titan::ops::onednn::implementation({a.const_data_ptr<float>(), c.m, c.k, a.stride(0), a.stride(1)},
                                                   {b.const_data_ptr<float>(), c.k, c.n, b.stride(0), b.stride(1)},
                                                   c.n)
                    .c_str());
    EXPECT_LE(e_dnn, 4 * e_aten + 1e-7) << c.m << "x" << c.k << "x" << c.n;
    worst_dnn = std::max(worst_dnn, e_dnn), worst_aten = std::max(worst_aten, e_aten);
  }
  std::printf("  worst: oneDNN %.2e, aten::mm %.2e (relative to the result's largest magnitude)\n", worst_dnn,
              worst_aten);
  // A sliced operand (rows with a gap) and empty shapes.
  const at::Tensor wide = at::randn({64, 100});
  const at::Tensor sliced = wide.narrow(1, 10, 48);  // row stride 100, 48 columns
  const at::Tensor b = at::randn({48, 32});
  EXPECT_LE(relative_error(titan::ops::onednn_mm(sliced, b), at::mm(sliced.to(at::kDouble), b.to(at::kDouble))),
            1e-6);
  EXPECT_EQ(titan::ops::onednn_mm(at::randn({0, 8}), at::randn({8, 4})).sizes(), at::IntArrayRef({0, 4}));
  EXPECT_TRUE(titan::ops::onednn_mm(at::randn({3, 0}), at::randn({0, 4})).eq(0).all().item<bool>());
  EXPECT_THROW(titan::ops::onednn_mm(at::randn({3, 4}), at::randn({5, 4})), titan::Error);
}

// The fast shapes must not fall back to oneDNN's reference kernels (its
// "ref:any" matmul is ~100x slower than the JIT ones).
TEST(CpuMatmul, TheModelsShapesRunJitKernels) {
  if (!titan::ops::onednn::available()) GTEST_SKIP() << titan::ops::onednn::unavailable_reason();
  const at::Tensor x = at::randn({512, 256}), w = at::randn({768, 256}), dy = at::randn({512, 768});
  auto impl = [](const at::Tensor& a, const at::Tensor& b) {
    return titan::ops::onednn::implementation(
        {a.const_data_ptr<float>(), a.size(0), a.size(1), a.stride(0), a.stride(1)},
        {b.const_data_ptr<float>(), b.size(0), b.size(1), b.stride(0), b.stride(1)}, b.size(1));
  };
  for (const auto& [what, name] : std::vector<std::pair<std::string, std::string>>{
           {"x·Wᵀ", impl(x, w.t())}, {"dy·W", impl(dy, w)}, {"dyᵀ·x", impl(dy.t(), x)}}) {
    std::printf("  %s: %s\n", what.c_str(), name.c_str());
    EXPECT_EQ(name.find("ref"), std::string::npos) << what << " runs " << name;
  }
}

TEST(CpuMatmul, LinearThroughOnednnMatchesAtenLinear) {
  if (!titan::ops::onednn::available()) GTEST_SKIP() << titan::ops::onednn::unavailable_reason();
  at::manual_seed(5);
  titan::ops::Linear lin(256, 768);
  {
    at::NoGradGuard no_grad;
    lin->weight.normal_(0, 0.02);
  }
  const at::Tensor x0 = at::randn({4, 128, 256});
  const at::Tensor g = at::randn({4, 128, 768});
  auto run = [&](CpuMatmul m) {
    MatmulScope scope(m);
    lin->weight.mutable_grad() = at::Tensor();
    at::Tensor x = x0.clone().requires_grad_(true);
    at::Tensor y = lin->forward(x);
    y.backward(g);
    return std::vector<at::Tensor>{y.detach(), x.grad(), lin->weight.grad().clone()};
  };
  const auto dnn = run(CpuMatmul::onednn), aten = run(CpuMatmul::aten);
  const char* names[] = {"output", "input gradient", "weight gradient"};
  for (size_t i = 0; i < 3; ++i) {
    const double d = (dnn[i] - aten[i]).abs().max().item<double>() / aten[i].abs().max().item<double>();
    std::printf("  %s: |oneDNN − aten| / max|aten| = %.2e\n", names[i], d);
    EXPECT_LE(d, 2e-6) << names[i];
  }
  // Only the gradients autograd asks for: an input without grad gets none
  // computed, and torch::autograd::grad for the input alone leaves the
  // weight's .grad alone.
  MatmulScope scope(CpuMatmul::onednn);
  lin->weight.mutable_grad() = at::Tensor();
  at::Tensor x = x0.clone().requires_grad_(true);
  const at::Tensor dx = torch::autograd::grad({lin->forward(x)}, {x}, {g})[0];
  EXPECT_TRUE(dx.defined());
  EXPECT_FALSE(lin->weight.grad().defined());
  // fp64 and bf16 inputs, and autocast, stay ATen's.
  EXPECT_EQ(titan::ops::linear(x0.to(at::kDouble), lin->weight.to(at::kDouble)).scalar_type(), at::kDouble);
}

TEST(CpuMatmul, TheChoiceIsParsedWithOneLineErrors) {
  EXPECT_EQ(titan::ops::parse_cpu_matmul("aten"), CpuMatmul::aten);
  // "auto": oneDNN only where it loads, off Intel CPUs (MKL's own kernels
  // there) and with AVX-512 kernels (not under ONEDNN_MAX_CPU_ISA=AVX2);
  // else aten, and the banner's word says why.
  const CpuMatmul chosen = titan::ops::parse_cpu_matmul("auto");
  if (!titan::ops::onednn::available() || !titan::testing::cpu_gemm_here().auto_takes_onednn())
    EXPECT_EQ(chosen, CpuMatmul::aten);
  if (chosen == CpuMatmul::aten) {
    titan::ops::set_cpu_matmul(CpuMatmul::aten);
    const std::string why = titan::ops::describe_cpu_matmul("auto");
    EXPECT_TRUE(why.rfind("aten::mm (", 0) == 0) << why;
    std::printf("auto: %s\n", why.c_str());
  }
  try {
    titan::ops::parse_cpu_matmul("mkl");
    ADD_FAILURE() << "accepted mkl";
  } catch (const titan::Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"auto\", \"onednn\" or \"aten\""), std::string::npos) << e.what();
  }
  if (!titan::ops::onednn::available()) EXPECT_THROW(titan::ops::parse_cpu_matmul("onednn"), titan::Error);
}
