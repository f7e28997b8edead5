// `titan verify` as a user runs it: a correct layout passes with its table
// of differences; a layout whose rank mis-scales its gradients (injected)
// is named, with the step and the parameter, and exits 1; bad flags are
// one line.
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <string>

#include "support/run_command.hpp"
#include "titan/verify/layout_check.hpp"
#include "train_test_util.hpp"

namespace {

using titan::testing::bin_path;
using titan::testing::run_command;
using titan::testing::ScratchDir;
using titan::testing::source_path;

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "missing: " << (part) << "\n" << (text)

// The debug config cut to seconds: 2 steps of 2 sequences of 32 tokens.
std::string verify_run(const ScratchDir& dir, int nproc, const std::string& extra = "") {
  return bin_path("titan") + " verify --job.config_file " + source_path("train_configs/debug_model.toml") +
         " --job.dump_folder " + dir.path() + "/out --training.device cpu --training.seq_len 32" +
         " --training.batch_size 2 --steps 2 --nproc " + std::to_string(nproc) + " " + extra;
}

// The largest value of column `col` (0-based, whitespace-separated) over
// the step rows of the table ("     1  7.12345678  ...").
double worst_column(const std::string& out, int col) {
  const std::regex row(R"(^\s+\d+\s+\d+\.\d{8}\s+\d+\.\d{8}\s.*$)");
  double worst = -1;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (!std::regex_match(line, row)) continue;
    std::istringstream fields(line);
    std::string f;
    for (int i = 0; i <= col; ++i) fields >> f;
    worst = std::max(worst, std::stod(f));
  }
  return worst;
}

TEST(VerifyCli, FsdpAndFsdpTimesTpTrainAsOneProcess) {
  ScratchDir dir("verify_ok");
  auto r = run_command(verify_run(dir, 2));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "titan verify: dp_shard=2 on 2 ranks against one process reading the batches of 2 data-parallel ranks");
  EXPECT_HAS(r.output, "verdict: the layout trains as one process does (2 steps within the bounds)");
  EXPECT_HAS(r.output, "dp_shard");  // its bytes per step
  EXPECT_HAS(r.output, "layers.0.attention");
  // The table's own numbers, against the default bounds (measured here:
  // losses ~6e-8, weights ~1e-6).
  EXPECT_LT(worst_column(r.output, 3), 1e-6) << r.output;
  EXPECT_LT(worst_column(r.output, 5), 2.5e-4) << r.output;
  std::printf("%s\n", r.output.c_str());

  auto tp = run_command(verify_run(dir, 4, "--training.tensor_parallel_degree 2"));
  ASSERT_EQ(tp.exit_code, 0) << tp.output;
  EXPECT_HAS(tp.output, "verdict: the layout trains as one process does");
  EXPECT_HAS(tp.output, "tp ");
}

// Rank 1 flips the sign of its gradient shards (TITAN_FAULT_SCALE_GRADS):
// the gradient norm and the first loss stay the same, but the parameters
// whose shards it holds step the other way from step 1 on, and are named.
// Scaling them by 1.5 instead hardly moves the weights (Adam's first
// update is m / sqrt(v), blind to a gradient's scale: 3.4e-5 here) but
// moves the gradient norm by 6.9e-2, which is named.
TEST(VerifyCli, AMisScaledRankIsNamedWithStepAndWhatDiverged) {
  ScratchDir dir("verify_bad");
  auto flipped = run_command("TITAN_FAULT_SCALE_GRADS=1:-1 " + verify_run(dir, 2));
  EXPECT_EQ(flipped.exit_code, 1) << flipped.output;
  EXPECT_HAS(flipped.output, "DIVERGES");
  const std::regex weight(
      R"(error: titan verify: step 1 diverges from one process: \S+\.weight differs by \S+ \(bound 2\.5e-04\))");
  EXPECT_TRUE(std::regex_search(flipped.output, weight)) << flipped.output;

  auto scaled = run_command("TITAN_FAULT_SCALE_GRADS=1:1.5 " + verify_run(dir, 2));
  EXPECT_EQ(scaled.exit_code, 1) << scaled.output;
  EXPECT_HAS(scaled.output, "error: titan verify: step 1 diverges from one process: the gradient norm is");
}

TEST(VerifyCli, BadFlagsAreOneLine) {
  ScratchDir dir("verify_flags");
  for (const char* extra : {"--steps 0", "--rtol abc", "--wtol", "--frobnicate 3"}) {
    auto r = run_command(verify_run(dir, 1, extra));
    EXPECT_EQ(r.exit_code, 1) << extra << "\n" << r.output;
    EXPECT_HAS(r.output, "titan verify: ");
  }
}

TEST(VerifyCli, ParameterGroups) {
  using titan::verify::parameter_group;
  EXPECT_EQ(parameter_group("layers.3.attention.wq.weight"), "layers.3.attention");
  EXPECT_EQ(parameter_group("layers.12.ffn_norm.weight"), "layers.12.ffn_norm");
  EXPECT_EQ(parameter_group("tok_embeddings.weight"), "tok_embeddings");
  EXPECT_EQ(parameter_group("norm.weight"), "norm");
}

}  // namespace
