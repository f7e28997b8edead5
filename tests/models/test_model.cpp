// The Llama 3 model: flavors, parameter names/shapes/counts, FLOPs, init,
// causality, meta-device materialisation and pipeline splitting.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>

#include "models/test_util.hpp"
#include "titan/config/job_config.hpp"
#include "titan/models/llama3/flops.hpp"
#include "titan/models/llama3/model_args.hpp"
#include "titan/models/llama3/transformer.hpp"
#include "titan/models/materialize.hpp"
#include "titan/util/error.hpp"

using namespace titan::models::llama3;
using titan::models::numel_of_parameters;
using titan::models::to_empty;

namespace {

Transformer build(const ModelArgs& args, uint64_t seed) {
  Transformer model(args);
  torch::manual_seed(seed);
  model->init_weights();
  return model;
}

}  // namespace

TEST(Llama3Flavors, DimensionsAndFfnHidden) {
  ModelArgs d = flavor_args("debugmodel");
  EXPECT_EQ(d.dim, 256);
  EXPECT_EQ(d.n_layers, 6);
  EXPECT_EQ(d.n_heads, 16);
  EXPECT_EQ(d.kv_heads(), 16);
  EXPECT_EQ(d.vocab_size, 2048);
  EXPECT_EQ(d.rope_theta, 500000.0);
  EXPECT_EQ(d.ffn_hidden_dim(), 768);  // 1024 → 682 → round up to 256
  // Meta's published intermediate sizes.
  EXPECT_EQ(flavor_args("1B").ffn_hidden_dim(), 8192);
  EXPECT_EQ(flavor_args("3B").ffn_hidden_dim(), 8192);
  EXPECT_EQ(flavor_args("8B").ffn_hidden_dim(), 14336);
  EXPECT_EQ(flavor_args("70B").ffn_hidden_dim(), 28672);
  EXPECT_EQ(flavor_args("405B").ffn_hidden_dim(), 53248);
  for (const auto& name : flavor_names()) {
    ModelArgs a = flavor_args(name);
    EXPECT_NO_THROW(a.validate()) << name;
    EXPECT_EQ(a.norm_eps, 1e-5);
    if (name.rfind("debugmodel", 0) != 0) EXPECT_EQ(a.vocab_size, 128256) << name;
    // torchtitan's flex / varlen flavors: the base model, block-causal.
    const bool variant = name.find("_flex") != std::string::npos || name.find("_varlen") != std::string::npos;
    EXPECT_EQ(a.attn_mask_type, variant ? "block_causal" : "causal") << name;
  }
}

// [model] n_layers: the flavor's shape with fewer (or more) blocks, e.g. an
// 8B-shaped model that fits one GPU; 0 keeps the flavor's; negative is one line.
TEST(Llama3Flavors, NLayersOverridesOnlyTheBlockCount) {
  const ModelArgs full = flavor_args("8B"), cut = flavor_args("8B", 4), same = flavor_args("8B", 0);
  EXPECT_EQ(cut.n_layers, 4);
  EXPECT_EQ(same.n_layers, full.n_layers);
  EXPECT_EQ(cut.dim, full.dim);
  EXPECT_EQ(cut.ffn_hidden_dim(), full.ffn_hidden_dim());
  EXPECT_EQ(cut.vocab_size, full.vocab_size);
  try {
    flavor_args("8B", -1);
    FAIL() << "no error";
  } catch (const titan::Error& e) {
    EXPECT_NE(std::string(e.what()).find("[model] n_layers"), std::string::npos) << e.what();
  }
}

