// The checkpoint format on one process: boxes written by "ranks" of one
// layout and read back into another (uneven FSDP-style row splits, TP-style
// column splits), the checks a load makes before it writes anything, and
// the crash-safety rules of the folder.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../train/train_test_util.hpp"
#include "support/error_of.hpp"
#include "titan/checkpoint/dcp.hpp"
#include "titan/checkpoint/file_io.hpp"
#include "titan/metrics/tensor_memory.hpp"
#include "titan/util/files.hpp"
#include "titan/dtensor/placement.hpp"
#include "titan/util/error.hpp"

namespace {

namespace ck = titan::checkpoint;
using titan::testing::ScratchDir;

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "missing: " << (part) << "\n" << (text)

using titan::testing::error_of;

at::Tensor draw(std::vector<int64_t> shape, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat));
}

// Rank r of n's box of `full`: rows split as fully_shard splits them
// (ceil-sized chunks, the last ones short or empty) when dim = 0, columns
// when dim = 1.
ck::TensorShard box_of(const std::string& fqn, const at::Tensor& full, int64_t dim, int64_t r, int64_t n) {
  auto [len, off] = titan::shard_size_and_offset(full.size(dim), n, r);
  ck::TensorShard s;
  s.fqn = fqn;
  s.global_shape = full.sizes().vec();
  s.offsets.assign(full.dim(), 0);
  s.offsets[dim] = off;
  s.local = full.narrow(dim, off, len).clone();
  return s;
}

// Writes a checkpoint as `n` ranks splitting every tensor along `dim`.
void save_split(const std::string& dir, const std::map<std::string, at::Tensor>& full, int64_t dim, int64_t n) {
  const std::string partial = dir + ".partial";
  ASSERT_TRUE(titan::files::make_directories(partial));
  std::vector<ck::RankFile> files;
  for (int64_t r = 0; r < n; ++r) {
    ck::ShardedState shards;
    for (const auto& [fqn, t] : full) shards.push_back(box_of(fqn, t, dim, r, n));
    files.push_back(ck::write_rank_file(partial, static_cast<int>(r), shards));
  }
  ck::finalize_checkpoint(partial, dir, 3, files, {{"content", "model"}});
}

std::map<std::string, at::Tensor> two_tensors() {
  return {{"a.weight", draw({10, 6}, 1)}, {"b.weight", draw({7, 12}, 2)}};
}

TEST(CheckpointFormat, ReshardsRowsIntoColumnsAndUnevenSplits) {
  ScratchDir dir("ckpt_format");
  const auto full = two_tensors();
  const std::string ckpt = dir.path() + "/step-3";
  save_split(ckpt, full, /*dim=*/0, /*n=*/4);  // 10 rows over 4: 3, 3, 3, 1
  const ck::CheckpointInfo info = ck::open_checkpoint(ckpt);
  EXPECT_EQ(info.step, 3);
  // Into 3 column splits and 5 row splits: every box equals the slice of
  // the original (copies, so bitwise).
  for (const auto& [dim, n] : std::vector<std::pair<int64_t, int64_t>>{{1, 3}, {0, 5}, {0, 1}}) {
    for (int64_t r = 0; r < n; ++r) {
      ck::ShardedState targets;
      for (const auto& [fqn, t] : full) {
        ck::TensorShard s = box_of(fqn, t, dim, r, n);
        s.local = at::full_like(s.local, -1);
        targets.push_back(s);
      }
      ck::load_shards(info, targets);
      for (const auto& t : targets) {
        const ck::TensorShard want = box_of(t.fqn, full.at(t.fqn), dim, r, n);
        EXPECT_TRUE(at::equal(t.local, want.local)) << t.fqn << " dim " << dim << " rank " << r << " of " << n;
      }
    }
  }
  // The whole model, as conversion reads it.
  const auto whole = ck::read_model_tensors(ckpt);
  ASSERT_EQ(whole.size(), full.size());
  for (const auto& [fqn, t] : full) EXPECT_TRUE(at::equal(whole.at(fqn), t)) << fqn;
}

TEST(CheckpointFormat, LoadConvertsDtypes) {
  ScratchDir dir("ckpt_dtype");
  const at::Tensor w = draw({4, 4}, 3);
  ck::write_model_checkpoint(dir.path() + "/step-0", {{"w", w.to(at::kBFloat16)}}, 0);
  ck::ShardedState t = {{"w", at::zeros({4, 4}), {4, 4}, {0, 0}, true}};
  ck::load_shards(ck::open_checkpoint(dir.path() + "/step-0"), t);
  EXPECT_TRUE(at::equal(t[0].local, w.to(at::kBFloat16).to(at::kFloat)));
}

