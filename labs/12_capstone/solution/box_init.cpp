// Lab 12 — the reference solution (read it after you pass).
#include "box_init.hpp"

#include "titan/util/error.hpp"

namespace lab12 {

std::vector<Run> box_runs(at::IntArrayRef shape, at::IntArrayRef offsets, at::IntArrayRef sizes) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  int64_t box_numel = 1;
  for (int64_t d = 0; d < nd; ++d) box_numel *= sizes[d];
  if (box_numel == 0) return {};
  if (nd == 0) return {Run{0, 0, 1}};
  // The whole parameter's row-major strides.
  std::vector<int64_t> stride(static_cast<size_t>(nd), 1);
  for (int64_t d = nd - 2; d >= 0; --d) stride[d] = stride[d + 1] * shape[d + 1];
  // The box is contiguous in the parameter from dim j on, where j is the
  // first dim after which the box spans every dim whole: one run per
  // index of the dims before j.
  int64_t j = nd - 1;
  while (j > 0 && sizes[j] == shape[j]) --j;
  const int64_t run = sizes[j] * stride[j];
  std::vector<Run> runs;
  std::vector<int64_t> index(static_cast<size_t>(j), 0);  // a counter over dims [0, j) of the box
  for (int64_t local = 0; local < box_numel; local += run) {
    int64_t start = offsets[j] * stride[j];
    for (int64_t d = 0; d < j; ++d) start += (offsets[d] + index[d]) * stride[d];
    runs.push_back(Run{start, local, run});
    for (int64_t d = j - 1; d >= 0; --d) {
      if (++index[d] < sizes[d]) break;
      index[d] = 0;
    }
  }
  return runs;
}

std::vector<uint64_t> first_draws(const std::vector<titan::models::llama3::ParamInit>& plan) {
  std::vector<uint64_t> out;
  uint64_t next = 0;
  for (const auto& p : plan) {
    out.push_back(next);
    int64_t numel = 1;
    for (int64_t d : p.shape) numel *= d;
    next += titan::ops::init_draws(p.recipe, numel);
  }
  return out;
}

void init_box(at::Tensor& box, at::IntArrayRef shape, at::IntArrayRef offsets, const titan::ops::InitRecipe& recipe,
              uint64_t first_draw, titan::ops::RandomStream& stream) {
  using Kind = titan::ops::InitRecipe::Kind;
  TITAN_CHECK(box.is_contiguous() && box.scalar_type() == at::kFloat, "init_box: a contiguous fp32 box, please");
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  at::NoGradGuard no_grad;
  at::Tensor flat = box.view({-1});
  for (const Run& r : box_runs(shape, offsets, box.sizes())) {
    at::Tensor piece = at::empty({r.length}, at::TensorOptions().dtype(at::kFloat));  // made on the CPU
    switch (recipe.kind) {
      case Kind::kOnes: piece.fill_(1.0); break;
      case Kind::kTruncNormal:
        // Element i of the parameter is draw first_draw + i: the run's
        // first element is draw first_draw + start, and uniform_ takes the
        // following ones in order.
        stream.seek(first_draw + static_cast<uint64_t>(r.start));
        titan::ops::trunc_normal_(piece, recipe.mean, recipe.std, recipe.a, recipe.b, stream.generator());
        stream.consumed(static_cast<uint64_t>(r.length));
        break;
      case Kind::kNormal: {
        // normal_ turns aligned blocks of 16 draws into 16 normals (and a
        // ragged tail into 16 more draws), so a run is drawn from its
        // block's start: the library's init_box_ on the run as a 1-D box of
        // the flattened parameter does that alignment.
        const std::vector<int64_t> flat_shape = {numel}, flat_offset = {r.start};
        titan::ops::init_box_(piece, flat_shape, flat_offset, recipe, first_draw, stream);
        break;
      }
    }
    flat.narrow(0, r.local, r.length).copy_(piece);
  }
}

}  // namespace lab12
