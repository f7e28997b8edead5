// Lab 08 — the reference solution.
#include "overlap.hpp"

#include <algorithm>

namespace lab08 {

std::optional<Box> overlap(const Box& a, const Box& b) {
  Box region;
  for (size_t d = 0; d < a.offsets.size(); ++d) {
    const int64_t begin = std::max(a.offsets[d], b.offsets[d]);
    const int64_t end = std::min(a.offsets[d] + a.lengths[d], b.offsets[d] + b.lengths[d]);
    if (end <= begin) return std::nullopt;
    region.offsets.push_back(begin);
    region.lengths.push_back(end - begin);
  }
  return region;
}

namespace {
// The part of `t` (the data of box `box`) that `region` covers: a view.
at::Tensor view_of(at::Tensor t, const Box& box, const Box& region) {
  for (size_t d = 0; d < region.offsets.size(); ++d)
    t = t.narrow(static_cast<int64_t>(d), region.offsets[d] - box.offsets[d], region.lengths[d]);
  return t;
}
}  // namespace

void copy_region(at::Tensor& target, const Box& target_box, const at::Tensor& saved, const Box& saved_box,
                 const Box& region) {
  view_of(target, target_box, region).copy_(view_of(saved, saved_box, region));
}

}  // namespace lab08
