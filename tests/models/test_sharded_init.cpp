// Sharded initialisation, on one process: every box of a parameter, made
// from the stream offset alone, equals the same box of the whole-tensor
// init bit for bit — for each recipe, for row, column and nested boxes,
// ragged normal_ tails, and for whole Llama 3 models cut as FSDP, TP and
// both would cut them, against init_weights() after manual_seed.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/utils.h>

#include <map>
#include <vector>

#include "titan/models/llama3/init_plan.hpp"
#include "titan/models/llama3/transformer.hpp"
#include "titan/ops/init.hpp"
#include "titan/util/error.hpp"

namespace {

using titan::ops::InitRecipe;

// Row ranges of torch.chunk (the rule FSDP and TP shard by): sizes
// ceil(n/k) and a shorter (or empty) last one.
std::vector<std::pair<int64_t, int64_t>> chunks(int64_t n, int64_t k) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const int64_t c = (n + k - 1) / k;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t b = std::min(n, i * c), e = std::min(n, (i + 1) * c);
    out.emplace_back(b, e - b);
  }
  return out;
}

// The box [r0, r0+h) x [c0, c0+w) of a 2-D (or [r0, r0+h) of a 1-D) tensor, made alone.
at::Tensor make_box(const std::vector<int64_t>& shape, int64_t r0, int64_t h, int64_t c0, int64_t w,
                    const InitRecipe& r, uint64_t first, titan::ops::RandomStream& stream) {
  std::vector<int64_t> local = shape, offsets(shape.size(), 0);
  local[0] = h, offsets[0] = r0;
  if (shape.size() == 2) local[1] = w, offsets[1] = c0;
  at::Tensor t = at::empty(local, at::TensorOptions().dtype(at::kFloat));
  titan::ops::init_box_(t, shape, offsets, r, first, stream);
  return t;
}

at::Tensor whole_slice(const at::Tensor& whole, int64_t r0, int64_t h, int64_t c0, int64_t w) {
  at::Tensor s = whole.narrow(0, r0, h);
  return whole.dim() == 2 ? s.narrow(1, c0, w) : s;
}

