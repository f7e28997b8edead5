#pragma once
/// @file
/// @brief Which layers each pipeline stage holds.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace titan::pp {

/// @brief Layers [begin, end) of one stage.
struct LayerRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

/// @brief torchtitan's split of `n_layers` over `num_stages` stages
/// (generate_llm_fqn_per_model_part, v0.2.2): the embeddings count as
/// `input_weight` layers and the final norm + output as `output_weight`
/// (torchtitan's pipeline_parallel_first/last_stage_less_layers, both 1 by
/// default), so the first and last stages hold that many fewer layers; the
/// n_layers + both weights are spread evenly, one more to each of the first
/// stages while the remainder lasts. One stage holds everything. An end stage
/// whose weight equals its share holds no layer (only the embeddings, or
/// only the norm and output), as in torchtitan. A titan::Error where
/// torchtitan raises: more stages than n_layers + the weights, or a weight
/// above the layers per stage.
std::vector<LayerRange> split_layers(int64_t n_layers, int64_t num_stages, int64_t input_weight = 0,
                                     int64_t output_weight = 0);

/// @brief How many stages torchtitan makes of `layers_per_stage`
/// (pipeline_parallel_layers_per_stage): ceil((n_layers + input_weight +
/// output_weight) / layers_per_stage), the weights counted as in split_layers.
int64_t stages_for_layers_per_stage(int64_t n_layers, int64_t layers_per_stage, int64_t input_weight = 0,
                                    int64_t output_weight = 0);

/// @brief Stages cut before each split point (torchtitan's
/// pipeline_parallel_split_points: "layers.4" or "4"), strictly increasing
/// within (0, n_layers): k points make k+1 stages.
std::vector<LayerRange> split_layers_at(int64_t n_layers, const std::vector<std::string>& split_points);

/// @brief "0-4 | 5-9 | ..." (inclusive layer numbers; "none" for a stage
/// without layers), for banners and errors.
std::string describe_split(const std::vector<LayerRange>& ranges);

}  // namespace titan::pp
