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

/// @brief `n_layers` over `num_stages` stages as evenly as possible. When
/// they do not divide, some stages hold one layer more; those are the
/// middle stages first, then the first stage, then the last: the first
/// stage also runs the embeddings (a cheap lookup) and the last one the
/// output projection and the loss (a vocabulary-sized matmul), so the ends
/// get the lighter share. Every stage needs at least one layer; fewer
/// layers than stages is a titan::Error naming both numbers.
std::vector<LayerRange> split_layers_evenly(int64_t n_layers, int64_t num_stages);

/// @brief Stages of `layers_per_stage` layers each (torchtitan's
/// pipeline_parallel_layers_per_stage): n_layers must divide by it.
std::vector<LayerRange> split_layers_per_stage(int64_t n_layers, int64_t layers_per_stage);

/// @brief Stages cut before each split point (torchtitan's
/// pipeline_parallel_split_points: "layers.4" or "4"), strictly increasing
/// within (0, n_layers): k points make k+1 stages.
std::vector<LayerRange> split_layers_at(int64_t n_layers, const std::vector<std::string>& split_points);

/// @brief "0-4 | 5-9 | ..." (inclusive layer numbers), for banners and errors.
std::string describe_split(const std::vector<LayerRange>& ranges);

}  // namespace titan::pp
