// Saving in Hugging Face format from many ranks (np2, np4): every rank
// writes its rows of one folder (save_hf_shards; [checkpoint]
// last_save_in_hf), and no rank gathers a tensor. The folder must hold the
// whole tensors exactly, read back by titan's HF reader (whose q/k
// permutation is the state-dict adapter's, applied to whole tensors, not
// the writer's row-by-row placement), and be byte for byte the folder one
// process writes from the gathered tensors (write_hf_folder, which
// transformers reads in the checkpoint_hf_transformers test).
#include <gtest/gtest.h>

#include <cstdio>
#include <set>

#include "checkpoint_dist_util.hpp"
#include "support/dist_test.hpp"
#include "titan/checkpoint/dcp.hpp"
#include "titan/checkpoint/file_io.hpp"
#include "titan/checkpoint/hf_folder.hpp"
#include "titan/checkpoint/hf_sharded_save.hpp"
#include "titan/models/llama3/state_dict_adapter.hpp"
#include "titan/util/error.hpp"
#include "titan/util/files.hpp"

namespace {

namespace ck = titan::checkpoint;
namespace files = titan::files;
using namespace titan::testing::checkpoint_dist;
using titan::models::llama3::ModelArgs;
using titan::models::llama3::StateDict;

bool leader() { return titan::testing::world().rank() == 0; }

// The files of `got` are those of `want`, byte for byte.
void expect_same_folder(const std::string& got, const std::string& want) {
  const std::vector<std::string> want_files = files::list_files(want), got_files = files::list_files(got);
  ASSERT_EQ(got_files.size(), want_files.size()) << got << " vs " << want;
  for (const std::string& w : want_files) {
    const std::string name = files::base_name(w);
    EXPECT_TRUE(ck::read_text_file(got + "/" + name) == ck::read_text_file(w)) << name << " differs";
  }
}

// What titan's HF reader finds in `folder` is `state` cast to `dtype`, bitwise.
void expect_holds(const std::string& folder, const StateDict& state, at::ScalarType dtype) {
  const ck::HfCheckpoint back = ck::read_hf_folder(folder);
  ASSERT_EQ(back.titan_state.size(), state.size());
  for (const auto& [name, w] : state) {
    ASSERT_TRUE(back.titan_state.count(name)) << name;
    EXPECT_TRUE(at::equal(back.titan_state.at(name), w.cpu().to(dtype))) << name;
  }
}

ModelArgs eight_heads() {
  ModelArgs a = titan::testing::tiny_model();
  a.n_heads = 8, a.n_kv_heads = 4;  // head_dim 8: the boxes below cut heads
  return a;
}

// Boxes of `state` for `rank` of `n`, as no parallel layout cuts them: rows
// cut off head boundaries, every other matrix also cut between columns,
// boxes dealt round-robin (a rank may hold several of one tensor, or none),
// 1-D tensors held whole by every rank with one primary. `skip` leaves one
// box out; `twice` makes every rank primary for the norms.
ck::ShardedState odd_boxes(const StateDict& state, const ModelArgs& args, int rank, int n, bool skip = false,
                           bool twice = false) {
  ck::ShardedState out;
  int64_t i = 0;
  for (const auto& [name, shape] : titan::models::llama3::titan_llama_shapes(args)) {
    const at::Tensor& w = state.at(name);
    if (shape.size() == 1) {
      out.push_back({name, w, shape, {0}, twice || rank == i % n});
      ++i;
      continue;
    }
    std::vector<int64_t> row_cuts = {0}, col_cuts = {0};
    for (int k = 1; k < n; ++k) row_cuts.push_back(shape[0] * k / n + 3);
    row_cuts.push_back(shape[0]);
    if (i % 2 == 1) col_cuts.push_back(shape[1] / 2 - 5);
    col_cuts.push_back(shape[1]);
    int64_t piece = 0;
    for (size_t r = 0; r + 1 < row_cuts.size(); ++r)
      for (size_t c = 0; c + 1 < col_cuts.size(); ++c, ++piece) {
        if ((piece + i) % n != rank) continue;
        if (skip && i == 1 && piece == 0) continue;
        const at::Tensor box = w.narrow(0, row_cuts[r], row_cuts[r + 1] - row_cuts[r])
                                   .narrow(1, col_cuts[c], col_cuts[c + 1] - col_cuts[c]);
        out.push_back({name, box, shape, {row_cuts[r], col_cuts[c]}, true});
      }
    ++i;
  }
  // And a rank without rows of a tensor (an FSDP rank past its end).
  out.push_back({"layers.0.attention.wq.weight", at::empty({0, args.dim}), state.at("layers.0.attention.wq.weight")
                                                                                 .sizes()
                                                                                 .vec(),
                 {0, 0}, true});
  return out;
}

StateDict seeded_state(const ModelArgs& args) {
  StateDict state;
  uint64_t seed = 100;
  for (const auto& [name, shape] : titan::models::llama3::titan_llama_shapes(args))
    state[name] = titan::testing::seeded(seed++, shape).cpu();
  return state;
}

TEST(HfSaveDist, EveryRanksBoxesMakeTheFolderOneProcessWrites) {
  SharedDir dir("hf_boxes");
  const int rank = titan::testing::world().rank(), n = titan::testing::world().size();
  const ModelArgs args = eight_heads();
  const StateDict state = seeded_state(args);
  constexpr int64_t kShard = 60'000;  // several files (the embedding alone is 256 KB in bfloat16)
  const ck::ShardedState boxes = odd_boxes(state, args, rank, n);
  ck::save_hf_shards(dir.path() + "/ranks", boxes, args, at::kBFloat16, &world_group(), kShard);
  if (leader()) {
    ck::write_hf_folder(dir.path() + "/one", state, args, at::kBFloat16, kShard);
    expect_same_folder(dir.path() + "/ranks", dir.path() + "/one");
    expect_holds(dir.path() + "/ranks", state, at::kBFloat16);
    std::printf("[%d ranks, %zu boxes on rank 0] %zu files, byte for byte those of one process; the tensors read "
                "back bitwise\n",
                n, boxes.size(), files::list_files(dir.path() + "/one").size());
  }
  // float32 into one file: the single-file layout, no index.
  ck::save_hf_shards(dir.path() + "/ranks32", boxes, args, at::kFloat, &world_group());
  if (leader()) {
    ck::write_hf_folder(dir.path() + "/one32", state, args, at::kFloat);
    expect_same_folder(dir.path() + "/ranks32", dir.path() + "/one32");
    expect_holds(dir.path() + "/ranks32", state, at::kFloat);
  }
  world_group().barrier();
}

TEST(HfSaveDist, ElementsNoRankWroteOrTwoWroteAreAnErrorOnEveryRank) {
  SharedDir dir("hf_holes");
  const int rank = titan::testing::world().rank(), n = titan::testing::world().size();
  const ModelArgs args = eight_heads();
  const StateDict state = seeded_state(args);
  auto error_of = [&](const ck::ShardedState& boxes, const std::string& sub) {
    try {
      ck::save_hf_shards(dir.path() + "/" + sub, boxes, args, at::kFloat, &world_group());
    } catch (const titan::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string hole = error_of(odd_boxes(state, args, rank, n, /*skip=*/true), "hole");
  EXPECT_NE(hole.find("the ranks wrote"), std::string::npos) << hole;
  EXPECT_NE(hole.find("of layers.0.attention.wq.weight (a part no rank holds as primary)"), std::string::npos) << hole;
  const std::string twice = error_of(odd_boxes(state, args, rank, n, false, /*twice=*/true), "twice");
  EXPECT_NE(twice.find("(a part saved by two ranks)"), std::string::npos) << twice;
  // A box of another model: one line on every rank, before any file is made.
  ck::ShardedState wrong = odd_boxes(state, args, rank, n);
  if (rank == n - 1) wrong.back().global_shape = {7, 7};
  const std::string shape = error_of(wrong, "shape");
  EXPECT_NE(shape.find(rank == n - 1 ? "has shape [7, 7]" : "failed on rank"), std::string::npos) << shape;
  if (leader()) {
    // None of them is a folder a reader would take (no config.json).
    for (const char* sub : {"hole", "twice", "shape"}) EXPECT_FALSE(ck::is_hf_folder(dir.path() + "/" + sub)) << sub;
    std::printf("refused on every rank: %s | %s | %s\n", hole.c_str(), twice.c_str(), shape.c_str());
  }
  world_group().barrier();
}

// The trainer's last save under each layout: step-6 is the HF folder of the
// run's gathered weights in export_dtype; step-3 stays the full checkpoint
// a later run resumes from.
void expect_last_save_in_hf(JobConfig cfg, const std::string& what, bool tied = false) {
  SCOPED_TRACE(what);
  cfg.checkpoint.model_weights_only = true;
  cfg.checkpoint.last_save_in_hf = true;
  cfg.checkpoint.export_dtype = "bfloat16";
  const TrainRun run = train(cfg, quiet(cfg, tied));
  const std::string folder = cfg.job.dump_folder + "/checkpoint";
  if (leader()) {
    EXPECT_TRUE(ck::is_hf_folder(folder + "/step-6"));
    EXPECT_EQ(ck::list_checkpoints(folder), std::vector<int64_t>{3});
    expect_holds(folder + "/step-6", run.weights, at::kBFloat16);
    ck::write_hf_folder(cfg.job.dump_folder + "/gathered", run.weights, run.args, at::kBFloat16);
    expect_same_folder(folder + "/step-6", cfg.job.dump_folder + "/gathered");
    std::printf("[%s] step-6 in Hugging Face format: the gathered weights in bfloat16, byte for byte one "
                "process's folder\n",
                what.c_str());
  }
  world_group().barrier();
}

TEST(HfSaveDist, LastSaveInHfHoldsTheGatheredWeights) {
  const int n = titan::testing::world().size();
  SharedDir dir("hf_last");
  expect_last_save_in_hf(base(dir.path() + "/fsdp"), "FSDP " + std::to_string(n));
  // Resuming names the HF step: a one-line pointer to the way to start from it.
  JobConfig at_hf = base(dir.path() + "/fsdp");
  at_hf.checkpoint.load_step = 6;
  std::string refused;
  try {
    Trainer t(at_hf, quiet(at_hf));
  } catch (const titan::Error& e) {
    refused = e.what();
  }
  EXPECT_NE(refused.find("has no complete checkpoint step-6 (that folder is a Hugging Face save: start from it with "
                         "initial_load_path and initial_load_in_hf = true)"),
            std::string::npos)
      << refused;

  JobConfig tp = base(dir.path() + "/tp");
  tp.training.tensor_parallel_degree = 2;
  tp.training.enable_loss_parallel = true;
  expect_last_save_in_hf(tp, n == 4 ? "tied, TP 2 x FSDP 2" : "tied, TP 2", /*tied=*/true);

  JobConfig pp = base(dir.path() + "/pp");
  pp.training.batch_size = 4;
  pp.experimental.pipeline_parallel_degree = 2;
  pp.experimental.pipeline_parallel_schedule = n == 2 ? "Interleaved1F1B" : "1F1B";
  expect_last_save_in_hf(pp, n == 2 ? "PP 2, 2 stages per rank" : "PP 2 x FSDP 2");

  if (n == 4) {
    JobConfig hsdp = base(dir.path() + "/hsdp");
    hsdp.training.data_parallel_replicate_degree = 2;
    expect_last_save_in_hf(hsdp, "HSDP 2x2");
  }

  // A job starts from that folder (initial_load_in_hf): each rank reads its
  // rows, and the weights are the saved bfloat16 ones.
  JobConfig next = base(dir.path() + "/next");
  next.checkpoint.initial_load_path = dir.path() + "/fsdp/checkpoint/step-6";
  next.checkpoint.initial_load_in_hf = true;
  Trainer t(next, quiet(next));
  EXPECT_EQ(t.step(), 0);
  const auto loaded = t.full_state_dict();
  if (leader()) {
    const ck::HfCheckpoint saved = ck::read_hf_folder(next.checkpoint.initial_load_path);
    for (const auto& [name, w] : saved.titan_state) EXPECT_TRUE(at::equal(loaded.at(name), w.to(at::kFloat))) << name;
    std::printf("[FSDP %d] a new job started from step-6 (initial_load_in_hf) holds its weights bitwise\n", n);
  }
  world_group().barrier();
}

}  // namespace
