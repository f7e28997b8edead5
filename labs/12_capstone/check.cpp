// Lab 12 checker: your box_runs(), first_draws() and init_box()
// (box_init.cpp), checked against torch's own generator and init_weights():
//   1. runs: the runs of boxes in 1-D, 2-D and 3-D parameters against the
//      row-major indices of the same box cut out of arange(numel);
//   2. first draws: your first draw of every parameter of a tiny Llama 3
//      puts a fresh stream exactly where torch's generator is after
//      init_() of the parameters before it (the generator states compared);
//   3. box values: single tensors of every recipe (N(0, 1) with a ragged
//      tail, truncated normal, ones), whole-tensor init against box by box;
//   4. whole models: every parameter of the tiny Llama 3 cut as FSDP 4, TP
//      2, FSDP 2 x TP 2 and an uneven 3 x 5 grid would cut it, the boxes
//      shared between the ranks, each filled by your init_box, against
//      init_weights(): bit for bit;
//   5. a real layout: the model built on the meta device, FSDP-sharded over
//      the ranks by fully_shard, each rank filling the boxes it holds
//      (checkpoint::model_shards) with your init_box, gathered back: bit
//      for bit init_weights().
//
//   labs/check.sh 12           (builds lab12_check from starter/ and runs it)
//   build/bin/lab12_check --nproc 2
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "box_init.hpp"
#include "lab_check.hpp"
#include "titan/checkpoint/sharded_state.hpp"
#include "titan/dist/device_mesh.hpp"
#include "titan/dist/world.hpp"
#include "titan/dtensor/placement.hpp"
#include "titan/launch/program.hpp"
#include "titan/models/llama3/init_plan.hpp"
#include "titan/models/llama3/transformer.hpp"
#include "titan/parallel/fsdp/fully_shard.hpp"

using namespace titan;