// A rank's file is written box by box, each copied to the host (here: cast
// to bfloat16, as a weights-only export) when its turn comes: the copies
// held at once are one box's, not all of them (a GPU rank's save).
TEST(CheckpointFormat, RankFileHoldsOneHostCopyAtATime) {
  ScratchDir dir("ckpt_one_copy");
  std::map<std::string, at::Tensor> full;
  int64_t largest = 0, total = 0;
  for (int i = 0; i < 8; ++i) {
    full["w" + std::to_string(i)] = draw({64 + 16 * i, 32}, 40 + i);
    largest = std::max<int64_t>(largest, (64 + 16 * i) * 32 * 2);
    total += (64 + 16 * i) * 32 * 2;
  }
  ck::ShardedState shards;
  for (const auto& [fqn, t] : full) shards.push_back(box_of(fqn, t, 0, 0, 1));
  const std::string partial = dir.path() + "/step-1.partial";
  ASSERT_TRUE(titan::files::make_directories(partial));
  titan::metrics::track_cpu_tensor_memory();
  const c10::Device cpu(c10::kCPU);
  const int64_t before = titan::metrics::tensor_memory(cpu).current_bytes;
  titan::metrics::reset_tensor_memory_peak(cpu);
  const ck::RankFile file = ck::write_rank_file(partial, 0, shards, at::kBFloat16);
  const int64_t peak = titan::metrics::tensor_memory(cpu).peak_bytes - before;
  std::printf("8 boxes, %lld bytes in bfloat16 (largest %lld): host copies held at once %lld bytes\n",
              static_cast<long long>(total), static_cast<long long>(largest), static_cast<long long>(peak));
  EXPECT_LE(peak, largest);
  EXPECT_GT(total, 4 * largest);
  ck::finalize_checkpoint(partial, dir.path() + "/step-1", 1, {file}, {{"content", "model"}});
  const auto back = ck::read_model_tensors(dir.path() + "/step-1");
  for (const auto& [fqn, t] : full) {
    EXPECT_EQ(back.at(fqn).scalar_type(), at::kBFloat16) << fqn;
    EXPECT_TRUE(at::equal(back.at(fqn), t.to(at::kBFloat16))) << fqn;
  }
}

TEST(CheckpointFormat, RefusesBadCheckpointsBeforeWritingAnything) {
  ScratchDir dir("ckpt_bad");
  const auto full = two_tensors();
  const std::string ckpt = dir.path() + "/step-3";
  save_split(ckpt, full, 0, 2);
  auto fresh_targets = [&] {
    ck::ShardedState targets;
    for (const auto& [fqn, t] : full) targets.push_back({fqn, at::full_like(t, 7), t.sizes().vec(), {0, 0}, true});
    return targets;
  };
  auto untouched = [](const ck::ShardedState& targets) {
    for (const auto& t : targets)
      if (!at::equal(t.local, at::full_like(t.local, 7))) return false;
    return true;
  };
  const std::string file1 = ckpt + "/" + ck::rank_file_name(1);
  const std::string saved = ck::read_text_file(file1);

  // A bit flipped in the data: same size, wrong CRC.
  {
    std::string flipped = saved;
    flipped[flipped.size() - 5] ^= 0x10;
    std::ofstream(file1, std::ios::binary | std::ios::trunc) << flipped;
    auto targets = fresh_targets();
    const std::string e = error_of([&] { ck::load_shards(ck::open_checkpoint(ckpt), targets); });
    EXPECT_HAS(e, "rank-00001.safetensors fails its CRC-32 check");
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_TRUE(untouched(targets)) << "a corrupted checkpoint must not be half-loaded";
  }
  // Truncated.
  {
    std::ofstream(file1, std::ios::binary | std::ios::trunc) << saved.substr(0, saved.size() - 100);
    auto targets = fresh_targets();
    const std::string e = error_of([&] { ck::load_shards(ck::open_checkpoint(ckpt), targets); });
    EXPECT_HAS(e, "rank-00001.safetensors has " + std::to_string(saved.size() - 100) + " bytes");
    EXPECT_HAS(e, "(truncated?)");
    EXPECT_TRUE(untouched(targets));
  }
  // Missing.
  {
    std::remove(file1.c_str());
    auto targets = fresh_targets();
    const std::string e = error_of([&] { ck::load_shards(ck::open_checkpoint(ckpt), targets); });
    EXPECT_HAS(e, "rank-00001.safetensors is missing");
    EXPECT_TRUE(untouched(targets));
    std::ofstream(file1, std::ios::binary | std::ios::trunc) << saved;
  }
  // Another shape (another flavor) names the tensor; a missing one too.
  {
    ck::ShardedState targets = {{"b.weight", at::zeros({7, 8}), {7, 8}, {0, 0}, true}};
    const std::string e = error_of([&] { ck::load_shards(ck::open_checkpoint(ckpt), targets); });
    EXPECT_HAS(e, "b.weight was saved with shape [7, 12], the model has [7, 8]");
    targets = {{"c.weight", at::zeros({2}), {2}, {0}, true}};
    EXPECT_HAS(error_of([&] { ck::load_shards(ck::open_checkpoint(ckpt), targets); }), "has no tensor c.weight");
  }
  // A folder without metadata.json is not a checkpoint (a save that died).
  std::remove((ckpt + "/metadata.json").c_str());
  EXPECT_HAS(error_of([&] { ck::open_checkpoint(ckpt); }), "has no metadata.json");
  EXPECT_TRUE(ck::list_checkpoints(dir.path()).empty());
}

