// The engine of DTensor::redistribute: moves a local piece from one list of
// placements to another, one mesh dimension at a time.
//
// Shards on the same tensor dim nest in mesh-dimension order (mesh dim 0 cuts
// the global tensor, mesh dim 1 cuts that chunk, ...). To keep that order
// right the work runs in two passes:
//   1. from the last mesh dim to the first, take away what must go:
//      Shard -> Replicate (all-gather), Partial -> Replicate (all-reduce),
//      and the direct moves Partial -> Shard (reduce-scatter) and
//      Shard(a) -> Shard(b) (all-to-all) where no other mesh dim cuts the
//      same tensor dims;
//   2. from the first mesh dim to the last, cut what is new:
//      Replicate -> Shard (a local slice, no communication) and
//      Replicate -> Partial.
#include <ATen/ATen.h>

#include "titan/dtensor/dtensor.hpp"
#include "titan/util/error.hpp"

namespace titan {
namespace {

bool involves(const Placement& p, int64_t d) { return p.is_shard(d); }

struct Redistributor {
  const dist::DeviceMesh& mesh;
  const std::vector<int64_t>& global_shape;
  Placements cur;
  const Placements& dst;

  // Size of tensor dim d as seen at mesh dim i: the global size cut by the
  // shards of the outer mesh dims (j < i) currently in place.
  int64_t level_size(int i, int64_t d) const {
    int64_t size = global_shape[d];
    for (int j = 0; j < i; ++j)
      if (cur[j].is_shard(d)) size = shard_size_and_offset(size, mesh.size(j), mesh.coordinate()[j]).first;
    return size;
  }

  // True when a mesh dim before i changes how tensor dim d is cut.
  bool outer_change_on(int i, int64_t d) const {
    for (int j = 0; j < i; ++j)
      if (cur[j] != dst[j] && (involves(cur[j], d) || involves(dst[j], d))) return true;
    return false;
  }

  // True when a mesh dim other than i cuts tensor dim d (now or after).
  bool others_cut(int i, int64_t d) const {
    for (int j = 0; j < mesh.ndim(); ++j)
      if (j != i && (involves(cur[j], d) || involves(dst[j], d))) return true;
    return false;
  }

  at::Tensor gather(const at::Tensor& local, int i, int64_t d) {
    const int64_t k = mesh.size(i);
    const int64_t level = level_size(i, d);
    const int64_t full = (level + k - 1) / k;
    at::Tensor padded = local;
    if (local.size(d) < full) {
      std::vector<int64_t> pad = local.sizes().vec();
      pad[d] = full - local.size(d);
      padded = at::cat({local, at::zeros(pad, local.options())}, d);
    }
    at::Tensor all = mesh.group(i)->all_gather(padded, d);
    if (level == full * k) return all;
    std::vector<at::Tensor> parts;
    for (int64_t r = 0; r < k; ++r) {
      auto [len, off] = shard_size_and_offset(level, k, r);
      parts.push_back(all.narrow(d, r * full, len));
      (void)off;
    }
    return at::cat(parts, d);
  }

  at::Tensor slice(const at::Tensor& local, int i, int64_t d) const {
    auto [len, off] = shard_size_and_offset(local.size(d), mesh.size(i), mesh.coordinate()[i]);
    return local.narrow(d, off, len).clone(at::MemoryFormat::Contiguous);
  }

  at::Tensor reduce_scatter(const at::Tensor& local, int i, int64_t d, dist::ReduceOp op) const {
    const int64_t k = mesh.size(i);
    const int64_t level = local.size(d);
    const int64_t full = (level + k - 1) / k;
    at::Tensor padded = local;
    if (level < full * k) {
      std::vector<int64_t> pad = local.sizes().vec();
      pad[d] = full * k - level;
      padded = at::cat({local, at::zeros(pad, local.options())}, d);
    }
    at::Tensor mine = mesh.group(i)->reduce_scatter(padded, d, op);
    auto [len, off] = shard_size_and_offset(level, k, mesh.coordinate()[i]);
    (void)off;
    return len == full ? mine : mine.narrow(d, 0, len).contiguous();
  }

  at::Tensor run(at::Tensor local) {
    const int n = mesh.ndim();
    // Pass 1: take away, innermost mesh dim first.
    for (int i = n - 1; i >= 0; --i) {
      const Placement from = cur[i];
      const Placement to = dst[i];
      if (from.is_shard()) {
        const int64_t a = from.dim;
        bool must = from != to || outer_change_on(i, a);
        if (!must) continue;
        if (to.is_shard() && !outer_change_on(i, a) && !others_cut(i, a) && !others_cut(i, to.dim) &&
            global_shape[a] % mesh.size(i) == 0 && global_shape[to.dim] % mesh.size(i) == 0) {
          local = mesh.group(i)->all_to_all(local, to.dim, a);
          cur[i] = to;
        } else {
          local = gather(local, i, a);
          cur[i] = Placement::replicate();
        }
      } else if (from.is_partial() && from != to) {
        if (to.is_shard() && !outer_change_on(i, to.dim)) {
          local = reduce_scatter(local, i, to.dim, from.reduce);
          cur[i] = to;
        } else {
          local = local.clone(at::MemoryFormat::Contiguous);
          mesh.group(i)->all_reduce(local, from.reduce);
          cur[i] = Placement::replicate();
        }
      }
    }
    // Pass 2: cut what is new, outermost mesh dim first.
    for (int i = 0; i < n; ++i) {
      if (cur[i] == dst[i]) continue;
      TITAN_CHECK(cur[i].is_replicate(), "redistribute: internal: mesh dim ", i, " is ", cur[i].str(),
                  " before becoming ", dst[i].str());
      if (dst[i].is_shard()) {
        local = slice(local, i, dst[i].dim);
      } else if (dst[i].is_partial()) {
        // Sum: one coordinate keeps the value, the rest hold zeros. Avg: all
        // keep it, since the average of equal values is that value.
        if (dst[i].reduce == dist::ReduceOp::Sum && mesh.coordinate()[i] != 0)
          local = at::zeros_like(local);
        else
          local = local.clone();
      }
      cur[i] = dst[i];
    }
    return local;
  }
};

}  // namespace

at::Tensor redistribute_local(const at::Tensor& local, const dist::DeviceMesh& mesh,
                              const std::vector<int64_t>& global_shape, const Placements& from,
                              const Placements& to) {
  TITAN_CHECK(static_cast<int>(from.size()) == mesh.ndim() && static_cast<int>(to.size()) == mesh.ndim(),
              "redistribute: ", to_string(from), " -> ", to_string(to), " on a ", mesh.ndim(), "-D mesh");
  for (const Placements* ps : {&from, &to})
    for (const Placement& p : *ps)
      TITAN_CHECK(!p.is_shard() || (p.dim >= 0 && p.dim < static_cast<int64_t>(global_shape.size())),
                  "redistribute: ", p.str(), " on a ", global_shape.size(), "-D tensor");
  Redistributor r{mesh, global_shape, from, to};
  return r.run(local);
}

}  // namespace titan
