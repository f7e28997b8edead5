#include "titan/models/llama3/init_plan.hpp"

#include <cmath>
#include <map>

#include "titan/models/llama3/transformer.hpp"
#include "titan/util/internal_assert.hpp"

namespace titan::models::llama3 {

using Recipes = std::vector<std::pair<std::string, ops::InitRecipe>>;

double block_weight_init_std(const ModelArgs& args, int64_t layer_id) {
  return args.depth_init ? 0.02 / std::sqrt(2.0 * static_cast<double>(layer_id + 1))
                         : 0.02 / std::sqrt(2.0 * static_cast<double>(args.n_layers));
}

Recipes attention_init(double init_std) {
  const auto t = ops::InitRecipe::trunc_normal(0.0, 0.02);
  return {{"wq.weight", t}, {"wk.weight", t}, {"wv.weight", t}, {"wo.weight", ops::InitRecipe::trunc_normal(0.0, init_std)}};
}

Recipes feed_forward_init(double init_std) {
  const auto scaled = ops::InitRecipe::trunc_normal(0.0, init_std);
  return {{"w1.weight", ops::InitRecipe::trunc_normal(0.0, 0.02)}, {"w2.weight", scaled}, {"w3.weight", scaled}};
}

Recipes block_init(const ModelArgs& args, int64_t layer_id) {
  const double s = block_weight_init_std(args, layer_id);
  Recipes out = {{"attention_norm.weight", ops::InitRecipe::ones()}, {"ffn_norm.weight", ops::InitRecipe::ones()}};
  for (auto& [name, r] : attention_init(s)) out.emplace_back("attention." + name, r);
  for (auto& [name, r] : feed_forward_init(s)) out.emplace_back("feed_forward." + name, r);
  return out;
}

std::vector<ParamInit> init_plan(const ModelArgs& args) {
  // The recipes in draw order; the shapes from a model built on the meta
  // device (no memory), so that they cannot drift from the modules'.
  std::vector<std::pair<std::string, ops::InitRecipe>> order;
  if (!args.tie_word_embeddings) order.emplace_back("tok_embeddings.weight", ops::InitRecipe::normal(0.0, 1.0));
  for (int64_t l = 0; l < args.n_layers; ++l)
    for (auto& [leaf, r] : block_init(args, l)) order.emplace_back("layers." + std::to_string(l) + "." + leaf, r);
  order.emplace_back("norm.weight", ops::InitRecipe::ones());
  // Logits start at about unit scale: std dim^-0.5 over dim inputs of unit RMS.
  const double std = 1.0 / std::sqrt(static_cast<double>(args.dim));
  order.emplace_back(args.tie_word_embeddings ? "tok_embeddings.weight" : "output.weight",
                     ops::InitRecipe::trunc_normal(0.0, std, -3.0 * std, 3.0 * std));

  Transformer shapes(args, at::TensorOptions().device(at::kMeta));
  std::map<std::string, std::vector<int64_t>> shape_of;
  for (const auto& item : shapes->named_parameters()) shape_of[item.key()] = item.value().sizes().vec();
  TITAN_INTERNAL_ASSERT(shape_of.size() == order.size(), "init_plan: ", order.size(), " recipes for ",
                        shape_of.size(), " parameters");
  std::vector<ParamInit> plan;
  for (auto& [fqn, r] : order) {
    auto it = shape_of.find(fqn);
    TITAN_INTERNAL_ASSERT(it != shape_of.end(), "init_plan: no parameter ", fqn);
    plan.push_back({fqn, it->second, r});
  }
  return plan;
}

}  // namespace titan::models::llama3
