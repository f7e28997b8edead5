#pragma once
// Helpers for the HF checkpoint tests: a tiny GQA model's state dict and
// bitwise comparison of state dicts.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "models/test_util.hpp"
#include "titan/models/llama3/state_dict_adapter.hpp"
#include "titan/models/llama3/transformer.hpp"

namespace titan::testing {

/// tiny_args() (GQA 4/2 heads, Llama 3.1 scaling with all three bands), with
/// a RoPE table longer than the scaled-around "original" context (64), as
/// transformers expects of max_position_embeddings (it warns otherwise).
inline models::llama3::ModelArgs tiny_hf_args() {
  models::llama3::ModelArgs a = tiny_args();
  a.max_seq_len = 128;
  return a;
}

/// A model with `args` initialised from `seed`.
inline models::llama3::Transformer seeded_model(const models::llama3::ModelArgs& args, uint64_t seed) {
  models::llama3::Transformer model(args);
  torch::manual_seed(seed);
  model->init_weights();
  return model;
}

/// The model's parameters by torchtitan name (detached views).
inline models::llama3::StateDict state_of(models::llama3::Transformer& model) {
  models::llama3::StateDict s;
  for (const auto& p : model->named_parameters()) s[p.key()] = p.value().detach();
  return s;
}

/// Copies `state` into the model's parameters (names and shapes must match).
inline void load_state(models::llama3::Transformer& model, const models::llama3::StateDict& state) {
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) p.value().copy_(state.at(p.key()));
}

/// Same names, dtypes, shapes and bytes.
inline void expect_bitwise_equal(const models::llama3::StateDict& a, const models::llama3::StateDict& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_EQ(t.scalar_type(), b.at(name).scalar_type()) << name;
    EXPECT_TRUE(t.equal(b.at(name))) << name << " differs";
  }
}

}  // namespace titan::testing