namespace {

constexpr uint64_t kSeed = 2024;

struct Box {
  std::vector<int64_t> offsets, sizes;
};

std::string text(at::IntArrayRef v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

at::Tensor cut(const at::Tensor& full, const Box& b) {
  at::Tensor t = full;
  for (size_t d = 0; d < b.offsets.size(); ++d) t = t.narrow(static_cast<int64_t>(d), b.offsets[d], b.sizes[d]);
  return t;
}

// A tiny Llama 3 whose N(0, 1) embedding (251 x 72 elements) ends in a
// ragged block of 16 draws, and whose dims cut unevenly three ways.
models::llama3::ModelArgs tiny_args() {
  models::llama3::ModelArgs a;
  a.dim = 72, a.n_layers = 2, a.n_heads = 4, a.n_kv_heads = 2, a.multiple_of = 32, a.vocab_size = 251;
  a.max_seq_len = 16;
  return a;
}

std::map<std::string, at::Tensor> reference_weights(const models::llama3::ModelArgs& args) {
  torch::manual_seed(kSeed);
  models::llama3::Transformer model(args, at::TensorOptions().dtype(at::kFloat));
  model->init_weights();
  std::map<std::string, at::Tensor> out;
  for (const auto& p : model->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

// ------------------------------------------------------------------ 1

void check_runs() {
  struct Case {
    const char* what;
    std::vector<int64_t> shape;
    Box box;
  };
  const std::vector<Case> cases = {
      {"1-D, the middle", {10}, {{3}, {4}}},
      {"2-D, FSDP rows (whole rows: one run)", {6, 8}, {{2, 0}, {2, 8}}},
      {"2-D, TP columns (a run per row)", {6, 8}, {{0, 4}, {6, 4}}},
      {"2-D, FSDP rows of TP columns", {6, 8}, {{3, 4}, {3, 4}}},
      {"3-D, an inner box", {4, 5, 6}, {{1, 2, 3}, {2, 2, 3}}},
      {"3-D, rows of whole planes", {4, 5, 6}, {{1, 0, 0}, {2, 5, 6}}},
      {"3-D, the middle dim cut", {4, 5, 6}, {{0, 1, 0}, {4, 3, 6}}},
      {"2-D, the whole tensor", {3, 4}, {{0, 0}, {3, 4}}},
      {"2-D, an empty box (an FSDP rank without rows)", {5, 4}, {{5, 0}, {0, 4}}},
  };
  for (const Case& c : cases) {
    int64_t numel = 1, box_numel = 1;
    for (int64_t d : c.shape) numel *= d;
    for (int64_t d : c.box.sizes) box_numel *= d;
    // The reference: each element's row-major index, cut out as the box.
    const at::Tensor want = cut(at::arange(numel, at::kLong).view(c.shape), c.box).contiguous().view({-1});
    const std::vector<lab12::Run> runs = lab12::box_runs(c.shape, c.box.offsets, c.box.sizes);
    std::vector<int64_t> got(static_cast<size_t>(box_numel), -1);
    bool ok = true;
    int64_t last_start = -1;
    std::string why;
    for (const lab12::Run& r : runs) {
      if (r.length <= 0 || r.local < 0 || r.local + r.length > box_numel || r.start < 0 || r.start + r.length > numel) {
        ok = false, why = "a run outside the box or the parameter";
        break;
      }
      if (r.start <= last_start) ok = false, why = "runs not in increasing start order";
      last_start = r.start;
      for (int64_t i = 0; i < r.length; ++i) {
        if (got[r.local + i] != -1) ok = false, why = "an element covered twice";
        got[r.local + i] = r.start + i;
      }
    }
    for (int64_t i = 0; ok && i < box_numel; ++i)
      if (got[i] != want[i].item<int64_t>()) {
        ok = false;
        why = got[i] == -1 ? "box element " + std::to_string(i) + " not covered"
                           : "box element " + std::to_string(i) + " is element " + std::to_string(want[i].item<int64_t>()) +
                                 " of the parameter, your runs say " + std::to_string(got[i]);
      }
    lab::report(ok, std::string("runs: ") + c.what,
                "shape " + text(c.shape) + ", box at " + text(c.box.offsets) + " size " + text(c.box.sizes) + ": " +
                    std::to_string(runs.size()) + " run(s)" + (ok ? "" : "; " + why));
  }
}

// ------------------------------------------------------------------ 2

void check_first_draws(const models::llama3::ModelArgs& args) {
  const auto plan = models::llama3::init_plan(args);
  const std::vector<uint64_t> first = lab12::first_draws(plan);
  if (first.size() != plan.size()) {
    lab::report(false, "first draws", std::to_string(first.size()) + " values for " + std::to_string(plan.size()) +
                                          " parameters");
    return;
  }
  // torch's own generator, initialising the whole parameters one by one;
  // before each, a fresh stream moved to your first draw must be in the
  // very same state.
  at::Generator torch_gen = at::make_generator<at::CPUGeneratorImpl>(kSeed);
  std::string bad;
  for (size_t k = 0; k < plan.size() && bad.empty(); ++k) {
    ops::RandomStream stream(kSeed);
    stream.seek(first[k]);
    if (!at::equal(stream.generator().get_state(), torch_gen.get_state()))
      bad = plan[k].fqn + " (your first draw " + std::to_string(first[k]) + ")";
    at::Tensor t = at::empty(plan[k].shape, at::kFloat);
    switch (plan[k].recipe.kind) {
      case ops::InitRecipe::Kind::kOnes: t.fill_(1.0); break;
      case ops::InitRecipe::Kind::kNormal: t.normal_(plan[k].recipe.mean, plan[k].recipe.std, torch_gen); break;
      case ops::InitRecipe::Kind::kTruncNormal:
        ops::trunc_normal_(t, plan[k].recipe.mean, plan[k].recipe.std, plan[k].recipe.a, plan[k].recipe.b, torch_gen);
        break;
    }
  }
  lab::report(bad.empty(), "first draws",
              bad.empty() ? std::to_string(plan.size()) + " parameters: each first draw is where torch's generator stands "
                                                          "after init_() of the ones before it"
                          : "the stream is not where torch's generator is before " + bad);
}

// ------------------------------------------------------------------ 3

void check_box_values() {
  struct Case {
    const char* what;
    ops::InitRecipe recipe;
    std::vector<int64_t> shape;
    std::vector<Box> boxes;
  };
  const std::vector<Case> cases = {
      {"N(0, 1), [7, 9] (63 elements: a ragged block of 16)", ops::InitRecipe::normal(0, 1), {7, 9},
       {{{0, 0}, {3, 9}}, {{3, 0}, {4, 4}}, {{3, 4}, {4, 5}}}},
      {"N(0, 1), [8, 12] by TP columns", ops::InitRecipe::normal(0, 1), {8, 12}, {{{0, 0}, {8, 6}}, {{0, 6}, {8, 6}}}},
      {"trunc_normal(0, 0.02), [10, 12], FSDP 2 x TP 2", ops::InitRecipe::trunc_normal(0, 0.02), {10, 12},
       {{{0, 0}, {5, 6}}, {{5, 0}, {5, 6}}, {{0, 6}, {5, 6}}, {{5, 6}, {5, 6}}}},
      {"trunc_normal(0, 0.5, +-1), [3, 4, 5], inner boxes", ops::InitRecipe::trunc_normal(0, 0.5, -1, 1), {3, 4, 5},
       {{{0, 0, 0}, {3, 2, 5}}, {{0, 2, 0}, {3, 2, 2}}, {{0, 2, 2}, {3, 2, 3}}}},
      {"ones, [6, 4]", ops::InitRecipe::ones(), {6, 4}, {{{1, 1}, {4, 2}}, {{0, 0}, {6, 1}}}},
  };
  for (const Case& c : cases) {
    at::Tensor whole = at::empty(c.shape, at::kFloat);
    at::manual_seed(kSeed);
    ops::init_(whole, c.recipe);
    ops::RandomStream stream(kSeed);
    double worst = 0;
    for (const Box& b : c.boxes) {
      at::Tensor box = at::zeros(b.sizes, at::kFloat);
      lab12::init_box(box, c.shape, b.offsets, c.recipe, /*first_draw=*/0, stream);
      worst = std::max(worst, (box - cut(whole, b)).abs().max().item<double>());
    }
    lab::report(worst == 0, std::string("box values: ") + c.what,
                std::to_string(c.boxes.size()) + " boxes against the whole tensor's init: max |diff| " +
                    lab::fmt("%.3g", worst) + (worst == 0 ? " (bitwise)" : ""));
  }
}

// ------------------------------------------------------------------ 4

// The boxes of a parameter of `shape` when dim 0 is cut `rows` ways and the
// last dim `cols` ways (torch.chunk's rule), 1-D parameters by rows only.
std::vector<Box> grid(const std::vector<int64_t>& shape, int64_t rows, int64_t cols) {
  std::vector<Box> out;
  const int64_t nd = static_cast<int64_t>(shape.size());
  if (nd == 1) cols = 1;
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r) {
      Box b{std::vector<int64_t>(shape.size(), 0), shape};
      auto [rl, ro] = shard_size_and_offset(shape[0], rows, r);
      b.offsets[0] = ro, b.sizes[0] = rl;
      if (nd > 1) {
        auto [cl, co] = shard_size_and_offset(shape[nd - 1], cols, c);
        b.offsets[nd - 1] = co, b.sizes[nd - 1] = cl;
      }
      out.push_back(b);
    }
  return out;
}

void check_models(const models::llama3::ModelArgs& args, const std::map<std::string, at::Tensor>& ref) {
  const int rank = dist::world().rank(), n = dist::world().size();
  const auto plan = models::llama3::init_plan(args);
  const std::vector<uint64_t> first = lab12::first_draws(plan);
  struct Layout {
    const char* what;
    int64_t rows, cols;
  };
  for (const Layout& l : std::vector<Layout>{{"FSDP 4 (dim-0 chunks)", 4, 1},
                                             {"TP 2 (last-dim halves)", 1, 2},
                                             {"FSDP 2 x TP 2 (rows of the halves)", 2, 2},
                                             {"an uneven 3 x 5 grid", 3, 5}}) {
    // Every box of every parameter, dealt round the ranks; each rank fills
    // its own from one stream, in plan order, as the trainer does.
    ops::RandomStream stream(kSeed);
    int64_t boxes = 0, mine = 0;
    double worst = first.size() == plan.size() ? 0.0 : INFINITY;
    for (size_t k = 0; k < plan.size() && k < first.size(); ++k) {
      for (const Box& b : grid(plan[k].shape, l.rows, l.cols)) {
        if (boxes++ % n != rank) continue;
        ++mine;
        at::Tensor box = at::zeros(b.sizes, at::kFloat);
        lab12::init_box(box, plan[k].shape, b.offsets, plan[k].recipe, first[k], stream);
        if (box.numel() > 0) worst = std::max(worst, (box - cut(ref.at(plan[k].fqn), b)).abs().max().item<double>());
      }
    }
    worst = lab::global_max(worst);
    lab::report(worst == 0, std::string("whole model: ") + l.what,
                std::to_string(boxes) + " boxes of " + std::to_string(plan.size()) + " parameters over " +
                    std::to_string(n) + " rank(s) against init_weights(): max |diff| " + lab::fmt("%.3g", worst) +
                    (worst == 0 ? " (bitwise)" : ""));
  }
}

// ------------------------------------------------------------------ 5

void check_real_fsdp(const models::llama3::ModelArgs& args, const std::map<std::string, at::Tensor>& ref) {
  const dist::World& world = dist::world();
  dist::DeviceMesh mesh(world, {world.size()}, {"dp_shard"});
  // Shapes only; fully_shard allocates this rank's rows (uninitialised).
  models::llama3::Transformer model(args, at::TensorOptions().device(at::kMeta).dtype(at::kFloat));
  for (const auto& block : model->blocks()) fsdp::fully_shard(*block, mesh);
  fsdp::fully_shard(*model, mesh);
  std::map<std::string, checkpoint::TensorShard> held;
  for (auto& s : checkpoint::model_shards({model.get()}, &mesh)) held.emplace(s.fqn, s);
  const auto plan = models::llama3::init_plan(args);
  const std::vector<uint64_t> first = lab12::first_draws(plan);
  ops::RandomStream stream(kSeed);
  int64_t local = 0;
  for (size_t k = 0; k < plan.size() && k < first.size(); ++k) {
    auto it = held.find(plan[k].fqn);
    if (it == held.end() || it->second.numel() == 0) continue;
    at::Tensor box = it->second.local;
    lab12::init_box(box, it->second.global_shape, it->second.offsets, plan[k].recipe, first[k], stream);
    local += box.numel();
  }
  const auto full = fsdp::full_state_dict(*model);  // collective: every rank's rows
  double worst = first.size() == plan.size() ? 0.0 : INFINITY;
  for (const auto& [name, t] : ref) {
    auto it = full.find(name);
    worst = it == full.end() ? INFINITY : std::max(worst, (it->second.cpu() - t).abs().max().item<double>());
  }
  worst = lab::global_max(worst);
  lab::report(worst == 0, "a real layout: fully_shard over " + std::to_string(world.size()) + " rank(s) on the meta device",
              "rank 0 filled the " + std::to_string(local) + " elements of its FSDP rows; gathered against "
                  "init_weights(): max |diff| " +
                  lab::fmt("%.3g", worst) + (worst == 0 ? " (bitwise)" : ""));
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int, char**) {
    dist::init_distributed({.device = "cpu"});
    const models::llama3::ModelArgs args = tiny_args();
    const auto ref = reference_weights(args);
    check_runs();
    check_first_draws(args);
    check_box_values();
    check_models(args, ref);
    check_real_fsdp(args, ref);
    return lab::finish();
  });
}
