// Lab 08 checker: your overlap() and copy_region() (overlap.cpp), checked
//   1. on boxes: disjoint, touching, nested and partly overlapping boxes in
//      1-D and 2-D against the intervals worked out by hand;
//   2. on a real checkpoint: rank 0 saves a [10, 12] and a [7] tensor as 4
//      FSDP-style row boxes (3, 3, 3, 1 rows) with titan's writer; then every
//      rank reads the boxes a 2-rank TP layout (column halves), a 3-rank
//      FSDP layout and one process need, with YOUR functions, from the files
//      (titan's safetensors reader), and compares with the original tensors
//      (bitwise: loading only copies).
//
//   labs/check.sh 08           (builds lab08_check from starter/ and runs it)
//   build/bin/lab08_check --nproc 2
#include <ATen/ATen.h>

#include <cstdio>
#include <string>
#include <vector>

#include "lab_check.hpp"
#include "overlap.hpp"
#include "titan/checkpoint/dcp.hpp"
#include "titan/checkpoint/safetensors.hpp"
#include "titan/util/files.hpp"
#include "titan/dist/world.hpp"
#include "titan/dtensor/placement.hpp"
#include "titan/launch/program.hpp"

using namespace titan;
using lab08::Box;

namespace {

bool same(const std::optional<Box>& got, const std::optional<Box>& want) {
  if (got.has_value() != want.has_value()) return false;
  return !got || (got->offsets == want->offsets && got->lengths == want->lengths);
}

std::string text(const std::optional<Box>& b) {
  if (!b) return "none";
  std::string s = "{";
  for (size_t d = 0; d < b->offsets.size(); ++d)
    s += (d ? ", " : "") + std::to_string(b->offsets[d]) + "+" + std::to_string(b->lengths[d]);
  return s + "}";
}

// Rank r of n's box when `shape` is split along `dim` as FSDP splits rows.
Box split_box(const std::vector<int64_t>& shape, int64_t dim, int64_t r, int64_t n) {
  Box b{std::vector<int64_t>(shape.size(), 0), shape};
  auto [len, off] = shard_size_and_offset(shape[dim], n, r);
  b.offsets[dim] = off;
  b.lengths[dim] = len;
  return b;
}

at::Tensor slice(const at::Tensor& full, const Box& b) {
  at::Tensor t = full;
  for (size_t d = 0; d < b.offsets.size(); ++d) t = t.narrow(static_cast<int64_t>(d), b.offsets[d], b.lengths[d]);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int, char**) {
    const dist::World& world = dist::init_distributed({.device = "cpu"});
    const int rank = world.rank(), n = world.size();

    // ---------------------------------------------------------------- 1
    struct Case {
      const char* what;
      Box a, b;
      std::optional<Box> want;
    };
    const std::vector<Case> cases = {
        {"1-D, disjoint", {{0}, {3}}, {{5}, {2}}, std::nullopt},
        {"1-D, touching (rows 0-2 and 3-5)", {{0}, {3}}, {{3}, {3}}, std::nullopt},
        {"1-D, partly", {{2}, {4}}, {{4}, {5}}, Box{{4}, {2}}},
        {"1-D, nested", {{0}, {10}}, {{3}, {2}}, Box{{3}, {2}}},
        {"2-D, rows x columns", {{0, 6}, {10, 6}}, {{3, 0}, {3, 12}}, Box{{3, 6}, {3, 6}}},
        {"2-D, meet in rows only", {{0, 0}, {4, 4}}, {{2, 4}, {4, 4}}, std::nullopt},
    };
    bool boxes_ok = true;
    std::string first_bad;
    for (const Case& c : cases) {
      const auto got = lab08::overlap(c.a, c.b);
      const auto back = lab08::overlap(c.b, c.a);
      if (!same(got, c.want) || !same(back, c.want)) {
        boxes_ok = false;
        if (first_bad.empty())
          first_bad = std::string(c.what) + ": got " + text(got) + ", want " + text(c.want);
      }
    }
    lab::report(boxes_ok, "overlap", boxes_ok ? "6 box pairs, both orders" : first_bad);

    // ---------------------------------------------------------------- 2
    const std::string dir = files::temp_dir() + "/titan_lab08_np" + std::to_string(n);
    const std::map<std::string, at::Tensor> full = {{"w", lab::seeded(1, {10, 12})}, {"norm", lab::seeded(2, {7})}};
    if (rank == 0) {
      files::remove_all(dir);
      const std::string partial = dir + "/step-1.partial";
      files::make_directories(partial);
      std::vector<checkpoint::RankFile> files;
      for (int r = 0; r < 4; ++r) {
        checkpoint::ShardedState shards;
        for (const auto& [fqn, t] : full) {
          const Box b = split_box(t.sizes().vec(), 0, r, 4);
          shards.push_back({fqn, slice(t, b).clone(), t.sizes().vec(), b.offsets, true});
        }
        files.push_back(checkpoint::write_rank_file(partial, r, shards));
      }
      checkpoint::finalize_checkpoint(partial, dir + "/step-1", 1, files, {{"content", "model"}});
    }
    world.group()->barrier();
    const checkpoint::CheckpointInfo info = checkpoint::open_checkpoint(dir + "/step-1");

    // What a rank of each loading layout needs: (layout, dim, ranks).
    struct Layout {
      const char* name;
      int64_t dim, ranks;
    };
    double worst = 0;
    int64_t filled = 0, needed = 0;
    for (const Layout& l : {Layout{"TP 2 (column halves)", 1, 2}, Layout{"FSDP 3 (rows)", 0, 3},
                            Layout{"one process", 0, 1}}) {
      for (const auto& [fqn, t] : full) {
        const int64_t dim = std::min<int64_t>(l.dim, t.dim() - 1);
        for (int64_t r = rank; r < l.ranks; r += n) {
          const Box want = split_box(t.sizes().vec(), dim, r, l.ranks);
          at::Tensor target = at::full(want.lengths, std::nan(""), at::kFloat);
          for (const auto& c : info.metadata.at("tensors").at(fqn).at("chunks")) {
            const Box saved_box{c.at("offsets").get<std::vector<int64_t>>(), c.at("lengths").get<std::vector<int64_t>>()};
            const auto region = lab08::overlap(want, saved_box);
            if (!region) continue;
            const std::string path = info.dir + "/" + c.at("file").get<std::string>();
            const auto header = checkpoint::read_safetensors_header(path);
            const at::Tensor saved = checkpoint::read_safetensors_tensor(path, header.entries.at(fqn));
            lab08::copy_region(target, want, saved, saved_box, *region);
          }
          needed += target.numel();
          filled += target.numel() - at::isnan(target).sum().item<int64_t>();
          const at::Tensor diff = (at::nan_to_num(target, 1e30) - slice(t, want)).abs();
          worst = std::max(worst, diff.numel() ? diff.max().item<double>() : 0.0);
        }
      }
    }
    worst = lab::global_max(worst);
    const double missing = lab::global_max(static_cast<double>(needed - filled));
    lab::report(missing == 0, "coverage",
                missing == 0 ? "every element of every loading box was filled from a saved box"
                             : lab::fmt("%.0f elements left unfilled on some rank", missing));
    lab::report(worst == 0, "values", lab::fmt("max |loaded - original| %.3g over TP 2, FSDP 3 and one process", worst));
    world.group()->barrier();
    if (rank == 0) files::remove_all(dir);
    return lab::finish();
  });
}