// [model] dim / n_heads / n_kv_heads: the debug model widened to the bench's
// dim 1024 keeps its vocabulary and FFN rounding (4·1024 → 2730 → 2816);
// a shape that does not divide is one line naming the fields.
TEST(Llama3Flavors, ShapeOverridesReplaceOnlyTheirFields) {
  ShapeOverrides o;
  o.n_layers = 4, o.dim = 1024, o.n_heads = 16;
  const ModelArgs debug = flavor_args("debugmodel"), wide = flavor_args("debugmodel", o);
  EXPECT_EQ(wide.dim, 1024);
  EXPECT_EQ(wide.n_layers, 4);
  EXPECT_EQ(wide.n_heads, 16);
  EXPECT_EQ(wide.head_dim(), 64);
  EXPECT_EQ(wide.ffn_hidden_dim(), 2816);
  EXPECT_EQ(wide.vocab_size, debug.vocab_size);
  EXPECT_EQ(wide.kv_heads(), 16);
  o.n_kv_heads = 4;
  EXPECT_EQ(flavor_args("debugmodel", o).kv_heads(), 4);

  titan::config::ModelSection m;
  m.flavor = "8B", m.dim = 2048, m.n_layers = 2;
  const ModelArgs from_section = flavor_args(m);
  EXPECT_EQ(from_section.dim, 2048);
  EXPECT_EQ(from_section.n_layers, 2);
  EXPECT_EQ(from_section.n_heads, 32);
  EXPECT_EQ(from_section.kv_heads(), 8);

  const auto error_of = [](const ShapeOverrides& bad) {
    try {
      flavor_args("debugmodel", bad);
    } catch (const titan::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  ShapeOverrides negative;
  negative.n_kv_heads = -2;
  EXPECT_NE(error_of(negative).find("[model] n_kv_heads"), std::string::npos) << error_of(negative);
  ShapeOverrides indivisible;
  indivisible.dim = 1000;  // 16 heads of 62.5
  EXPECT_NE(error_of(indivisible).find("dim 1000 is not divisible by n_heads 16"), std::string::npos)
      << error_of(indivisible);
  ShapeOverrides gqa;
  gqa.n_kv_heads = 3;
  EXPECT_NE(error_of(gqa).find("n_heads 16 is not divisible by n_kv_heads 3"), std::string::npos) << error_of(gqa);
}

TEST(Llama3Flavors, UnknownFlavorIsOneLineErrorListingValidOnes) {
  try {
    flavor_args("7B");
    FAIL() << "no error";
  } catch (const titan::Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos);
    EXPECT_NE(msg.find("'7B'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("debugmodel, debugmodel_flex_attn, debugmodel_varlen_attn, 1B, 3B, 8B, 8B_flex, 8B_varlen, 70B, 405B"), std::string::npos) << msg;
  }
}

TEST(Llama3Flavors, InvalidArgsAreRejected) {
  ModelArgs a = titan::testing::tiny_args();
  a.n_kv_heads = 3;
  EXPECT_THROW(Transformer{a}, titan::Error);
  a = titan::testing::tiny_args();
  a.dim = 66;
  EXPECT_THROW(Transformer{a}, titan::Error);
}

TEST(Llama3Model, ParameterNamesAndShapesOfDebugmodel) {
  ModelArgs a = flavor_args("debugmodel");
  Transformer model(a, torch::TensorOptions().device(torch::kMeta));
  auto params = model->named_parameters();
  std::vector<std::pair<std::string, std::vector<int64_t>>> want = {{"tok_embeddings.weight", {2048, 256}}};
  for (int i = 0; i < 6; ++i) {
    std::string p = "layers." + std::to_string(i) + ".";
    want.push_back({p + "attention.wq.weight", {256, 256}});
    want.push_back({p + "attention.wk.weight", {256, 256}});
    want.push_back({p + "attention.wv.weight", {256, 256}});
    want.push_back({p + "attention.wo.weight", {256, 256}});
    want.push_back({p + "feed_forward.w1.weight", {768, 256}});
    want.push_back({p + "feed_forward.w2.weight", {256, 768}});
    want.push_back({p + "feed_forward.w3.weight", {768, 256}});
    want.push_back({p + "attention_norm.weight", {256}});
    want.push_back({p + "ffn_norm.weight", {256}});
  }
  want.push_back({"norm.weight", {256}});
  want.push_back({"output.weight", {2048, 256}});
  ASSERT_EQ(params.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(params[i].key(), want[i].first);
    EXPECT_EQ(params[i].value().sizes().vec(), want[i].second) << want[i].first;
    EXPECT_TRUE(params[i].value().requires_grad());
  }
  EXPECT_TRUE(model->named_buffers().is_empty()) << "RoPE table must not be model state";
}

TEST(Llama3Model, ParameterCountsMatchPublishedOnMeta) {
  struct Case {
    const char* flavor;
    double published;
  };
  for (Case c : {Case{"8B", 8.03e9}, Case{"70B", 70.6e9}, Case{"405B", 405.9e9}}) {
    ModelArgs a = flavor_args(c.flavor);
    Transformer model(a, torch::TensorOptions().device(torch::kMeta));
    const int64_t n = numel_of_parameters(*model);
    EXPECT_EQ(n, count_parameters(a)) << c.flavor;
    EXPECT_LT(std::abs(static_cast<double>(n) - c.published) / c.published, 1e-3)
        << c.flavor << ": " << n;
  }
  EXPECT_EQ(count_parameters(flavor_args("8B")), 8030261248);
  EXPECT_EQ(count_parameters(flavor_args("70B")), 70553706496);
  EXPECT_EQ(count_parameters(flavor_args("405B")), 405853388800);
}

TEST(Llama3Model, FlopsPerTokenAsTorchtitanCounts) {
  ModelArgs a = flavor_args("8B");
  const double n_dense = 8030261248.0 - 128256.0 * 4096.0;
  const double want = 6.0 * n_dense + 12.0 * 32 * 32 * 128 * 8192;
  EXPECT_DOUBLE_EQ(flops_per_token(a, 8192), want);
  EXPECT_NEAR(flops_per_token(a, 8192), 57.914e9, 0.001e9);
  EXPECT_THROW(flops_per_token(a, 0), titan::Error);
}

TEST(Llama3Model, InitStatistics) {
  ModelArgs a = flavor_args("debugmodel");
  Transformer model = build(a, 7);
  torch::NoGradGuard ng;
  auto blocks = model->blocks();
  ASSERT_EQ(blocks.size(), 6u);
  // wq/wk/wv/w1: std 0.02; the ±2 bound is 100σ so it never bites.
  for (auto& b : blocks) {
    for (auto w : {b->attention->wq->weight, b->attention->wk->weight, b->feed_forward->w1->weight}) {
      EXPECT_NEAR(w.std().item<double>(), 0.02, 0.02 * 0.03);
      EXPECT_NEAR(w.mean().item<double>(), 0.0, 1e-3);
      EXPECT_LE(w.abs().max().item<double>(), 2.0);
    }
    // Depth-scaled: 0.02/√(2(layer_id+1)).
    const double std = 0.02 / std::sqrt(2.0 * (b->layer_id + 1));
    EXPECT_DOUBLE_EQ(b->weight_init_std, std);
    for (auto w : {b->attention->wo->weight, b->feed_forward->w2->weight, b->feed_forward->w3->weight})
      EXPECT_NEAR(w.std().item<double>(), std, std * 0.03) << "layer " << b->layer_id;
    EXPECT_TRUE(b->attention_norm->weight.eq(1).all().item<bool>());
    EXPECT_TRUE(b->ffn_norm->weight.eq(1).all().item<bool>());
  }
  EXPECT_NEAR(model->tok_embeddings->weight.std().item<double>(), 1.0, 0.01);
  EXPECT_TRUE(model->norm->weight.eq(1).all().item<bool>());
  // Output: std dim^-0.5 truncated at ±3σ (std of N(0,1) cut at ±3 is 0.9866).
  const double out_std = 1.0 / 16.0;
  auto out = model->output->weight;
  EXPECT_LE(out.abs().max().item<double>(), 3.0 * out_std);
  EXPECT_GT(out.abs().max().item<double>(), 2.9 * out_std);  // the tails reach the cut
  EXPECT_NEAR(out.std().item<double>(), 0.9866 * out_std, out_std * 0.02);
  // Deterministic from the seed.
  Transformer again = build(a, 7);
  auto p1 = model->named_parameters(), p2 = again->named_parameters();
  for (size_t i = 0; i < p1.size(); ++i) EXPECT_TRUE(torch::equal(p1[i].value(), p2[i].value())) << p1[i].key();
}

TEST(Llama3Model, CausalLogitsBeforeAChangedTokenDoNotMove) {
  ModelArgs a = titan::testing::tiny_args();
  Transformer model = build(a, 3);
  torch::NoGradGuard ng;
  torch::manual_seed(11);
  auto tokens = torch::randint(a.vocab_size, {2, 16}, torch::kLong);
  auto logits = model->forward(tokens);
  ASSERT_EQ(logits.sizes().vec(), (std::vector<int64_t>{2, 16, a.vocab_size}));
  const int64_t t = 9;
  auto changed = tokens.clone();
  changed.index_put_({torch::indexing::Slice(), t}, (tokens.index({torch::indexing::Slice(), t}) + 1) % a.vocab_size);
  auto logits2 = model->forward(changed);
  auto before = (logits - logits2).narrow(1, 0, t).abs().max().item<double>();
  auto at_and_after = (logits - logits2).narrow(1, t, 16 - t).abs().amax({0, 2});
  EXPECT_LE(before, 1e-6);
  EXPECT_GT(at_and_after.min().item<double>(), 1e-4) << "every later position should see the change";
}

TEST(Llama3Model, SequenceLongerThanMaxSeqLenIsAnError) {
  ModelArgs a = titan::testing::tiny_args();
  Transformer model = build(a, 1);
  EXPECT_THROW(model->forward(torch::zeros({1, a.max_seq_len + 1}, torch::kLong)), titan::Error);
}

TEST(Llama3Model, MetaBuildThenToEmptyThenInitEqualsDirectBuild) {
  ModelArgs a = titan::testing::tiny_args();
  Transformer direct = build(a, 5);
  Transformer meta(a, torch::TensorOptions().device(torch::kMeta));
  to_empty(*meta, torch::kCPU);
  torch::manual_seed(5);
  meta->init_weights();
  auto p1 = direct->named_parameters(), p2 = meta->named_parameters();
  ASSERT_EQ(p1.size(), p2.size());
  for (size_t i = 0; i < p1.size(); ++i) {
    EXPECT_EQ(p1[i].key(), p2[i].key());
    EXPECT_TRUE(p2[i].value().device().is_cpu());
    EXPECT_TRUE(p2[i].value().requires_grad());
    EXPECT_TRUE(torch::equal(p1[i].value(), p2[i].value())) << p1[i].key();
  }
  // Members alias the new parameters (the forward uses them).
  EXPECT_TRUE(meta->output->weight.is_same(meta->named_parameters()["output.weight"]));
  auto tokens = torch::arange(8, torch::kLong).view({1, 8});
  EXPECT_TRUE(torch::equal(direct->forward(tokens), meta->forward(tokens)));
}

TEST(Llama3Model, PipelineStagesKeepNamesAndChainToTheFullModel) {
  ModelArgs a = titan::testing::tiny_args();
  a.n_layers = 4;
  Transformer full = build(a, 9);
  Transformer first = build(a, 9), last = build(a, 9);
  first->keep_layers(0, 2);
  first->drop_head();
  last->keep_layers(2, 4);
  last->drop_tok_embeddings();
  auto names = last->named_parameters().keys();
  EXPECT_EQ(names.front(), "layers.2.attention.wq.weight");
  EXPECT_EQ(names.back(), "output.weight");
  for (const auto& n : first->named_parameters().keys()) {
    EXPECT_EQ(n.find("layers.2"), std::string::npos);
    EXPECT_EQ(n.find("output"), std::string::npos);
  }
  EXPECT_EQ(numel_of_parameters(*first) + numel_of_parameters(*last), numel_of_parameters(*full));
  torch::NoGradGuard ng;
  auto tokens = torch::arange(12, torch::kLong).view({2, 6});
  auto hidden = first->forward(tokens);
  EXPECT_EQ(hidden.sizes().vec(), (std::vector<int64_t>{2, 6, a.dim}));
  EXPECT_TRUE(torch::allclose(last->forward(hidden), full->forward(tokens), 0, 0));
}

// Meta's Llama 3.2 1B and 3B tie the output to the embedding. The expected
// counts come from the config.json values Meta publishes (hidden_size D,
// num_hidden_layers L, num_attention_heads H, num_key_value_heads KV,
// intermediate_size F, vocab V), summed here by hand: one V·D table, per
// layer q/o D·D, k/v D·KV·(D/H), three D·F FFN matrices and two norms, and
// the final norm. Meta's model cards say 1.23B and 3.21B.
TEST(Llama3Flavors, Llama32OneAndThreeBAreTiedWithMetasCounts) {
  struct Meta {
    const char* flavor;
    int64_t D, L, H, KV, F;
  };
  for (Meta m : {Meta{"1B", 2048, 16, 32, 8, 8192}, Meta{"3B", 3072, 28, 24, 8, 8192}}) {
    const int64_t V = 128256, q = m.D / m.H;
    const int64_t published =
        V * m.D + m.L * (2 * m.D * m.D + 2 * m.D * m.KV * q + 3 * m.D * m.F + 2 * m.D) + m.D;
    ModelArgs a = flavor_args(m.flavor);
    EXPECT_TRUE(a.tie_word_embeddings) << m.flavor;
    EXPECT_EQ(a.rope_scaling.factor, 32.0) << m.flavor;
    EXPECT_EQ(a.rope_theta, 500000.0) << m.flavor;
    EXPECT_EQ(a.ffn_hidden_dim(), m.F) << m.flavor;
    Transformer model(a, torch::TensorOptions().device(torch::kMeta));
    const int64_t n = numel_of_parameters(*model);
    std::printf("%s: %lld parameters on the meta device (from Meta's config.json: %lld)\n", m.flavor,
                static_cast<long long>(n), static_cast<long long>(published));
    EXPECT_EQ(n, published) << m.flavor;
    EXPECT_EQ(count_parameters(a), published) << m.flavor;
    EXPECT_FALSE(model->named_parameters().contains("output.weight")) << m.flavor;
    // FLOPs: the tied table is the output matmul's weight, so 6·N keeps it
    // (torchtitan 0.3): the same count as the untied shapes.
    ModelArgs untied = a;
    untied.tie_word_embeddings = false;
    const double attn = 12.0 * m.L * m.H * q * 8192;
    EXPECT_DOUBLE_EQ(flops_per_token(a, 8192), 6.0 * static_cast<double>(published) + attn) << m.flavor;
    EXPECT_DOUBLE_EQ(flops_per_token(a, 8192), flops_per_token(untied, 8192)) << m.flavor;
  }
  EXPECT_EQ(count_parameters(flavor_args("1B")), 1235814400);
  EXPECT_EQ(count_parameters(flavor_args("3B")), 3212749824);
}

// A tied model is the untied model whose output.weight equals the
// embedding: same logits, and the one shared gradient is the sum of the
// untied model's two. The untied model is the independent reference.
TEST(Llama3Model, TiedOutputIsTheEmbeddingInValueAndGradient) {
  ModelArgs a = titan::testing::tiny_args();
  a.tie_word_embeddings = true;
  Transformer tied = build(a, 9);
  auto names = tied->named_parameters();
  EXPECT_FALSE(names.contains("output.weight"));
  EXPECT_EQ(names.size(), 1u + 9u * a.n_layers + 1u);
  // Init: the shared table gets the output's init (std D^-0.5 cut at ±3σ), as torchtitan 0.3.
  const double out_std = 1.0 / std::sqrt(64.0);
  EXPECT_LE(tied->tok_embeddings->weight.abs().max().item<double>(), 3.0 * out_std + 1e-7);
  EXPECT_NEAR(tied->tok_embeddings->weight.std().item<double>(), 0.9866 * out_std, out_std * 0.05);

  ModelArgs ua = a;
  ua.tie_word_embeddings = false;
  Transformer untied(ua);
  {
    torch::NoGradGuard ng;
    auto src = tied->named_parameters();
    for (auto& p : untied->named_parameters())
      p.value().copy_(p.key() == "output.weight" ? src["tok_embeddings.weight"] : src[p.key()]);
  }
  torch::manual_seed(4);
  auto tokens = torch::randint(a.vocab_size, {2, 12}, torch::kLong);
  auto target = torch::randn({2, 12, a.vocab_size});
  auto lt = tied->forward(tokens), lu = untied->forward(tokens);
  const double dlogits = (lt - lu).abs().max().item<double>();
  (lt * target).sum().backward();
  (lu * target).sum().backward();
  auto ug = untied->named_parameters();
  const at::Tensor want = ug["tok_embeddings.weight"].grad() + ug["output.weight"].grad();
  const double dgrad = (tied->tok_embeddings->weight.grad() - want).abs().max().item<double>();
  std::printf("tied vs untied copy: max |dlogits| %.3g, max |dgrad(embedding)| %.3g\n", dlogits, dgrad);
  EXPECT_EQ(dlogits, 0.0);  // the same matmul on the same numbers
  EXPECT_LE(dgrad, 1e-6);   // measured 0 (two partial sums in the same order); a bound, not equality
  EXPECT_GT(ug["output.weight"].grad().abs().max().item<double>(), 1e-3) << "the output part must count";
  // A pipeline stage without the embedding cannot keep a tied output.
  try {
    tied->drop_tok_embeddings();
    ADD_FAILURE() << "no error";
  } catch (const titan::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tied to tok_embeddings"), std::string::npos) << e.what();
  }
}
