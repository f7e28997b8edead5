// torchtitan 0.3's names for a Llama 3 state dict: the fused wqkv layout
// against a row-by-row construction written from torchtitan 0.3.0's
// FusedQKVLinear (models/common/attention.py: per KV group, its query
// heads, then its key head, then its value head), and bitwise round trips
// through both 0.3 forms, tied and untied.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "checkpoint/hf_test_util.hpp"
#include "support/error_of.hpp"
#include "titan/checkpoint/torchtitan_v03.hpp"
#include "titan/util/error.hpp"

using namespace titan::checkpoint;
using titan::testing::error_of;

TEST(TorchtitanV03, FusedQkvIsGroupedByKvHead) {
  const int64_t H = 6, KV = 2, d = 4, dim = 5, hpk = H / KV;
  // Row r of each projection holds 1000·which + r in every column, so any
  // row out of place shows.
  auto rows = [&](int64_t n, double which) {
    return (torch::arange(n, torch::kFloat) + 1000.0 * which).unsqueeze(1).expand({n, dim}).contiguous();
  };
  at::Tensor wq = rows(H * d, 1), wk = rows(KV * d, 2), wv = rows(KV * d, 3);
  std::vector<at::Tensor> want_rows;
  for (int64_t g = 0; g < KV; ++g) {
    for (int64_t j = 0; j < hpk; ++j) want_rows.push_back(wq.narrow(0, (g * hpk + j) * d, d));
    want_rows.push_back(wk.narrow(0, g * d, d));
    want_rows.push_back(wv.narrow(0, g * d, d));
  }
  const at::Tensor want = torch::cat(want_rows, 0);
  const at::Tensor got = fuse_qkv(wq, wk, wv, H, KV);
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_TRUE(got.equal(want)) << "fused layout differs from torchtitan 0.3's grouping";
  auto parts = split_qkv(got, H, KV);
  EXPECT_TRUE(parts[0].equal(wq));
  EXPECT_TRUE(parts[1].equal(wk));
  EXPECT_TRUE(parts[2].equal(wv));
  EXPECT_NE(error_of([&] { split_qkv(got.narrow(0, 0, got.size(0) - d), H, KV); }).find("does not split"),
            std::string::npos);
}

TEST(TorchtitanV03, RoundTripsAreBitwiseInBothForms) {
  for (bool tied : {false, true}) {
    titan::models::llama3::ModelArgs args = titan::testing::tiny_hf_args();
    args.tie_word_embeddings = tied;
    auto model = titan::testing::seeded_model(args, 41);
    const StateDict state = titan::testing::state_of(model);
    for (bool fused : {false, true}) {
      SCOPED_TRACE(std::string(tied ? "tied" : "untied") + (fused ? ", fused" : ", split"));
      const StateDict v03 = to_torchtitan_v03(state, args, fused);
      EXPECT_TRUE(has_torchtitan_v03_names(v03));
      EXPECT_FALSE(has_torchtitan_v03_names(state));
      EXPECT_EQ(v03.count("lm_head.weight"), 1u);  // tied too: 0.3's state_dict() lists both names
      EXPECT_EQ(v03.count("output.weight"), 0u);
      EXPECT_EQ(v03.count("layers.1.attention.qkv_linear.wqkv.weight"), fused ? 1u : 0u);
      EXPECT_EQ(v03.count("layers.1.attention.qkv_linear.wk.weight"), fused ? 0u : 1u);
      EXPECT_EQ(v03.count("layers.1.attention.wk.weight"), 0u);
      titan::testing::expect_bitwise_equal(from_torchtitan_v03(v03, args), state);
    }
  }
}

TEST(TorchtitanV03, BadStatesAreOneLineErrors) {
  titan::models::llama3::ModelArgs args = titan::testing::tiny_hf_args();
  auto model = titan::testing::seeded_model(args, 42);
  const StateDict state = titan::testing::state_of(model);
  StateDict v03 = to_torchtitan_v03(state, args, /*fused=*/true);
  StateDict both = v03;
  both["layers.0.attention.qkv_linear.wq.weight"] = state.at("layers.0.attention.wq.weight");
  EXPECT_NE(error_of([&] { from_torchtitan_v03(both, args); }).find("both a fused wqkv and a separate wq"),
            std::string::npos);
  StateDict mixed = v03;
  mixed["output.weight"] = state.at("output.weight");
  EXPECT_NE(error_of([&] { from_torchtitan_v03(mixed, args); }).find("mixed with 0.3 names"), std::string::npos);

  args.tie_word_embeddings = true;
  auto tied_model = titan::testing::seeded_model(args, 43);
  StateDict tied = to_torchtitan_v03(titan::testing::state_of(tied_model), args, false);
  tied["lm_head.weight"] = tied["lm_head.weight"] + 1;
  EXPECT_NE(error_of([&] { from_torchtitan_v03(tied, args); }).find("the two tensors differ"), std::string::npos);
}
