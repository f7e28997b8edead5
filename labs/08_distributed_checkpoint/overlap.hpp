#pragma once
/// @file
/// @brief Lab 08: the geometry of a resharding load. A saved checkpoint
/// holds each tensor as boxes (one per saving rank); a rank of the loading
/// job needs one box of its own; it fills it from the overlap with every
/// saved box. The checker loads real checkpoints with your two functions.

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace lab08 {

/// @brief A box of a global tensor: where it starts and how far it extends
/// in each dimension (global coordinates; offsets.size() == lengths.size()
/// == the tensor's number of dims).
struct Box {
  std::vector<int64_t> offsets;
  std::vector<int64_t> lengths;
};

/// @brief The part of the global tensor that lies in both `a` and `b`, or
/// nullopt when they do not meet (boxes that only touch do not meet: a box
/// of rows 0-2 has lengths {3} and ends before row 3).
std::optional<Box> overlap(const Box& a, const Box& b);

/// @brief Copies `region` (global coordinates, inside both boxes) from
/// `saved`, the data of box `saved_box`, into `target`, the data of box
/// `target_box` (both tensors shaped like their boxes' lengths).
void copy_region(at::Tensor& target, const Box& target_box, const at::Tensor& saved, const Box& saved_box,
                 const Box& region);

}  // namespace lab08
