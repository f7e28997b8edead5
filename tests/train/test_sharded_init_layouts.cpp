// Sharded initialisation through `titan train --training.steps 0` (an
// init-only run), as a user runs it: each layout builds the debug model on
// the meta device, parallelises it, initialises only its own pieces and
// writes a sharded step-0 checkpoint. Read back whole, every layout's
// weights equal the one-process init bit for bit — read by titan, and for
// 1 rank, FSDP 4, FSDP 2 x TP 2 and PP 2 x FSDP 2 by PyTorch's own
// torch.distributed.checkpoint (tests/checkpoint/dcp_read.py); the init
// table each run prints shows every rank's tensor peak during init against
// its share. Loading a one-process seed checkpoint (whole tensors in one
// file) on 4 ranks reads only each rank's rows: its load peak is measured
// the same way.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "support/run_command.hpp"
#include "titan/checkpoint/dcp.hpp"
#include "titan/checkpoint/safetensors.hpp"
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
  bool read_by_torch_dcp = false;  // also read back by torch.distributed.checkpoint
};

// torch.distributed.checkpoint reads `checkpoint` (a titan step folder) and
// compares it bitwise with `expected` (whole tensors); prints what it saw.
void expect_torch_dcp_reads(const std::string& checkpoint, const std::string& expected, const char* what) {
  const char* py = std::getenv("TITAN_PYTHON");
  auto r = run_command(std::string(py && *py ? py : "python3") + " " + source_path("tests/checkpoint/dcp_read.py") +
                       " " + checkpoint + " " + expected);
  std::printf("  %-22s torch DCP: %s", what, r.output.c_str());
  EXPECT_EQ(r.exit_code, 0) << what << ":\n" << r.output;
}

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
  const std::string expected = dir.path() + "/expected.safetensors";
  const bool any_dcp =
      std::any_of(layouts.begin(), layouts.end(), [](const Layout& l) { return l.read_by_torch_dcp; });
  if (any_dcp) {
    titan::checkpoint::save_safetensors(expected, {reference.begin(), reference.end()});
    expect_torch_dcp_reads(dir.path() + "/one_rank/checkpoint/step-0", expected, "one_rank");
  }
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
    if (l.read_by_torch_dcp) expect_torch_dcp_reads(dir.path() + "/" + l.name + "/checkpoint/step-0", expected, l.name);
  }
}

// Every rank's load peak (the table's last column, over the model's bytes)
// and its largest piece, from an init-only run that loaded a checkpoint.
std::vector<std::pair<double, double>> load_rows(const std::string& output) {
  std::vector<std::pair<double, double>> rows;
  const std::regex model_line(R"(the model's parameters are ([\d.]+) (\w+))");
  const std::regex row(
      R"(^\s*(\d+)\s+[\d.]+ \w+\s+[\d.]+%\s+([\d.]+) (\w+)\s+[\d.]+ \w+\s+[\d.]+\s+[\d.]+ \w+\s+([\d.]+)\s*$)");
  std::istringstream in(output);
  double model = 0;
  for (std::string line; std::getline(in, line);) {
    const bool prefixed = line.rfind("[rank", 0) == 0 && line.find("] ") != std::string::npos;
    const std::string body = prefixed ? line.substr(line.find("] ") + 2) : line;
    std::smatch m;
    if (std::regex_search(body, m, model_line)) model = bytes_of(m[1], m[2]);
    if (model > 0 && std::regex_match(body, m, row)) rows.push_back({std::stod(m[4]), bytes_of(m[2], m[3]) / model});
  }
  return rows;
}

// Resuming reads only what a rank owns: a one-process seed checkpoint
// holds each tensor whole in one file, and each of 4 ranks loads its rows
// of it (checkpoint::load_shards reads one contiguous span of rows per
// piece). Its tensor peak while loading stays within its largest piece —
// TP's column cut of wo and w2 reads whole rows, at most tp times the
// piece — where reading whole saved tensors took the largest whole tensor
// (the embedding: 4 times FSDP 4's piece). The weights then equal the seed.
TEST(ShardedInitLayouts, FourRanksLoadOnlyTheirRowsOfAOneProcessSeed) {
  ScratchDir dir("sharded_load");
  const Layout layouts[] = {{"fsdp4", 4, ""}, {"fsdp2_tp2", 4, "--training.tensor_parallel_degree 2"}};
  for (const Layout& l : layouts) {
    std::string out;
    // The seed: one process, whole tensors (its own dump folder per layout).
    const std::string folder = dir.path() + "/" + l.name;
    const Layout seed{l.name, 1, ""};
    const auto want = init_only(dir, seed, &out);
    ASSERT_FALSE(want.empty());
    // The same folder on 4 ranks: step-0 is found and loaded, then saved again sharded.
    const auto got = init_only(dir, l, &out);
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [name, w] : want) EXPECT_TRUE(at::equal(got.at(name), w)) << l.name << ": " << name;
    EXPECT_NE(out.find("checkpoint: loaded the weights of"), std::string::npos) << out;
    const auto rows = load_rows(out);
    ASSERT_EQ(rows.size(), 4u) << l.name << ": no load column in\n" << out;
    const double tp = l.flags[0] ? 2.0 : 1.0;
    double worst = 0;
    for (const auto& [load, piece] : rows) {
      EXPECT_LE(load, tp * piece + 1e-3) << l.name << ": load peak " << load << " of the model, piece " << piece << "\n"
                                         << out;
      worst = std::max(worst, load);
    }
    std::printf("  %-22s loads a one-process seed: largest load peak/model %.4f (largest piece/model %.4f)\n", l.name,
                worst, rows[0].second);
  }
}

