#pragma once
/// @file
/// @brief Lab 12: the offset rule of sharded initialisation. A rank of a
/// large job holds a box of each parameter (FSDP's rows inside TP's rows
/// or columns) and must fill it with exactly the numbers the
/// single-process init_weights() would put there, without ever making the
/// whole parameter. torch's CPU generator is one stream of draws and
/// element i of a parameter takes draw (its first draw + i), so a box is
/// a set of runs of consecutive elements, each drawn from its own place in
/// the stream. The checker initialises whole models box by box with your
/// functions and compares them with init_weights(), bit for bit.

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "titan/models/llama3/init_plan.hpp"
#include "titan/ops/init.hpp"

namespace lab12 {

/// @brief `length` elements of a box that follow each other in the whole
/// parameter's row-major order.
struct Run {
  int64_t start = 0;   ///< row-major index, in the whole parameter, of the run's first element
  int64_t local = 0;   ///< row-major index of that element in the box
  int64_t length = 0;  ///< elements in the run
};

/// @brief The runs of the box that starts at `offsets` and extends `sizes`
/// (per dim) in a parameter of `shape`, in increasing `start` order,
/// covering every element of the box exactly once. Empty for an empty box.
std::vector<Run> box_runs(at::IntArrayRef shape, at::IntArrayRef offsets, at::IntArrayRef sizes);

/// @brief The first draw of every parameter of `plan`, in plan order: where
/// the whole model's initialisation reaches it in the random stream of the seed (the
/// draws of every parameter before it; ops::init_draws says how many a
/// parameter takes).
std::vector<uint64_t> first_draws(const std::vector<titan::models::llama3::ParamInit>& plan);

/// @brief Fills `box` (contiguous fp32 on any device, shaped like the box)
/// with the values ops::init_() of the whole parameter of `shape` would
/// give it by `recipe`, when the parameter's first draw is `first_draw` of
/// `stream`. Uses box_runs().
void init_box(at::Tensor& box, at::IntArrayRef shape, at::IntArrayRef offsets, const titan::ops::InitRecipe& recipe,
              uint64_t first_draw, titan::ops::RandomStream& stream);

}  // namespace lab12