// A tensor initialised after another (so its first draw is not 0), then
// cut into every grid of boxes the layouts make: rows k ways (FSDP), columns
// m ways (row-wise TP), and both nested.
void expect_boxes_equal_whole(const std::vector<int64_t>& shape, const InitRecipe& r) {
  const uint64_t seed = 1234;
  const std::vector<int64_t> before_shape = {37, 5};  // 185 draws before ours
  const InitRecipe before = InitRecipe::trunc_normal(0.0, 0.02);
  torch::manual_seed(seed);
  at::Tensor a = at::empty(before_shape), whole = at::empty(shape);
  titan::ops::init_(a, before);
  titan::ops::init_(whole, r);
  const uint64_t first = titan::ops::init_draws(before, a.numel());
  const int64_t rows = shape[0], cols = shape.size() == 2 ? shape[1] : 1;
  int checked = 0;
  for (int64_t k : {1, 2, 3, 4, 7}) {
    for (int64_t m : shape.size() == 2 ? std::vector<int64_t>{1, 2, 3} : std::vector<int64_t>{1}) {
      titan::ops::RandomStream stream(seed);  // one rank's stream: boxes in increasing order
      for (auto [c0, w] : chunks(cols, m)) {
        for (auto [r0, h] : chunks(rows, k)) {
          if (h == 0 || w == 0) continue;
          titan::ops::RandomStream own(seed);  // a rank holding only this box
          const at::Tensor box = make_box(shape, r0, h, c0, w, r, first, own);
          ASSERT_TRUE(at::equal(box, whole_slice(whole, r0, h, c0, w)))
              << "shape " << at::IntArrayRef(shape) << " rows " << r0 << "+" << h << " cols " << c0 << "+" << w
              << ": max |diff| " << (box - whole_slice(whole, r0, h, c0, w)).abs().max().item<double>();
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 10);
}

TEST(ShardedInit, TruncNormalBoxesEqualTheWholeTensor) {
  expect_boxes_equal_whole({64, 48}, InitRecipe::trunc_normal(0.0, 0.02));
  expect_boxes_equal_whole({33, 17}, InitRecipe::trunc_normal(0.0, 0.5, -1.5, 1.5));
  expect_boxes_equal_whole({100}, InitRecipe::trunc_normal(0.0, 1.0));
}

TEST(ShardedInit, NormalBoxesEqualTheWholeTensorWithRaggedTails) {
  // normal_ draws in aligned blocks of 16 and, when numel % 16 != 0, 16
  // more for the last 16 elements: 64x48 is whole blocks, 33x17 = 561 and
  // 7x5 = 35 have ragged ends, 1-D 29 too.
  expect_boxes_equal_whole({64, 48}, InitRecipe::normal(0.0, 1.0));
  expect_boxes_equal_whole({33, 17}, InitRecipe::normal(0.5, 2.0));
  expect_boxes_equal_whole({7, 5}, InitRecipe::normal(0.0, 1.0));
  expect_boxes_equal_whole({29}, InitRecipe::normal(0.0, 1.0));
}

TEST(ShardedInit, OnesAndDrawCounts) {
  expect_boxes_equal_whole({10, 6}, InitRecipe::ones());
  EXPECT_EQ(titan::ops::init_draws(InitRecipe::ones(), 100), 0u);
  EXPECT_EQ(titan::ops::init_draws(InitRecipe::trunc_normal(0, 1), 100), 100u);
  EXPECT_EQ(titan::ops::init_draws(InitRecipe::normal(0, 1), 96), 96u);
  EXPECT_EQ(titan::ops::init_draws(InitRecipe::normal(0, 1), 100), 116u);
  EXPECT_THROW((void)titan::ops::init_draws(InitRecipe::normal(0, 1), 15), titan::Error);
}

TEST(ShardedInit, SeekingFarAheadAndBackMatchesDrawingThrough) {
  // Across many mt19937 twists (624 draws each), and back again.
  torch::manual_seed(7);
  at::Tensor through = at::empty({200000});
  through.uniform_(0.0, 1.0);
  titan::ops::RandomStream s(7);
  for (uint64_t at_ : {uint64_t{199000}, uint64_t{623}, uint64_t{624}, uint64_t{625}, uint64_t{0}, uint64_t{150001}}) {
    s.seek(at_);
    at::Tensor piece = at::empty({1000});
    piece.uniform_(0.0, 1.0, s.generator());
    s.consumed(static_cast<uint64_t>(piece.numel()));
    ASSERT_TRUE(at::equal(piece, through.narrow(0, static_cast<int64_t>(at_), piece.numel()))) << "at " << at_;
  }
}

// The whole model, cut as a layout cuts it, each "rank" walking the plan
// with its own stream, equals init_weights() after manual_seed, bitwise.
void expect_model_layout_equal(const titan::models::llama3::ModelArgs& args, int64_t fsdp, int64_t tp) {
  using namespace titan::models::llama3;
  const uint64_t seed = 42;
  torch::manual_seed(seed);
  Transformer model(args, at::TensorOptions().dtype(at::kFloat));
  model->init_weights();
  std::map<std::string, at::Tensor> whole;
  for (const auto& item : model->named_parameters()) whole[item.key()] = item.value().detach();
  const std::vector<ParamInit> plan = init_plan(args);
  ASSERT_EQ(plan.size(), whole.size());
  // TP cuts: column-wise (wq, wk, wv, w1, w3, output: dim 0), row-wise (wo,
  // w2: dim 1), the embedding by rows; norms whole. FSDP then cuts the
  // TP-local piece's rows.
  auto tp_dim = [](const std::string& fqn) -> int {
    for (const char* c : {"wq.", "wk.", "wv.", "w1.", "w3.", "output.", "tok_embeddings."})
      if (fqn.find(c) != std::string::npos) return 0;
    for (const char* r : {"wo.", "w2."})
      if (fqn.find(r) != std::string::npos) return 1;
    return -1;
  };
  int64_t boxes = 0;
  for (int64_t t = 0; t < tp; ++t) {
    for (int64_t f = 0; f < fsdp; ++f) {
      titan::ops::RandomStream stream(seed);
      uint64_t first = 0;
      for (const ParamInit& p : plan) {
        int64_t numel = 1;
        for (int64_t d : p.shape) numel *= d;
        std::vector<int64_t> offsets(p.shape.size(), 0), local = p.shape;
        const int d = tp_dim(p.fqn);
        if (d >= 0 && tp > 1) {
          auto [off, len] = chunks(p.shape[static_cast<size_t>(d)], tp)[static_cast<size_t>(t)];
          offsets[static_cast<size_t>(d)] = off, local[static_cast<size_t>(d)] = len;
        }
        auto [roff, rlen] = chunks(local[0], fsdp)[static_cast<size_t>(f)];
        offsets[0] += roff, local[0] = rlen;
        at::Tensor box = at::empty(local);
        titan::ops::init_box_(box, p.shape, offsets, p.recipe, first, stream);
        at::Tensor want = whole.at(p.fqn);
        for (size_t k = 0; k < offsets.size(); ++k) want = want.narrow(static_cast<int64_t>(k), offsets[k], local[k]);
        ASSERT_TRUE(at::equal(box, want)) << p.fqn << " fsdp rank " << f << " of " << fsdp << ", tp rank " << t
                                          << " of " << tp;
        ++boxes;
        first += titan::ops::init_draws(p.recipe, numel);
      }
    }
  }
  EXPECT_EQ(boxes, static_cast<int64_t>(plan.size()) * fsdp * tp);
}

titan::models::llama3::ModelArgs small_args() {
  titan::models::llama3::ModelArgs a;
  a.dim = 64, a.n_layers = 3, a.n_heads = 4, a.n_kv_heads = 2, a.vocab_size = 250, a.multiple_of = 16;
  a.max_seq_len = 32;
  return a;
}

TEST(ShardedInit, LlamaLayoutsEqualInitWeights) {
  for (auto [fsdp, tp] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 1}, {4, 1}, {3, 1}, {1, 2}, {1, 4}, {2, 2}})
    expect_model_layout_equal(small_args(), fsdp, tp);
}

TEST(ShardedInit, TiedEmbeddingsTakeTheOutputsInitAtItsPlace) {
  titan::models::llama3::ModelArgs a = small_args();
  a.tie_word_embeddings = true;
  expect_model_layout_equal(a, 2, 1);
  const auto plan = titan::models::llama3::init_plan(a);
  EXPECT_EQ(plan.back().fqn, "tok_embeddings.weight");
  EXPECT_EQ(plan.back().recipe.kind, InitRecipe::Kind::kTruncNormal);
}

}  // namespace