// Starting from another job's weights ([checkpoint] initial_load_path, as
// torchtitan names it) reads only each rank's rows too: a Hugging Face
// folder (initial_load_in_hf; the one-process init exported by `titan
// convert`, the layout transformers loads: test_hf_transformers) and a
// one-process checkpoint folder, each loaded on FSDP 4 and FSDP 2 x TP 2.
// The step-0 each run then saves equals the one-process init bit for bit,
// and every rank's load peak stays within what it holds (tp times its
// largest piece, as above: q/k rows are read for whole heads, which the
// debug model's boxes align with).
TEST(ShardedInitLayouts, FourRanksStartFromAHuggingFaceFolderOrAnotherJobsCheckpoint) {
  ScratchDir dir("initial_load");
  std::string out;
  const auto want = init_only(dir, {"seed", 1, ""}, &out);
  ASSERT_FALSE(want.empty());
  const std::string hf = dir.path() + "/hf";
  auto c = run_command(bin_path("titan") + " convert --checkpoint_path " + dir.path() +
                       "/seed/checkpoint/step-0 --output_path " + hf + " --model_flavor debugmodel");
  ASSERT_EQ(c.exit_code, 0) << c.output;

  struct Source {
    const char* name;
    std::string flags;
    const char* log;
  };
  const Source sources[] = {
      {"hf", "--checkpoint.initial_load_path " + hf + " --checkpoint.initial_load_in_hf",
       "loaded the weights of the Hugging Face folder"},
      {"dcp", "--checkpoint.initial_load_path " + dir.path() + "/seed/checkpoint", "(initial_load_path) (weights only)"},
  };
  const Layout layouts[] = {{"fsdp4", 4, ""}, {"fsdp2_tp2", 4, "--training.tensor_parallel_degree 2"}};
  for (const Source& src : sources) {
    for (const Layout& l : layouts) {
      const std::string name = std::string(l.name) + "_from_" + src.name;
      const std::string flags = std::string(l.flags) + " " + src.flags;
      const auto got = init_only(dir, {name.c_str(), l.nproc, flags.c_str()}, &out);
      ASSERT_EQ(got.size(), want.size()) << name << "\n" << out;
      double worst = 0;
      for (const auto& [t, w] : want) {
        worst = std::max(worst, (got.at(t) - w).abs().max().item<double>());
        EXPECT_TRUE(at::equal(got.at(t), w)) << name << ": " << t << " differs";
      }
      EXPECT_NE(out.find(src.log), std::string::npos) << name << "\n" << out;
      const auto rows = load_rows(out);
      ASSERT_EQ(rows.size(), 4u) << name << ": no load column in\n" << out;
      const double tp = l.flags[0] ? 2.0 : 1.0;
      double peak = 0;
      for (const auto& [load, piece] : rows) {
        EXPECT_LE(load, tp * piece + 1e-3) << name << ": load peak " << load << ", piece " << piece << "\n" << out;
        peak = std::max(peak, load);
      }
      std::printf("  %-22s max |weight diff| vs the one-process init %.1e, largest load peak/model %.4f "
                  "(largest piece/model %.4f)\n",
                  name.c_str(), worst, peak, rows[0].second);
    }
  }

  // Bad input: one line, non-zero exit, every rank stops.
  const std::string base = bin_path("titan") + " train --nproc 2 --job.config_file " +
                           source_path("train_configs/debug_model.toml") +
                           " --training.device cpu --training.steps 0 --training.seq_len 64 --training.batch_size 2"
                           " --checkpoint.enable_checkpoint --job.dump_folder " + dir.path() + "/bad";
  auto missing = run_command(base + " --checkpoint.initial_load_path " + dir.path() + "/nowhere");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("initial_load_path = '" + dir.path() + "/nowhere' does not exist"), std::string::npos)
      << missing.output;
  auto hf_as_dcp = run_command(base + " --checkpoint.initial_load_path " + hf);
  EXPECT_NE(hf_as_dcp.exit_code, 0);
  EXPECT_NE(hf_as_dcp.output.find("a Hugging Face folder needs initial_load_in_hf = true"), std::string::npos)
      << hf_as_dcp.output;
  // The same tensors under another head count (8 heads of 32 instead of
  // 16 of 16): every shape agrees, only the q/k permutation would be wrong,
  // so the load must refuse it.
  const std::string other = dir.path() + "/hf_8_heads";
  ASSERT_EQ(run_command("cp -r " + hf + " " + other).exit_code, 0);
  std::string config;
  {
    std::ifstream in(other + "/config.json");
    config.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"\"num_attention_heads\": 16", "\"num_attention_heads\": 8"},
                                  {"\"num_key_value_heads\": 16", "\"num_key_value_heads\": 8"},
                                  {"\"head_dim\": 16", "\"head_dim\": 32"}}) {
    const size_t at = config.find(from);
    ASSERT_NE(at, std::string::npos) << from << " not in\n" << config;
    config.replace(at, from.size(), to);
  }
  std::ofstream(other + "/config.json") << config;
  auto heads = run_command(base + " --checkpoint.initial_load_path " + other + " --checkpoint.initial_load_in_hf");
  EXPECT_NE(heads.exit_code, 0);
  EXPECT_NE(heads.output.find("has 8 query and 8 key/value heads, the model 16 and 16"), std::string::npos)
      << heads.output;
}

