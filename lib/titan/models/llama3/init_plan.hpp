#pragma once
/// @file
/// @brief torchtitan's Llama 3 initialisation as data: which recipe each
/// parameter gets, in the order the draws are taken. init_weights() of the
/// model, a block, attention and the feed-forward apply it to the tensors
/// they hold; the sharded initialisation (train/sharded_init.hpp) applies
/// it to the one box of each parameter a rank holds, at the stream offset
/// the whole model's init would reach it.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "titan/models/llama3/model_args.hpp"
#include "titan/ops/init.hpp"

namespace titan::models::llama3 {

/// @brief One parameter's initialisation.
struct ParamInit {
  std::string fqn;             ///< torchtitan's name, e.g. "layers.0.attention.wq.weight"
  std::vector<int64_t> shape;  ///< the whole (unsharded) parameter's
  ops::InitRecipe recipe;
};

/// @brief The std of the matrices block `layer_id` writes into the residual
/// stream with (wo, w2, w3): 0.02/√(2(layer_id+1)) with depth_init, else
/// 0.02/√(2·n_layers) — deeper blocks add more residual terms, and shrinking
/// these keeps the stream's variance flat.
double block_weight_init_std(const ModelArgs& args, int64_t layer_id);

/// @brief Attention's recipes ("wq.weight" ... "wo.weight", in draw order):
/// wq, wk, wv ~ trunc_normal(0, 0.02, [-2, 2]); wo ~ trunc_normal(0, init_std).
std::vector<std::pair<std::string, ops::InitRecipe>> attention_init(double init_std);

/// @brief The feed-forward's: w1 ~ trunc_normal(0, 0.02); w2, w3 ~ trunc_normal(0, init_std).
std::vector<std::pair<std::string, ops::InitRecipe>> feed_forward_init(double init_std);

/// @brief A block's, named relative to it ("attention_norm.weight",
/// "attention.wq.weight", ...): both norms = 1, then attention, then the
/// feed-forward.
std::vector<std::pair<std::string, ops::InitRecipe>> block_init(const ModelArgs& args, int64_t layer_id);

/// @brief The whole model's, in torchtitan's order: tok_embeddings ~ N(0, 1),
/// every block in layer order, norm = 1, output ~ trunc_normal(0, dim^-0.5)
/// cut at ±3σ. Tied (args.tie_word_embeddings), the one shared weight
/// "tok_embeddings.weight" gets only the output's init, at the output's
/// place (torchtitan 0.3's order). Lists every parameter exactly once.
std::vector<ParamInit> init_plan(const ModelArgs& args);

}  // namespace titan::models::llama3
