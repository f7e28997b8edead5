// The zero-bubble split backward (parallel/pipeline/split_backward.hpp):
// I then W give exactly the gradients of one whole backward, and no node on
// the way to the input runs twice — checked with a node that counts its
// backward calls, on a graph shaped like a stage (matmuls, a norm-like
// multiply by a weight) and on one whose weights come out of a single
// node, as FSDP's UnshardBackward ends every weight edge of a unit; and
// through activation-checkpointed parts, whose weights only the recompute
// inside their node reaches: I must leave them to W as well.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cstdio>

#include "titan/parallel/activation_checkpoint/checkpoint.hpp"
#include "titan/parallel/pipeline/split_backward.hpp"

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Identity forward; counts its backward calls (it sits on the input path).
int g_identity_backwards = 0;
struct CountingIdentity : torch::autograd::Function<CountingIdentity> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& x) { return x.clone(); }
  static variable_list backward(AutogradContext*, variable_list g) {
    ++g_identity_backwards;
    return {g[0]};
  }
};

// One flat tensor in, its two halves out as separate weights: one backward
// node feeds both weights, as FSDP's UnshardBackward feeds a unit's.
struct Unflatten : torch::autograd::Function<Unflatten> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& flat, int64_t rows, int64_t cols) {
    ctx->saved_data["rows"] = rows;
    ctx->saved_data["cols"] = cols;
    const int64_t n = rows * cols;
    return {flat.narrow(0, 0, n).view({rows, cols}).clone(), flat.narrow(0, n, cols).clone()};
  }
  static variable_list backward(AutogradContext*, variable_list g) {
    return {at::cat({g[0].reshape({-1}), g[1].reshape({-1})}), at::Tensor(), at::Tensor()};
  }
};

struct Weights {
  at::Tensor w1, w2, w3;
};

// input [4, 8] → x·w1ᵀ → counted identity → · w2 (a norm's scale) → x·w3ᵀ → output [4, 8].
at::Tensor stage(const at::Tensor& input, const at::Tensor& w1, const at::Tensor& w2, const at::Tensor& w3) {
  at::Tensor h = at::matmul(input, w1.t());
  h = CountingIdentity::apply(h);
  h = h * w2;
  return at::matmul(at::tanh(h), w3.t());
}

double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

TEST(SplitBackward, InputThenWeightsEqualsOneBackwardAndRunsNothingTwice) {
  at::manual_seed(0);
  const at::Tensor x0 = at::randn({4, 8}), g = at::randn({4, 8});
  const at::Tensor w10 = at::randn({8, 8}), w20 = at::randn({8}), w30 = at::randn({8, 8});

  // Reference: one whole backward.
  auto leaf = [](const at::Tensor& t) { return t.clone().requires_grad_(true); };
  at::Tensor x = leaf(x0), w1 = leaf(w10), w2 = leaf(w20), w3 = leaf(w30);
  g_identity_backwards = 0;
  torch::autograd::backward({stage(x, w1, w2, w3)}, {g});
  ASSERT_EQ(g_identity_backwards, 1);

  // Split: I, then W.
  at::Tensor xs = leaf(x0), v1 = leaf(w10), v2 = leaf(w20), v3 = leaf(w30);
  const at::Tensor out = stage(xs, v1, v2, v3);
  titan::pp::SplitBackward split(out, xs);
  EXPECT_EQ(split.boundary_nodes(), 3u);  // the two matmuls and the multiply by w2
  g_identity_backwards = 0;
  const at::Tensor dx = split.input_backward(g);
  EXPECT_EQ(g_identity_backwards, 1);
  for (const at::Tensor& w : {v1, v2, v3}) EXPECT_FALSE(w.grad().defined()) << "I computed a weight gradient";
  split.weight_backward();
  EXPECT_EQ(g_identity_backwards, 1) << "W ran a node of the input path again";

  const double d[] = {max_diff(dx, x.grad()), max_diff(v1.grad(), w1.grad()), max_diff(v2.grad(), w2.grad()),
                      max_diff(v3.grad(), w3.grad())};
  std::printf("  |dx| %.3g  |dw1| %.3g  |dw2| %.3g  |dw3| %.3g\n", d[0], d[1], d[2], d[3]);
  // The same kernels on the same values: bit for bit.
  for (double v : d) EXPECT_EQ(v, 0.0);
}