TEST(CheckpointFormat, ReplicasSaveOnceAndOverlapsAreRefused) {
  ScratchDir dir("ckpt_overlap");
  const at::Tensor w = draw({4, 2}, 5);
  const std::string partial = dir.path() + "/step-1.partial";
  ASSERT_TRUE(titan::files::make_directories(partial));
  // Two ranks claiming the same rows (replicas both marked primary).
  ck::ShardedState a = {{"w", w, {4, 2}, {0, 0}, true}};
  auto f0 = ck::write_rank_file(partial, 0, a);
  auto f1 = ck::write_rank_file(partial, 1, a);
  EXPECT_HAS(error_of([&] { ck::finalize_checkpoint(partial, dir.path() + "/step-1", 1, {f0, f1}, {}); }),
             "both saved part of w");
  // A non-primary replica writes nothing.
  a[0].primary = false;
  EXPECT_TRUE(ck::write_rank_file(partial, 2, a).file.empty());
}

TEST(CheckpointFormat, ListsCompleteCheckpointsAndPrunes) {
  ScratchDir dir("ckpt_list");
  for (int step : {2, 4, 6, 8}) ck::write_model_checkpoint(dir.path() + "/step-" + std::to_string(step), {{"w", at::ones({2})}}, step);
  ASSERT_TRUE(titan::files::make_directories(dir.path() + "/step-10.partial"));  // in progress / died
  ASSERT_TRUE(titan::files::make_directories(dir.path() + "/step-3.partial"));   // died long ago
  EXPECT_EQ(ck::list_checkpoints(dir.path()), (std::vector<int64_t>{2, 4, 6, 8}));
  ck::prune_checkpoints(dir.path(), 2, 8);
  EXPECT_EQ(ck::list_checkpoints(dir.path()), (std::vector<int64_t>{6, 8}));
  EXPECT_FALSE(titan::files::exists(dir.path() + "/step-3.partial"));
  EXPECT_TRUE(titan::files::exists(dir.path() + "/step-10.partial"));
  // Re-saving a step replaces it whole.
  ck::write_model_checkpoint(dir.path() + "/step-8", {{"v", at::zeros({3})}}, 8);
  const auto t = ck::read_model_tensors(dir.path() + "/step-8");
  EXPECT_EQ(t.size(), 1u);
  EXPECT_TRUE(t.count("v"));
}

// keep_latest_k counts weights-only saves too, but never removes the newest
// full checkpoint: a final model_weights_only export after it must not take
// away the last state a run can resume from.
TEST(CheckpointFormat, PruningKeepsTheNewestFullCheckpoint) {
  ScratchDir dir("ckpt_keep_full");
  auto save = [&](int step, const char* content) {
    const std::string d = dir.path() + "/step-" + std::to_string(step);
    ck::write_model_checkpoint(d, {{"w", at::ones({2})}}, step);
    auto meta = nlohmann::json::parse(titan::files::read_file(d + "/metadata.json"));
    meta["state"]["content"] = content;
    std::ofstream(d + "/metadata.json") << meta.dump();
  };
  save(2, "full");
  save(4, "full");
  save(6, "model");
  ck::prune_checkpoints(dir.path(), 1, 6);
  EXPECT_EQ(ck::list_checkpoints(dir.path()), (std::vector<int64_t>{4, 6}));
  save(8, "full");
  ck::prune_checkpoints(dir.path(), 1, 8);
  EXPECT_EQ(ck::list_checkpoints(dir.path()), (std::vector<int64_t>{8}));
}

TEST(CheckpointFormat, DurableFileReportsAFullDisk) {
  if (!titan::files::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this system";
  ck::DurableFile f("/dev/full");
  const std::vector<char> bytes(1 << 16, 'x');
  const std::string e = error_of([&] { f.write(bytes.data(), bytes.size()); });
  EXPECT_HAS(e, "writing /dev/full failed");
  EXPECT_HAS(e, "(disk full)");
}

}  // namespace
