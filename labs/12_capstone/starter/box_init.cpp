// Lab 12 — YOUR code: fill the TODO(lab) holes (see ../README.md).
#include "box_init.hpp"

#include "titan/util/error.hpp"

namespace lab12 {

std::vector<Run> box_runs(at::IntArrayRef shape, at::IntArrayRef offsets, at::IntArrayRef sizes) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  int64_t box_numel = 1;
  for (int64_t d = 0; d < nd; ++d) box_numel *= sizes[d];
  if (box_numel == 0) return {};
  // TODO(lab): the runs of the box in the whole parameter's row-major order.
  //   1. the parameter's row-major strides: stride[nd-1] = 1,
  //      stride[d] = stride[d+1] * shape[d+1];
  //   2. j = the first dim from which on the box spans every later dim
  //      whole (walk back from the last dim while sizes[j] == shape[j]):
  //      a run is sizes[j] * stride[j] consecutive elements;
  //   3. one run per index (i_0, ..., i_{j-1}) of the dims before j, in
  //      row-major order: start = sum over d < j of (offsets[d] + i_d) *
  //      stride[d], plus offsets[j] * stride[j]; local = runs so far * run.
  // As written, the box is drawn as if it were the parameter's beginning.
  (void)shape, (void)offsets;
  return {Run{0, 0, box_numel}};
}

std::vector<uint64_t> first_draws(const std::vector<titan::models::llama3::ParamInit>& plan) {
  // TODO(lab): parameter k's first draw is the sum of the draws of
  //            parameters 0..k-1 (titan::ops::init_draws(recipe, numel)).
  return std::vector<uint64_t>(plan.size(), 0);
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
        // TODO(lab): element i of the parameter is draw first_draw + i.
        //            Seek to this run's first element's draw.
        stream.seek(first_draw);
        titan::ops::trunc_normal_(piece, recipe.mean, recipe.std, recipe.a, recipe.b, stream.generator());
        stream.consumed(static_cast<uint64_t>(r.length));
        break;
      case Kind::kNormal: {
        // normal_ turns aligned blocks of 16 draws into 16 normals (and a
        // ragged tail into 16 more draws), so a run is drawn from its
        // block's start: the library's init_box_ on the run as a 1-D box of
        // the flattened parameter does that alignment (given).
        const std::vector<int64_t> flat_shape = {numel}, flat_offset = {r.start};
        titan::ops::init_box_(piece, flat_shape, flat_offset, recipe, first_draw, stream);
        break;
      }
    }
    flat.narrow(0, r.local, r.length).copy_(piece);
  }
}

}  // namespace lab12
