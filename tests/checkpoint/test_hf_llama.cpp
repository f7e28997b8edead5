// The HF state-dict map: names both ways, the q/k row permutation between
// titan's interleaved RoPE and HF's rotate-half RoPE (exact, and the same
// attention scores), and the bitwise round trip of a whole model.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "checkpoint/hf_test_util.hpp"
#include "titan/models/llama3/state_dict_adapter.hpp"
#include "titan/ops/rope.hpp"
#include "titan/util/error.hpp"

using namespace titan::models::llama3;

TEST(HfLlamaNames, MapBothWays) {
  const std::pair<const char*, const char*> cases[] = {
      {"tok_embeddings.weight", "model.embed_tokens.weight"},
      {"layers.0.attention.wq.weight", "model.layers.0.self_attn.q_proj.weight"},
      {"layers.11.attention.wk.weight", "model.layers.11.self_attn.k_proj.weight"},
      {"layers.2.attention.wv.weight", "model.layers.2.self_attn.v_proj.weight"},
      {"layers.2.attention.wo.weight", "model.layers.2.self_attn.o_proj.weight"},
      {"layers.3.feed_forward.w1.weight", "model.layers.3.mlp.gate_proj.weight"},
      {"layers.3.feed_forward.w2.weight", "model.layers.3.mlp.down_proj.weight"},
      {"layers.3.feed_forward.w3.weight", "model.layers.3.mlp.up_proj.weight"},
      {"layers.4.attention_norm.weight", "model.layers.4.input_layernorm.weight"},
      {"layers.4.ffn_norm.weight", "model.layers.4.post_attention_layernorm.weight"},
      {"norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
  };
  for (const auto& [t, h] : cases) {
    EXPECT_EQ(hf_name(t), h);
    EXPECT_EQ(titan_name(h), t);
  }
  EXPECT_THROW(hf_name("layers.x.attention.wq.weight"), titan::Error);
  EXPECT_THROW(hf_name("layers.0.attention.wq.bias"), titan::Error);
  EXPECT_THROW(titan_name("model.layers.0.self_attn.q_proj.bias"), titan::Error);
}

// head_dim 6, two heads: per head rows (2i, 2i+1) go to (i, i + 3).
TEST(HfLlamaPermutation, MovesPairsToHalves) {
  at::Tensor rows = at::arange(12, at::kFloat).unsqueeze(1);  // row r holds r
  at::Tensor half = interleaved_to_half(rows, 2).squeeze(1);
  at::Tensor expected = at::tensor({0, 2, 4, 1, 3, 5, 6, 8, 10, 7, 9, 11}, at::kFloat);
  EXPECT_TRUE(half.equal(expected)) << half;
  EXPECT_TRUE(half_to_interleaved(half.unsqueeze(1), 2).equal(rows));
}

TEST(HfLlamaPermutation, RoundTripIsBitwise) {
  torch::manual_seed(3);
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    at::Tensor w = torch::randn({8 * 16, 40}).to(dt);
    EXPECT_TRUE(half_to_interleaved(interleaved_to_half(w, 8), 8).equal(w));
    EXPECT_TRUE(interleaved_to_half(half_to_interleaved(w, 8), 8).equal(w));
  }
}

