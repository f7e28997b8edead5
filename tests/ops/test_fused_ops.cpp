// The fused ops against the op-by-op versions they replace and against
// float64 ("truth"): forward values and every gradient, in float32 and
// bfloat16, on shapes whose rows are not a multiple of the vector width.
// On the CPU by default; TITAN_TEST_DEVICE=cuda runs the same checks on a
// GPU (scripts/gpu_check.sh), where SwiGLU and RoPE are titan's CUDA
// kernels and RMSNorm is at::rms_norm.
//
// The bound on a fused result is its own error against truth next to the
// op-by-op version's error in the same dtype: a fused kernel may round
// differently but not worse (<= 2x the op-by-op error, plus a floor for
// results the op-by-op version happens to get exact, such as RoPE's
// gradient). Each test prints the errors it saw. Measured on AMD EPYC
// (AVX2): the worst fp32 fused error is 3.1e-7 (RMSNorm's weight gradient,
// a sum over rows in another order; 1.3e-7 op by op); on the H200 5.0e-7
// (the CUDA cross-entropy kernel's gradient, exp(x − lse) with lse rounded
// to fp32, against 1.0e-7 op by op). In bf16 fused and op-by-op are the
// same bf16 rounding (<= 8.7e-3).

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "models/test_util.hpp"
#include "titan/models/llama3/transformer.hpp"
#include "titan/ops/chunked_cross_entropy.hpp"
#include "titan/ops/cross_entropy.hpp"
#include "titan/ops/fused/fused_ops.hpp"
#include "titan/ops/rope.hpp"
#include "titan/util/error.hpp"

using namespace titan::ops;

