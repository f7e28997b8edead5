// Float8 linear training against fp32.
//
// 1. The scaling: amax maps to the float8 maximum (448 for e4m3, 57344 for
//    e5m2), so the cast uses the whole range.
// 2. float8_linear's forward and both gradients equal the same products
//    computed here independently — operands quantised by hand (scale,
//    clamp, cast, back to fp32, unscale) and multiplied in fp64 — to fp32
//    rounding: this checks that the kernel (at::_scaled_mm) is given the
//    right operands, layouts and scales.
// 3. Against plain fp32 the error is float8's: e4m3 keeps 3 mantissa bits
//    (relative rounding up to 2^-4 per operand), e5m2 2 bits (2^-3).
//    Measured relative Frobenius errors (printed): y 3.75e-2, grad_x
//    5.85e-2, grad_W 6.19e-2 on N(0,1) data; bounds 6e-2 / 1.2e-1. Against
//    the hand-quantised products: <= 1.6e-7 (bound 1e-6).
// 4. Which layers convert: every block Linear, not the output projection.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>

#include "titan/models/llama3/transformer.hpp"
#include "titan/parallel/float8/float8_linear.hpp"
#include "titan/util/error.hpp"
#include "support/error_of.hpp"
#include "titan/verify/reference_run.hpp"

namespace {

using titan::float8::float8_linear;
using titan::float8::scale_tensorwise;

at::Tensor randn(uint64_t seed, std::vector<int64_t> shape, double scale = 1.0) {
  auto gen = at::detail::createCPUGenerator(seed);
  return (at::randn(shape, gen, at::TensorOptions().dtype(at::kDouble)) * scale).to(at::kFloat);
}

// Independent quantise-dequantise: what float8 keeps of t, in fp64.
at::Tensor through_float8(const at::Tensor& t, at::ScalarType dtype, double fmax) {
  const double amax = std::max(t.abs().max().item<double>(), 1e-12);
  const double scale = static_cast<float>(fmax / amax);  // fp32, as the kernel's scale
  return (t.to(at::kDouble) * scale).clamp(-fmax, fmax).to(at::kFloat).to(dtype).to(at::kDouble) / scale;
}

double rel(const at::Tensor& a, const at::Tensor& ref) {
  return (a.to(at::kDouble) - ref.to(at::kDouble)).norm().item<double>() / ref.to(at::kDouble).norm().item<double>();
}

TEST(Float8, TensorwiseScalingUsesTheWholeRange) {
  at::Tensor x = randn(1, {64, 32}, 3.0);
  auto q = scale_tensorwise(x, at::kFloat8_e4m3fn);
  EXPECT_EQ(q.data.scalar_type(), at::kFloat8_e4m3fn);
  EXPECT_FLOAT_EQ(q.data.to(at::kFloat).abs().max().item<float>(), 448.0f);
  auto g = scale_tensorwise(x * 1e-6, at::kFloat8_e5m2);  // tiny gradients still use the range
  EXPECT_FLOAT_EQ(g.data.to(at::kFloat).abs().max().item<float>(), 57344.0f);
  auto z = scale_tensorwise(at::zeros({4}), at::kFloat8_e4m3fn);
  EXPECT_TRUE(std::isfinite(z.scale.item<float>()));
}

TEST(Float8, LinearEqualsHandQuantisedProductsAndIsWithinFloat8OfFp32) {
  const int64_t n = 48, in = 64, out = 32;
  at::Tensor x = randn(2, {3, n / 3, in}).requires_grad_(true);
  at::Tensor w = randn(3, {out, in}, 0.05).requires_grad_(true);
  at::Tensor gy = randn(4, {3, n / 3, out});
  at::Tensor y = float8_linear(x, w);
  y.backward(gy);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{3, n / 3, out}));

  // The same products with the operands float8 keeps, in fp64.
  at::Tensor x2 = x.detach().reshape({n, in}), g2 = gy.reshape({n, out});
  at::Tensor xq = through_float8(x2, at::kFloat8_e4m3fn, 448), wq = through_float8(w.detach(), at::kFloat8_e4m3fn, 448);
  at::Tensor gq = through_float8(g2, at::kFloat8_e5m2, 57344);
  at::Tensor y_hand = at::matmul(xq, wq.t()).view({3, n / 3, out});
  at::Tensor gx_hand = at::matmul(gq, wq).view({3, n / 3, in});
  at::Tensor gw_hand = at::matmul(gq.t(), xq);
  const double e_y = rel(y, y_hand), e_gx = rel(x.grad(), gx_hand), e_gw = rel(w.grad(), gw_hand);

  // Against plain fp32.
  at::Tensor xr = x.detach().clone().requires_grad_(true), wr = w.detach().clone().requires_grad_(true);
  at::Tensor yr = at::linear(xr, wr);
  yr.backward(gy);
  const double f_y = rel(y, yr), f_gx = rel(x.grad(), xr.grad()), f_gw = rel(w.grad(), wr.grad());
  std::printf("[measured] float8 vs hand-quantised products: y %.2g, grad_x %.2g, grad_W %.2g\n", e_y, e_gx, e_gw);
  std::printf("[measured] float8 vs fp32 (relative Frobenius): y %.3g, grad_x %.3g, grad_W %.3g\n", f_y, f_gx, f_gw);
  EXPECT_LT(e_y, 1e-6);
  EXPECT_LT(e_gx, 1e-6);
  EXPECT_LT(e_gw, 1e-6);
  EXPECT_LT(f_y, 6e-2);
  EXPECT_LT(f_gx, 1.2e-1);
  EXPECT_LT(f_gw, 1.2e-1);
  EXPECT_GT(f_y, 1e-3) << "no float8 rounding seen: is the float8 path running at all?";
}