TEST(ShardedInitLayouts, FourRanksEqualOneRankBitwise) {
  expect_layouts_equal({
      {"fsdp2", 2, ""},
      {"fsdp4", 4, "", false, true},
      {"hsdp2x2", 4, "--training.data_parallel_replicate_degree 2 --training.data_parallel_shard_degree 2"},
      {"ddp2", 2, "--training.data_parallel_replicate_degree 2 --training.data_parallel_shard_degree 1", true},
      {"tp2", 2, "--training.tensor_parallel_degree 2 --training.data_parallel_shard_degree 1"},
      {"tp4", 4, "--training.tensor_parallel_degree 4 --training.data_parallel_shard_degree 1"},
      {"fsdp2_tp2", 4, "--training.tensor_parallel_degree 2", false, true},
      {"cp2", 2, "--parallelism.context_parallel_degree 2 --training.data_parallel_shard_degree 1"},
      {"pp2_1f1b", 2, "--experimental.pipeline_parallel_degree 2 --training.data_parallel_shard_degree 1"},
      {"pp2_interleaved", 2, "--experimental.pipeline_parallel_degree 2 --training.data_parallel_shard_degree 1 "
                             "--experimental.pipeline_parallel_schedule Interleaved1F1B"},
      {"pp2_zbv", 2, "--experimental.pipeline_parallel_degree 2 --training.data_parallel_shard_degree 1 "
                     "--experimental.pipeline_parallel_schedule ZBVZeroBubble"},
      {"pp2_fsdp2", 4, "--experimental.pipeline_parallel_degree 2", false, true},
  });
}

// The 1B flavor (1.24 B parameters, 4.94 GB in fp32) on 8 emulated ranks,
// FSDP 8: initialised sharded, each rank holds and peaks at about 1/8 of it
// (0.6 GB), so the 8 processes fit this 24 GiB machine — where a whole init
// on every rank (8 x 4.94 GB) could not. Nothing is saved (no checkpoint).
TEST(ShardedInitLayouts, EightRanksInitialiseTheOneBFlavorWithinTheirShare) {
  ScratchDir dir("sharded_init_1b");
  auto r = run_command(bin_path("titan") + " train --nproc 8 --job.config_file " +
                       source_path("train_configs/debug_model.toml") + " --job.dump_folder " + dir.path() +
                       "/out --model.flavor 1B --training.device cpu --training.steps 0 --training.seq_len 64"
                       " --training.batch_size 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("the model's parameters are 4.6"), std::string::npos) << r.output;  // 4.94 GB = 4.60 GiB
  const auto rows = init_rows(r.output);
  ASSERT_EQ(rows.size(), 8u) << r.output;
  double peak = 0;
  for (const InitRow& row : rows) {
    EXPECT_LE(row.share, 1.0 / 8 + 1e-3) << r.output;
    EXPECT_LE(row.peak, row.share + row.piece + 1e-3) << r.output;
    peak = std::max(peak, row.peak);
  }
  std::printf("  1B on 8 ranks (FSDP 8): largest tensor peak during init %.4f of the model (1/8 = 0.125)\n", peak);
}

// PP 2 x FSDP 2 x TP 2: 8 processes on 2 cores (labelled slow).
TEST(ShardedInitLayouts, EightRanksThreeDimensionsEqualOneRankBitwise) {
  expect_layouts_equal({{"pp2_fsdp2_tp2", 8, "--experimental.pipeline_parallel_degree 2 --training.tensor_parallel_degree 2"}});
}

}  // namespace