// The point of the permutation: titan's RoPE on W x and HF's rotate-half RoPE
// on perm(W) x give the same attention scores q·k at every pair of positions.
TEST(HfLlamaPermutation, InterleavedAndRotateHalfRopeGiveTheSameScores) {
  torch::manual_seed(5);
  const int64_t heads = 3, head_dim = 16, in = 24, seq = 12;
  titan::ops::RopeScaling scaling;
  scaling.original_max_position = 8;
  at::Tensor angles = titan::ops::rope_angles(head_dim, seq, 10000.0, scaling);
  at::Tensor cos = angles.cos(), sin = angles.sin();
  at::Tensor x = torch::randn({1, seq, in});
  at::Tensor wq = torch::randn({heads * head_dim, in}), wk = torch::randn({heads * head_dim, in});

  auto titan_rope = [&](const at::Tensor& w) {
    return titan::ops::apply_rope(at::matmul(x, w.t()).view({1, seq, heads, head_dim}), cos, sin);
  };
  // HF: q·cos + rotate_half(q)·sin, with cos/sin repeated over both halves.
  auto hf_rope = [&](const at::Tensor& w) {
    at::Tensor q = at::matmul(x, w.t()).view({1, seq, heads, head_dim});
    at::Tensor c = at::cat({cos, cos}, -1).view({1, seq, 1, head_dim});
    at::Tensor s = at::cat({sin, sin}, -1).view({1, seq, 1, head_dim});
    at::Tensor q1 = q.narrow(-1, 0, head_dim / 2), q2 = q.narrow(-1, head_dim / 2, head_dim / 2);
    return q * c + at::cat({-q2, q1}, -1) * s;
  };
  auto scores = [](const at::Tensor& q, const at::Tensor& k) { return at::einsum("bshd,bthd->bhst", {q, k}); };
  at::Tensor titan_scores = scores(titan_rope(wq), titan_rope(wk));
  at::Tensor hf_scores = scores(hf_rope(interleaved_to_half(wq, heads)), hf_rope(interleaved_to_half(wk, heads)));
  const double scale = titan_scores.abs().max().item<double>();
  const double diff = (titan_scores - hf_scores).abs().max().item<double>();
  // Same fp32 products summed in a different order: rounding only (~1e-7 relative).
  EXPECT_LT(diff, 1e-5 * scale) << "max |diff| " << diff << " of scores up to " << scale;
  // Without the permutation they differ at order one: the test has teeth.
  at::Tensor unpermuted = scores(hf_rope(wq), hf_rope(wk));
  EXPECT_GT((titan_scores - unpermuted).abs().max().item<double>(), 0.1 * scale);
}

TEST(HfLlamaState, RoundTripIsBitwiseWithGqa) {
  auto args = titan::testing::tiny_hf_args();
  auto model = titan::testing::seeded_model(args, 11);
  StateDict titan_state = titan::testing::state_of(model);
  StateDict hf = to_hf_state(titan_state, args);
  EXPECT_EQ(hf.size(), titan_state.size());
  EXPECT_EQ(hf.at("model.layers.1.self_attn.k_proj.weight").size(0), args.kv_heads() * args.head_dim());
  // Only wq and wk are permuted; everything else is the same tensor.
  EXPECT_FALSE(hf.at("model.layers.0.self_attn.q_proj.weight").equal(titan_state.at("layers.0.attention.wq.weight")));
  EXPECT_TRUE(hf.at("model.layers.0.self_attn.v_proj.weight").equal(titan_state.at("layers.0.attention.wv.weight")));
  titan::testing::expect_bitwise_equal(from_hf_state(hf, args), titan_state);
}

TEST(HfLlamaState, ErrorsNameTheTensor) {
  auto args = titan::testing::tiny_hf_args();
  auto model = titan::testing::seeded_model(args, 11);
  StateDict titan_state = titan::testing::state_of(model);
  auto message = [](const auto& fn) {
    try {
      fn();
    } catch (const titan::Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };

  StateDict missing = titan_state;
  missing.erase("layers.1.feed_forward.w2.weight");
  EXPECT_NE(message([&] { to_hf_state(missing, args); }).find("missing tensor 'layers.1.feed_forward.w2.weight'"),
            std::string::npos);

  StateDict hf = to_hf_state(titan_state, args);
  hf.erase("model.layers.0.self_attn.k_proj.weight");
  std::string m = message([&] { from_hf_state(hf, args); });
  EXPECT_NE(m.find("model.layers.0.self_attn.k_proj.weight"), std::string::npos) << m;

  hf = to_hf_state(titan_state, args);
  hf["model.layers.0.self_attn.q_proj.bias"] = torch::zeros({64});
  m = message([&] { from_hf_state(hf, args); });
  EXPECT_NE(m.find("model.layers.0.self_attn.q_proj.bias"), std::string::npos) << m;

  // Args whose shapes do not fit (one kv head more): names tensor and shapes.
  auto other = args;
  other.n_kv_heads = 4;
  m = message([&] { to_hf_state(titan_state, other); });
  EXPECT_NE(m.find("layers.0.attention.wk.weight' has shape [32, 64] but the model args need [64, 64]"),
            std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
}
