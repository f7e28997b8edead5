// Sharded initialisation through `titan train --training.steps 0` (an
// init-only run), as a user runs it: each layout builds the debug model on
// the meta device, parallelises it, initialises only its own pieces and
// writes a sharded step-0 checkpoint. Read back whole, every layout's
// weights equal the one-process init bit for bit; the init table each run
// prints shows every rank's tensor peak during init against its share.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdio>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "support/run_command.hpp"
#include "titan/checkpoint/dcp.hpp"
#include "train_test_util.hpp"

namespace {

using titan::testing::bin_path;
using titan::testing::run_command;
using titan::testing::ScratchDir;
using titan::testing::source_path;

struct Layout {
  const char* name;
  int nproc;
  const char* flags;
  bool ddp = false;  // replicates with DDP, whose gradient buckets are allocated at the start
};

// Runs one init-only job; returns its step-0 weights and its output.
std::map<std::string, at::Tensor> init_only(const ScratchDir& dir, const Layout& l, std::string* output) {
  const std::string out = dir.path() + "/" + l.name;
  auto r = run_command(bin_path("titan") + " train --nproc " + std::to_string(l.nproc) + " --job.config_file " +
                       source_path("train_configs/debug_model.toml") + " --job.dump_folder " + out +
                       " --training.device cpu --training.steps 0 --training.seq_len 64 --training.batch_size 2"
                       " --checkpoint.enable_checkpoint " + l.flags);
  *output = r.output;
  EXPECT_EQ(r.exit_code, 0) << l.name << ":\n" << r.output;
  if (r.exit_code != 0) return {};
  return titan::checkpoint::read_model_tensors(out + "/checkpoint/step-0");
}

// Every rank's row of the init table.
struct InitRow {
  double share;  // of the model's parameter bytes held
  double piece;  // the largest piece held, over the model's bytes
  double peak;   // the tensor peak during init, over the model's bytes
};

double bytes_of(const std::string& number, const std::string& unit) {
  double b = std::stod(number);
  for (const char* u : {"KiB", "MiB", "GiB", "TiB"}) {
    b *= 1024.0;
    if (unit == u) return b;
  }
  return std::stod(number);  // "B"
}

std::vector<InitRow> init_rows(const std::string& output) {
  std::vector<InitRow> rows;
  const std::regex model_line(R"(the model's parameters are ([\d.]+) (\w+))");
  const std::regex row(
      R"(^\s*(\d+)\s+[\d.]+ \w+\s+([\d.]+)%\s+([\d.]+) (\w+)\s+[\d.]+ \w+\s+([\d.]+)\s*$)");
  std::istringstream in(output);
  std::string line;
  bool in_table = false;
  double model = 0;
  while (std::getline(in, line)) {
    // The launcher prefixes rank 0's lines; the table follows its header.
    const bool prefixed = line.rfind("[rank", 0) == 0 && line.find("] ") != std::string::npos;
    const std::string body = prefixed ? line.substr(line.find("] ") + 2) : line;
    std::smatch m;
    if (std::regex_search(body, m, model_line)) model = bytes_of(m[1], m[2]);
    if (body.find("parameters held") != std::string::npos) in_table = true;
    if (in_table && model > 0 && std::regex_match(body, m, row))
      rows.push_back({std::stod(m[2]) / 100.0, bytes_of(m[3], m[4]) / model, std::stod(m[5])});
  }
  return rows;
}

void expect_layouts_equal(const std::vector<Layout>& layouts) {
  ScratchDir dir("sharded_init");
  std::string out;
  const auto reference = init_only(dir, {"one_rank", 1, ""}, &out);
  std::printf("  one_rank                1 rank   the reference (init_weights' values, also bit for bit: test_llama3)\n");
  ASSERT_FALSE(reference.empty());
  for (const Layout& l : layouts) {
    const auto got = init_only(dir, l, &out);
    ASSERT_EQ(got.size(), reference.size()) << l.name;
    double worst = 0;
    for (const auto& [name, want] : reference) {
      auto it = got.find(name);
      ASSERT_NE(it, got.end()) << l.name << " lacks " << name;
      ASSERT_EQ(it->second.sizes(), want.sizes()) << l.name << " " << name;
      worst = std::max(worst, (it->second - want).abs().max().item<double>());
      EXPECT_TRUE(at::equal(it->second, want)) << l.name << ": " << name << " differs";
    }
    const auto rows = init_rows(out);
    ASSERT_EQ(static_cast<int>(rows.size()), l.nproc) << l.name << ": no init table in\n" << out;
    double peak = 0;
    for (const InitRow& r : rows) {
      // The tensor peak during init: what the rank holds, plus one staging
      // piece (at most its largest piece), plus DDP's gradient buckets (as
      // large as what it holds) — never a whole parameter it does not hold.
      const double ddp = l.ddp ? r.share : 0.0;
      EXPECT_LE(r.peak, r.share + r.piece + ddp + 1e-3)
          << l.name << ": peak " << r.peak << " of the model, share " << r.share << ", piece " << r.piece << "\n" << out;
      peak = std::max(peak, r.peak);
    }
    std::printf("  %-22s %2d ranks  max |weight diff| vs one rank %.1e  largest peak/model %.4f\n", l.name, l.nproc,
                worst, peak);
  }
}

TEST(ShardedInitLayouts, FourRanksEqualOneRankBitwise) {
  expect_layouts_equal({
      {"fsdp2", 2, ""},
      {"fsdp4", 4, ""},
      {"hsdp2x2", 4, "--training.data_parallel_replicate_degree 2 --training.data_parallel_shard_degree 2"},
      {"ddp2", 2, "--training.data_parallel_replicate_degree 2 --training.data_parallel_shard_degree 1", true},
      {"tp2", 2, "--training.tensor_parallel_degree 2 --training.data_parallel_shard_degree 1"},
      {"tp4", 4, "--training.tensor_parallel_degree 4 --training.data_parallel_shard_degree 1"},
      {"fsdp2_tp2", 4, "--training.tensor_parallel_degree 2"},
      {"cp2", 2, "--parallelism.context_parallel_degree 2 --training.data_parallel_shard_degree 1"},
      {"pp2_1f1b", 2, "--experimental.pipeline_parallel_degree 2 --training.data_parallel_shard_degree 1"},
      {"pp2_interleaved", 2, "--experimental.pipeline_parallel_degree 2 --training.data_parallel_shard_degree 1 "
                             "--experimental.pipeline_parallel_schedule Interleaved1F1B"},
      {"pp2_zbv", 2, "--experimental.pipeline_parallel_degree 2 --training.data_parallel_shard_degree 1 "
                     "--experimental.pipeline_parallel_schedule ZBVZeroBubble"},
      {"pp2_fsdp2", 4, "--experimental.pipeline_parallel_degree 2"},
  });
}

// PP 2 x FSDP 2 x TP 2: 8 processes on 2 cores (labelled slow).
TEST(ShardedInitLayouts, EightRanksThreeDimensionsEqualOneRankBitwise) {
  expect_layouts_equal({{"pp2_fsdp2_tp2", 8, "--experimental.pipeline_parallel_degree 2 --training.tensor_parallel_degree 2"}});
}

}  // namespace