TEST(Float8, ConvertsTheBlockLinearsButNotTheOutput) {
  titan::verify::RunSpec spec;
  titan::models::llama3::Transformer model = titan::verify::build_model(spec, 1);
  const auto names = titan::float8::convert_to_float8_training(*model);
  // 2 layers x (wq wk wv wo w1 w2 w3); dims 64 / 32 / 128 / 192 divide by 16.
  EXPECT_EQ(names.size(), 14u);
  for (const auto& n : names) EXPECT_EQ(n.find("output"), std::string::npos) << n;
  // And the model still trains: a forward and backward run through it.
  const auto mb = titan::verify::local_micro_batches(spec, 1, 0, 1).front();
  at::Tensor logits = model->forward(mb.inputs);
  logits.sum().backward();
  EXPECT_TRUE(model->blocks()[0]->attention->wq->weight.grad().defined());
}



// ---- the rowwise recipe (torchao's recipe_name = "rowwise")
//
// Measured on N(0,1) data (printed): against the hand-quantised fp64
// products <= 7.8e-9 (bound 1e-6: fp32 summation order of the emulated
// GEMM); against fp32 (relative Frobenius) y 3.8e-2, grad_x 3.8e-2,
// grad_W 4.0e-2 (bounds 6e-2: e4m3 everywhere, so the gradients are more
// precise than tensorwise's e5m2 ones, 5.9e-2 / 6.2e-2).
namespace rowwise {

using titan::float8::float8_linear_rowwise;
using titan::float8::scale_axiswise;

// Independent rowwise quantise-dequantise in fp64: one power-of-two scale
// per slice along `dim`.
at::Tensor through_e4m3(const at::Tensor& t, int64_t dim) {
  at::Tensor d = t.to(at::kDouble);
  at::Tensor amax = d.abs().amax({dim}, true).clamp_min(1e-12);
  at::Tensor scale = at::exp2(at::floor(at::log2(448.0 / amax)));
  return (d * scale).clamp(-448, 448).to(at::kFloat).to(at::kFloat8_e4m3fn).to(at::kDouble) / scale;
}

TEST(Float8Rowwise, ScalesArePowersOfTwoPerRow) {
  at::Tensor x = randn(5, {64, 32}) * at::exp2(at::arange(64, at::kFloat).reshape({64, 1}) / 4 - 8);
  auto q = scale_axiswise(x, at::kFloat8_e4m3fn, 1);
  ASSERT_EQ(q.scale.sizes(), (std::vector<int64_t>{64, 1}));
  at::Tensor l = at::log2(q.scale);
  EXPECT_TRUE(at::equal(l, at::round(l))) << "scales are not powers of two";
  // The largest element of each row lands in [224, 448]: at most one
  // binade lost to the rounding down of the scale.
  at::Tensor row_max = q.data.to(at::kFloat).abs().amax({1});
  EXPECT_GE(row_max.min().item<float>(), 224.0f);
  EXPECT_LE(row_max.max().item<float>(), 448.0f);
}

TEST(Float8Rowwise, LinearEqualsHandQuantisedProductsAndIsWithinFloat8OfFp32) {
  const int64_t n = 48, in = 64, out = 32;
  at::Tensor x = randn(2, {3, n / 3, in}).requires_grad_(true);
  at::Tensor w = randn(3, {out, in}, 0.05).requires_grad_(true);
  at::Tensor gy = randn(4, {3, n / 3, out});
  at::Tensor y = float8_linear_rowwise(x, w);
  y.backward(gy);

  at::Tensor x2 = x.detach().reshape({n, in}), g2 = gy.reshape({n, out}), wd = w.detach();
  at::Tensor y_hand = at::matmul(through_e4m3(x2, 1), through_e4m3(wd, 1).t()).view({3, n / 3, out});
  at::Tensor gx_hand = at::matmul(through_e4m3(g2, 1), through_e4m3(wd, 0)).view({3, n / 3, in});
  at::Tensor gw_hand = at::matmul(through_e4m3(g2, 0).t(), through_e4m3(x2, 0));
  const double e_y = rel(y, y_hand), e_gx = rel(x.grad(), gx_hand), e_gw = rel(w.grad(), gw_hand);

  at::Tensor xr = x.detach().clone().requires_grad_(true), wr = w.detach().clone().requires_grad_(true);
  at::Tensor yr = at::linear(xr, wr);
  yr.backward(gy);
  const double f_y = rel(y, yr), f_gx = rel(x.grad(), xr.grad()), f_gw = rel(w.grad(), wr.grad());
  std::printf("[measured] rowwise vs hand-quantised products: y %.2g, grad_x %.2g, grad_W %.2g\n", e_y, e_gx, e_gw);
  std::printf("[measured] rowwise vs fp32 (relative Frobenius): y %.3g, grad_x %.3g, grad_W %.3g\n", f_y, f_gx, f_gw);
  EXPECT_LT(e_y, 1e-6);
  EXPECT_LT(e_gx, 1e-6);
  EXPECT_LT(e_gw, 1e-6);
  EXPECT_LT(f_y, 6e-2);
  EXPECT_LT(f_gx, 6e-2);
  EXPECT_LT(f_gw, 6e-2);
  EXPECT_GT(f_y, 1e-3) << "no float8 rounding seen";
}

TEST(Float8Rowwise, KeepsSmallRowsThatTensorwiseFlushes) {
  // One token 2^16 times larger than the rest: tensorwise scales the whole
  // x by its amax, which pushes the other rows below e4m3's smallest
  // normal (2^-6), where few bits are left; rowwise scales each row by its
  // own. Measured (printed): tensorwise 0.17, rowwise 3.9e-2.
  at::Tensor x = randn(6, {32, 64});
  x[0] *= 65536;
  at::Tensor w = randn(7, {32, 64}, 0.05);
  at::Tensor ref = at::linear(x, w).narrow(0, 1, 31);
  const double tw = rel(float8_linear(x, w).narrow(0, 1, 31), ref);
  const double rw = rel(float8_linear_rowwise(x, w).narrow(0, 1, 31), ref);
  std::printf("[measured] rows beside an outlier row, error vs fp32: tensorwise %.3g, rowwise %.3g\n", tw, rw);
  EXPECT_LT(rw, 5e-2);
  EXPECT_GT(tw, 3 * rw);
}

TEST(Float8Rowwise, TrainsWithinBoundOfFp32) {
  // The tiny Llama, 10 AdamW steps (lr 1e-3): fp32 against both recipes.
  // Measured max |dloss| over the steps (printed): tensorwise 9.7e-5,
  // rowwise 2.7e-4; bound 3e-3.
  titan::verify::RunSpec spec;
  spec.steps = 10;
  const titan::verify::Trajectory ref = titan::verify::train_reference(spec);
  auto run = [&](titan::float8::Recipe recipe) {
    titan::models::llama3::Transformer model = titan::verify::build_model(spec, spec.model_seed);
    titan::float8::Float8Options o;
    o.recipe = recipe;
    titan::float8::convert_to_float8_training(*model, o);
    auto opt = titan::verify::build_optimizer(spec, model->parameters());
    double worst = 0;
    for (const auto& d : titan::verify::compare(ref, titan::verify::run_steps(spec, model, *opt, 0, 1), {0, 0}, {0, 0}))
      worst = std::max(worst, d.loss);
    return worst;
  };
  const double tw = run(titan::float8::Recipe::Tensorwise), rw = run(titan::float8::Recipe::Rowwise);
  std::printf("[measured] 10 steps, max |dloss| vs fp32: tensorwise %.3g, rowwise %.3g\n", tw, rw);
  EXPECT_LT(rw, 3e-3);
  EXPECT_GT(rw, 0.0);
}

TEST(Float8Rowwise, RecipeNamesAndCombinationsAreChecked) {
  EXPECT_EQ(titan::float8::recipe_from_name("rowwise"), titan::float8::Recipe::Rowwise);
  EXPECT_EQ(titan::float8::recipe_from_name("tensorwise"), titan::float8::Recipe::Tensorwise);
  using titan::testing::error_of;
  const std::string e = error_of([] { titan::float8::recipe_from_name("rowwise_with_gw_hp"); });
  EXPECT_NE(e.find("not one of \"tensorwise\", \"rowwise\""), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  titan::verify::RunSpec spec;
  titan::models::llama3::Transformer model = titan::verify::build_model(spec, 1);
  titan::float8::Float8Options o;
  o.recipe = titan::float8::Recipe::Rowwise;
  o.fsdp_float8_all_gather = true;
  const std::string ag = error_of([&] { titan::float8::convert_to_float8_training(*model, o); });
  EXPECT_NE(ag.find("needs recipe_name \"tensorwise\""), std::string::npos) << ag;
}

}  // namespace rowwise
}  // namespace