TEST(SplitBackward, WeightsFromOneNodeLikeFsdpsUnit) {
  at::manual_seed(1);
  const at::Tensor x0 = at::randn({4, 8}), g = at::randn({4, 8});
  const at::Tensor flat0 = at::randn({8 * 8 + 8}), w30 = at::randn({8, 8});
  auto leaf = [](const at::Tensor& t) { return t.clone().requires_grad_(true); };
  auto run = [&](const at::Tensor& x, const at::Tensor& flat, const at::Tensor& w3) {
    const variable_list w = Unflatten::apply(flat, 8, 8);
    return stage(x, w[0], w[1], w3);
  };
  at::Tensor x = leaf(x0), flat = leaf(flat0), w3 = leaf(w30);
  torch::autograd::backward({run(x, flat, w3)}, {g});

  at::Tensor xs = leaf(x0), fs = leaf(flat0), v3 = leaf(w30);
  titan::pp::SplitBackward split(run(xs, fs, v3), xs);
  g_identity_backwards = 0;
  const at::Tensor dx = split.input_backward(g);
  split.weight_backward();
  EXPECT_EQ(g_identity_backwards, 1) << "W ran a node of the input path again";
  EXPECT_EQ(max_diff(dx, x.grad()), 0.0);
  EXPECT_EQ(max_diff(fs.grad(), flat.grad()), 0.0);
  EXPECT_EQ(max_diff(v3.grad(), w3.grad()), 0.0);
}

// The same stage with its middle checkpointed (ac::checkpoint: the node's
// one edge is to its input; w2 and w3 are reached by its recompute only),
// and one checkpoint nested inside another's recompute.
TEST(SplitBackward, CheckpointedPartsLeaveTheirWeightsToW) {
  at::manual_seed(2);
  const at::Tensor x0 = at::randn({4, 8}), g = at::randn({4, 8});
  const at::Tensor w10 = at::randn({8, 8}), w20 = at::randn({8}), w30 = at::randn({8, 8});
  auto leaf = [](const at::Tensor& t) { return t.clone().requires_grad_(true); };
  for (const bool nested : {false, true}) {
    auto run = [&](const at::Tensor& input, const at::Tensor& w1, const at::Tensor& w2, const at::Tensor& w3) {
      const at::Tensor h = at::matmul(input, w1.t());
      auto tail = [w2, w3](const at::Tensor& t) { return at::matmul(at::tanh(CountingIdentity::apply(t) * w2), w3.t()); };
      if (!nested) return titan::ac::checkpoint(tail, h);
      return titan::ac::checkpoint([tail](const at::Tensor& t) { return titan::ac::checkpoint(tail, t * 1.0); }, h);
    };
    at::Tensor x = leaf(x0), w1 = leaf(w10), w2 = leaf(w20), w3 = leaf(w30);
    torch::autograd::backward({run(x, w1, w2, w3)}, {g});

    at::Tensor xs = leaf(x0), v1 = leaf(w10), v2 = leaf(w20), v3 = leaf(w30);
    titan::pp::SplitBackward split(run(xs, v1, v2, v3), xs);
    g_identity_backwards = 0;
    const at::Tensor dx = split.input_backward(g);
    EXPECT_EQ(g_identity_backwards, 1);
    for (const at::Tensor& w : {v1, v2, v3})
      EXPECT_FALSE(w.grad().defined()) << "I computed a weight gradient (nested " << nested << ")";
    split.weight_backward();
    EXPECT_EQ(g_identity_backwards, 1) << "W ran a node of the input path again (nested " << nested << ")";
    EXPECT_EQ(max_diff(dx, x.grad()), 0.0);
    for (const auto& [got, want] : {std::pair{v1, w1}, std::pair{v2, w2}, std::pair{v3, w3}}) {
      ASSERT_TRUE(got.grad().defined()) << "nested " << nested;
      EXPECT_EQ(max_diff(got.grad(), want.grad()), 0.0) << "nested " << nested;
    }
  }
}

}  // namespace