namespace {

// The device under test: TITAN_TEST_DEVICE (cpu or cuda), default cpu.
at::Device test_device() {
  const char* d = std::getenv("TITAN_TEST_DEVICE");
  return at::Device(d && std::string(d) == "cuda" ? at::kCUDA : at::kCPU);
}

constexpr double kFp32Floor = 1e-6;  // 2x the worst fp32 error measured
constexpr double kBf16Floor = 1e-3;  // bf16 errors are bounded by 2x op-by-op's (~4e-3 .. 9e-3)

// max |a − b| / max |b|, in double.
double rel_err(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor bd = b.to(at::kDouble);
  const double scale = bd.abs().max().item<double>();
  return (a.to(at::kDouble) - bd).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

// One op's forward and the gradients of every input, for a fixed upstream
// gradient: f(inputs) → output; returns {output, grad_0, grad_1, ...}.
using Op = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

std::vector<at::Tensor> run(const Op& op, const std::vector<at::Tensor>& inputs, const at::Tensor& upstream,
                            at::ScalarType dtype) {
  std::vector<at::Tensor> in;
  for (const auto& t : inputs) in.push_back(t.to(test_device(), dtype).detach().requires_grad_(true));
  at::Tensor out = op(in);
  out.backward(upstream.to(out.device(), out.scalar_type()));
  std::vector<at::Tensor> r{out.detach()};
  for (const auto& t : in) r.push_back(t.grad());
  return r;
}

// Compares fused and op-by-op in `dtype` against the op-by-op version in
// float64; `floor` is the error a fused result may always have.
void compare(const std::string& what, const Op& fused, const Op& reference, const std::vector<at::Tensor>& inputs,
             const at::Tensor& upstream, at::ScalarType dtype, double floor) {
  std::vector<at::Tensor> before;
  for (const auto& t : inputs) before.push_back(t.clone());
  const auto truth = run(reference, inputs, upstream, at::kDouble);
  // In float32 the op sees the caller's own tensors (.to is a no-op): it
  // must leave them as they were, forward and backward.
  const auto f = run(fused, inputs, upstream, dtype);
  for (size_t i = 0; i < inputs.size(); ++i) EXPECT_TRUE(inputs[i].equal(before[i])) << what << ": input " << i << " changed";
  const auto r = run(reference, inputs, upstream, dtype);
  const char* names[] = {"out", "grad 0", "grad 1", "grad 2"};
  for (size_t i = 0; i < truth.size(); ++i) {
    const double ef = rel_err(f[i], truth[i]), er = rel_err(r[i], truth[i]);
    std::printf("%-34s %-5s %-6s fused %.2e  op-by-op %.2e  (vs float64)\n", what.c_str(),
                dtype == at::kFloat ? "fp32" : "bf16", names[i], ef, er);
    EXPECT_EQ(f[i].scalar_type(), r[i].scalar_type()) << what << " " << names[i];
    EXPECT_LE(ef, 2.0 * er + floor) << what << " " << names[i];
  }
}

Op rms_fused(double eps) {
  return [eps](const std::vector<at::Tensor>& in) { return fused_rms_norm(in[0], in[1], eps); };
}
Op rms_reference(double eps) {
  return [eps](const std::vector<at::Tensor>& in) { return at::rms_norm(in[0], {in[0].size(-1)}, in[1], eps); };
}

}  // namespace

// Measured: fp32 out 1.4e-7 fused vs 1.4e-7 op by op, dx 1.2e-7 vs 1.0e-7,
// dweight 3.1e-7 vs 1.3e-7 (a sum over rows in another order).
TEST(FusedRmsNorm, MatchesAtenRmsNormAndFloat64) {
  torch::manual_seed(0);
  for (int64_t dim : {37, 256}) {
    const at::Tensor x = torch::randn({3, 11, dim}) * 2.0, w = torch::rand({dim}) + 0.5;
    const at::Tensor up = torch::randn({3, 11, dim});
    for (auto dtype : {at::kFloat, at::kBFloat16})
      compare("rms_norm dim " + std::to_string(dim), rms_fused(1e-5), rms_reference(1e-5), {x, w}, up, dtype,
              dtype == at::kFloat ? kFp32Floor : kBf16Floor);
  }
}

// The weight's gradient is a sum over rows; its order depends on the row
// count only, so 1 thread and 2 give the same bits (the kill-loop test
// relies on bitwise repeatable training).
TEST(FusedRmsNorm, WeightGradientIsTheSameBitsOnOneThreadAndTwo) {
  torch::manual_seed(1);
  const at::Tensor x0 = torch::randn({517, 96}), w0 = torch::rand({96}) + 0.5, up = torch::randn({517, 96});
  auto grad_w = [&](int threads) {
    const int before = at::get_num_threads();
    at::set_num_threads(threads);
    at::Tensor w = w0.clone().requires_grad_(true);
    fused_rms_norm(x0, w, 1e-5).backward(up);
    at::set_num_threads(before);
    return w.grad();
  };
  EXPECT_TRUE(grad_w(1).equal(grad_w(2)));
}

TEST(FusedRmsNorm, OtherDtypesTakeAtenRmsNorm) {
  const at::Tensor x = torch::randn({4, 8}, torch::kDouble), w = torch::rand({8}, torch::kDouble);
  EXPECT_TRUE(fused_rms_norm(x, w, 1e-6).equal(at::rms_norm(x, {8}, w, 1e-6)));
}

// Measured: the same errors as op by op in fp32 (7.9e-8, 1.6e-7, 6.1e-8).
TEST(Swiglu, MatchesSiluTimesAndFloat64) {
  torch::manual_seed(2);
  const at::Tensor a = torch::randn({5, 2051}) * 3.0, b = torch::randn({5, 2051});
  const at::Tensor up = torch::randn({5, 2051});
  Op fused = [](const std::vector<at::Tensor>& in) { return swiglu(in[0], in[1]); };
  Op reference = [](const std::vector<at::Tensor>& in) { return at::silu(in[0]) * in[1]; };
  for (auto dtype : {at::kFloat, at::kBFloat16})
    compare("swiglu", fused, reference, {a, b}, up, dtype, dtype == at::kFloat ? kFp32Floor : kBf16Floor);
}

// Shared tables [seq, half] and per-sequence ones [batch, seq, half]
// (document masking); backward is the rotation by minus the angle.
TEST(FusedRope, MatchesApplyRopeAndFloat64) {
  torch::manual_seed(3);
  const int64_t batch = 2, seq = 7, heads = 3, hd = 18;
  const RopeTable t = make_rope_table(hd, 16, 10000.0, RopeScaling{}, test_device());
  const at::Tensor x = torch::randn({batch, seq, heads, hd}), up = torch::randn({batch, seq, heads, hd});
  const at::Tensor pos =
      torch::tensor({0, 1, 2, 0, 1, 2, 3, 5, 6, 7, 8, 9, 0, 1}, torch::kLong).view({batch, seq}).to(test_device());
  const at::Tensor cos_seq = t.cos.index_select(0, pos.flatten()).view({batch, seq, -1});
  const at::Tensor sin_seq = t.sin.index_select(0, pos.flatten()).view({batch, seq, -1});
  for (bool per_sequence : {false, true}) {
    const at::Tensor c = per_sequence ? cos_seq : t.cos.narrow(0, 0, seq);
    const at::Tensor s = per_sequence ? sin_seq : t.sin.narrow(0, 0, seq);
    Op fused = [&](const std::vector<at::Tensor>& in) { return fused_rope(in[0], c, s); };
    Op reference = [&](const std::vector<at::Tensor>& in) {
      return apply_rope(in[0], c.to(in[0].scalar_type() == at::kDouble ? at::kDouble : at::kFloat),
                        s.to(in[0].scalar_type() == at::kDouble ? at::kDouble : at::kFloat));
    };
    for (auto dtype : {at::kFloat, at::kBFloat16})
      compare(per_sequence ? "rope, per-sequence tables" : "rope", fused, reference, {x}, up, dtype,
              dtype == at::kFloat ? kFp32Floor : kBf16Floor);
  }
  EXPECT_THROW(fused_rope(x.to(test_device()), t.cos, t.sin), titan::Error);  // table of 16 rows for 7 positions
}

// Σx² against a float64 sum: the fp32 squares and 32-value partials leave
// a relative error of 1.3e-10 on 1M values (ATen's fp32 sum: 2.8e-8); two
// shards' sums add up to the whole tensor's within 1.4e-10; bf16 2.5e-9.
TEST(SumOfSquares, AsAccurateAsADoubleSum) {
  torch::manual_seed(4);
  const at::Tensor x = torch::randn({1000003}) * 0.01;
  const double truth = x.to(at::kDouble).square().sum().item<double>();
  const double got = sum_of_squares(x);
  const double shards = sum_of_squares(x.narrow(0, 0, 333331)) + sum_of_squares(x.narrow(0, 333331, 666672));
  const double fp32 = x.square().sum().item<double>();
  std::printf("sum_of_squares rel err %.2e, shards vs whole %.2e, ATen fp32 sum %.2e\n",
              std::abs(got - truth) / truth, std::abs(shards - got) / truth, std::abs(fp32 - truth) / truth);
  EXPECT_LT(std::abs(got - truth) / truth, 1e-9);
  EXPECT_LT(std::abs(shards - got) / truth, 1e-9);
  const at::Tensor xb = x.to(at::kBFloat16);
  const double truth_b = xb.to(at::kDouble).square().sum().item<double>();
  const double err_b = std::abs(sum_of_squares(xb) - truth_b) / truth_b;
  std::printf("sum_of_squares bf16 rel err %.2e\n", err_b);
  EXPECT_LT(err_b, 1e-8);
  EXPECT_EQ(sum_of_squares(x.to(at::kDouble)), truth);
}

// Chunks of 5 rows (so the 37 rows take 8 chunks, the last short), with
// ignored targets; Sum and Mean; fp32 and bf16 logits. On the CPU each chunk
// is ATen's log_softmax, so the gradient is bitwise the one-piece loss's.
TEST(ChunkedCrossEntropy, MatchesCrossEntropyAndFloat64) {
  torch::manual_seed(5);
  const at::Tensor logits = torch::randn({1, 37, 301}) * 4.0;
  at::Tensor labels = torch::randint(0, 301, {1, 37}, torch::kLong);
  labels.index_put_({0, torch::tensor({3, 4, 20})}, kIgnoreIndex);
  labels = labels.to(test_device());
  for (auto reduction : {LossReduction::Sum, LossReduction::Mean}) {
    const bool sum = reduction == LossReduction::Sum;
    Op fused = [&](const std::vector<at::Tensor>& in) { return chunked_cross_entropy(in[0], labels, reduction, 5); };
    Op reference = [&](const std::vector<at::Tensor>& in) {
      const int64_t how = sum ? at::Reduction::Sum : at::Reduction::Mean;
      return at::cross_entropy_loss(in[0].flatten(0, 1).to(in[0].scalar_type() == at::kDouble ? at::kDouble
                                                                                             : at::kFloat),
                                    labels.flatten(), {}, how, kIgnoreIndex);
    };
    for (auto dtype : {at::kFloat, at::kBFloat16})
      compare(std::string("chunked cross-entropy, ") + (sum ? "sum" : "mean"), fused, reference, {logits},
              torch::tensor(1.0), dtype, dtype == at::kFloat ? kFp32Floor : kBf16Floor);
  }
  // Ignored rows get no gradient; on the CPU the gradient is the same bits
  // as cross_entropy's.
  at::Tensor l = logits.to(test_device()).clone().requires_grad_(true);
  chunked_cross_entropy(l, labels, LossReduction::Sum, 5).backward();
  EXPECT_TRUE(l.grad()[0][3].eq(0).all().item<bool>());
  if (test_device().is_cpu()) {
    at::Tensor one_piece = logits.clone().requires_grad_(true);
    cross_entropy(one_piece, labels, LossReduction::Sum).backward();
    EXPECT_TRUE(l.grad().equal(one_piece.grad()));
  }
  // No counted target: Mean is NaN (torch's), Sum a zero with a graph.
  const at::Tensor none = torch::full({1, 37}, kIgnoreIndex, torch::kLong).to(test_device());
  EXPECT_TRUE(std::isnan(chunked_cross_entropy(logits.to(test_device()), none).item<double>()));
  at::Tensor l2 = logits.to(test_device()).clone().requires_grad_(true);
  at::Tensor zero = chunked_cross_entropy(l2, none, LossReduction::Sum);
  EXPECT_EQ(zero.item<double>(), 0.0);
  zero.backward();
  EXPECT_TRUE(l2.grad().eq(0).all().item<bool>());
  EXPECT_THROW(chunked_cross_entropy(logits, labels.view({37, 1})), titan::Error);
}

// The whole model with fused_kernels on and off: the same loss and
// gradients to rounding (measured: loss 8.8e-8, gradients <= 4.8e-7
// relative), in float32 on the tiny GQA model. A norm eps of 1e-6 instead
// of 1e-5 moves gradients by ~5e-6: the bounds below let it through no more.
TEST(FusedKernelsInTheModel, SameLossAndGradientsAsOpByOp) {
  auto loss_and_grads = [](bool fused, double norm_eps = 1e-5) {
    titan::models::llama3::ModelArgs a = titan::testing::tiny_args();
    a.fused_kernels = fused;
    a.norm_eps = norm_eps;
    titan::models::llama3::Transformer model(a);
    torch::manual_seed(6);
    model->init_weights();
    model->to(test_device());
    torch::manual_seed(7);
    const at::Tensor tokens = torch::randint(0, a.vocab_size, {2, 17}, torch::kLong).to(test_device());
    const at::Tensor labels = torch::randint(0, a.vocab_size, {2, 17}, torch::kLong).to(test_device());
    const at::Tensor logits = model->forward(tokens);
    at::Tensor loss = fused ? chunked_cross_entropy(logits, labels) : cross_entropy(logits, labels);
    loss.backward();
    std::vector<at::Tensor> r{loss.detach()};
    for (const auto& p : model->parameters()) r.push_back(p.grad());
    return r;
  };
  auto worst_gradient = [](const std::vector<at::Tensor>& f, const std::vector<at::Tensor>& r) {
    double worst = 0.0;
    for (size_t i = 1; i < f.size(); ++i) worst = std::max(worst, rel_err(f[i], r[i]));
    return worst;
  };
  const auto f = loss_and_grads(true), r = loss_and_grads(false);
  const double worst = worst_gradient(f, r), loss_err = rel_err(f[0], r[0]);
  // The check's power: the same comparison with the fused model's eps 1e-6.
  const double wrong_eps = worst_gradient(loss_and_grads(true, 1e-6), r);
  std::printf("model: loss rel diff %.2e, worst gradient rel diff %.2e over %zu tensors (%.2e with eps 1e-6)\n",
              loss_err, worst, f.size() - 1, wrong_eps);
  EXPECT_LT(loss_err, 5e-7);
  EXPECT_LT(worst, 2e-6);
  EXPECT_GT(wrong_eps, 2e-6);
}