// On CUDA, _scaled_mm needs grad_W's K, the token count, to be a
// multiple of 16; the float8 Linear says so in one line naming a batch x seq
// that fits, instead of failing inside cuBLAS in backward. (The check runs on
// CUDA only; its message is pure arithmetic, tested here.)
// A GPU below compute capability 8.9 (an A100 is 8.0) has no float8 tensor
// cores: the trainer refuses it in one line naming [float8] emulate, which
// lifts the refusal; Ada (8.9) and Hopper (9.0) pass.
TEST(Float8, GpusWithoutFloat8TensorCoresNeedEmulate) {
  using titan::float8::float8_gpu_error;
  const std::string e = float8_gpu_error("NVIDIA A100-SXM4-80GB", 8, 0, /*emulate=*/false);
  EXPECT_NE(e.find("compute capability 8.9 or later"), std::string::npos) << e;
  EXPECT_NE(e.find("NVIDIA A100-SXM4-80GB is 8.0"), std::string::npos) << e;
  EXPECT_NE(e.find("[float8] emulate = true"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_EQ(float8_gpu_error("NVIDIA A100-SXM4-80GB", 8, 0, /*emulate=*/true), "");
  EXPECT_EQ(float8_gpu_error("NVIDIA L4", 8, 9, false), "");
  EXPECT_EQ(float8_gpu_error("NVIDIA H200", 9, 0, false), "");
  EXPECT_EQ(float8_gpu_error("NVIDIA B200", 10, 0, false), "");
}

// [float8] emulate reaches the GEMMs: the conversion sets the process-wide
// switch from its options. On the CPU the GEMMs are the emulation already,
// so values and gradients are bitwise those without it (on a GPU the
// difference is the tensor cores' accumulation: scripts/gpu_check.sh's
// float8_emulated step).
TEST(Float8, EmulateIsSetByTheConversionAndIsTheCpuPath) {
  using titan::float8::emulated_gemms;
  titan::verify::RunSpec spec;
  titan::float8::Float8Options o;
  o.emulate = true;
  titan::float8::convert_to_float8_training(*titan::verify::build_model(spec, 1), o);
  EXPECT_TRUE(emulated_gemms());
  const at::Tensor x = randn(5, {32, 64}), w = randn(6, {48, 64});
  auto run = [&] {
    const at::Tensor xg = x.clone().requires_grad_(), wg = w.clone().requires_grad_();
    const at::Tensor y = float8_linear(xg, wg);
    y.backward(randn(7, {32, 48}));
    return std::vector<at::Tensor>{y.detach(), xg.grad(), wg.grad()};
  };
  const std::vector<at::Tensor> emulated = run();
  titan::float8::set_emulated_gemms(false);
  const std::vector<at::Tensor> plain = run();
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(emulated[i].equal(plain[i])) << i;
  titan::float8::convert_to_float8_training(*titan::verify::build_model(spec, 1), titan::float8::Float8Options{});
  EXPECT_FALSE(emulated_gemms());
}

TEST(Float8, TokenCountNotAMultipleOf16IsOneLineNamingAFit) {
  using titan::float8::float8_token_count_error;
  EXPECT_EQ(float8_token_count_error({2, 2048, 256}), "");
  EXPECT_EQ(float8_token_count_error({16, 256}), "");
  EXPECT_EQ(float8_token_count_error({1, 16, 64}), "");
  const std::string e = float8_token_count_error({2, 100, 256});
  EXPECT_NE(e.find("multiple of 16"), std::string::npos) << e;
  EXPECT_NE(e.find("[2, 100, 256] has 200 tokens"), std::string::npos) << e;
  // 2 x 104 = 208 = 13 x 16; 4 x 100 = 400 = 25 x 16.
  EXPECT_NE(e.find("batch x seq that fit: 2 x 104 or 4 x 100"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  const std::string odd = float8_token_count_error({3, 7, 32});  // 3 x 16 = 48; 16 x 7 = 112
  EXPECT_NE(odd.find("3 x 16 or 16 x 7"), std::string::npos) << odd;
  EXPECT_NE(float8_token_count_error({7, 32}).find("has 7 tokens"), std::string::npos);
}
