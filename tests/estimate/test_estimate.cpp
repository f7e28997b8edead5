// titan estimate, checked against what a run really holds: each case runs
// `titan train` for two steps with the memory timeline on (the counting
// allocator of metrics/tensor_memory.hpp sees every CPU tensor) and
// compares the largest peak any rank recorded with the estimate for the
// same config and world size. Parameters and optimizer state must match to
// the byte; the peak within ±10 % (the issue's bound; what was measured is
// printed and noted per case below).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "models/test_util.hpp"
#include "support/run_command.hpp"
#include "titan/config/load.hpp"
#include "titan/estimate/memory_estimate.hpp"

using titan::testing::bin_path;
using titan::testing::run_command;
using titan::testing::source_path;

namespace {

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "missing: " << (part) << "\n" << (text)

struct Scratch {
  std::string dir = titan::testing::scratch_dir("estimate");
  ~Scratch() { titan::testing::remove_scratch_dir(dir); }
};

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

struct Measured {
  int64_t start_parameters = 0, start_optimizer = 0;  // rank 0, at the step's start
  int64_t peak = 0;                                    // the most any rank held
};

// Two steps of the debug model; the timeline of step 2 (steady state: the
// optimizer's state exists, the gradients of step 1 are gone).
Measured run_and_measure(const std::string& dir, int nproc, const std::string& overrides) {
  const std::string cmd = bin_path("titan") + " train --nproc " + std::to_string(nproc) + " --job.config_file " +
                          source_path("train_configs/debug_model.toml") +
                          " --training.steps 2 --profiling.enable_memory_snapshot true --profiling.profile_freq 2"
                          " --metrics.log_freq 1 --job.dump_folder " + dir + " " + overrides + " 2>&1";
  const auto r = run_command(cmd);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  Measured m;
  for (int rank = 0; rank < nproc; ++rank) {
    std::ifstream in(dir + "/memory_snapshot/iteration_2/rank" + std::to_string(rank) + "_memory_timeline.json");
    EXPECT_TRUE(in.good()) << "no timeline for rank " << rank << "\n" << r.output;
    if (!in.good()) continue;
    const nlohmann::json marks = nlohmann::json::parse(in);
    for (const auto& mark : marks) m.peak = std::max<int64_t>(m.peak, mark.at("peak_in_phase").get<int64_t>());
    if (rank == 0) {
      m.start_parameters = marks.at(0).at("parameters").get<int64_t>();
      m.start_optimizer = marks.at(0).at("optimizer_state").get<int64_t>();
    }
  }
  return m;
}

struct Case {
  const char* name;
  int nproc;
  const char* overrides;
};

}  // namespace

// The cases of the issue (1, 2, 4 ranks; FSDP and DDP) plus the AC modes
// and the layouts the estimate also models. Measured on this machine
// (estimate / measured − 1, 2026-12-05): single, fsdp2, fsdp4, ddp2, ddp4,
// selective 2, op, tp2 and fsdp2 bf16 all within −0.1 % .. 0.0 %, full AC
// +0.9 %, full AC on fsdp4 −2.6 %, pp2 (1F1B, 4 micro-batches; the worst
// rank, an upper bound) +1.8 %. Pure bf16 ([training] dtype, 2026-12-06):
// weights, gradients and Adam state in bf16, −0.03 % on one rank and
// −0.02 % on FSDP 2 (the config's fp32 mixed_precision_param: FSDP casts
// the gathered bf16 weights up). The optimizer step in backward
// (2026-12-06): one rank and FSDP 2 with 2 micro-batches −0.02 % (their
// peak, at the start of backward, holds the same; the accumulated
// gradients go only later), FSDP 4 with full AC −4.0 % (its peak moves to
// a later block once the finished blocks hold no gradients; the ranks
// measured 56.2 to 59.6 MB, as the moment a shard's reduction is waited,
// and so applied, depends on the other ranks). Memory is
// counted, not timed: these are deterministic up to the order in which
// asynchronous reductions finish. PP x FSDP (2026-12-06, 8 micro-batches):
// 1F1B +1.4 %, with reshard "always" −2.1 %, ZBV −4.7 %; ZBV without FSDP
// −4.4 % (−16 % before the gradients an I keeps for its W were counted).
// fsdp_reduce_scatter_per_microbatch (2026-12-06): 1F1B +6.4 % (a
// reduction in flight counted at every backward of the steady state), ZBV
// −0.6 %. Full AC with the weights a checkpointed forward keeps for its
// recompute when the unit does not reshard after forward (2026-12-07):
// PP 2 x FSDP 2 −2.8 % (peak unchanged: every block is gathered at the
// step's last backward either way), FSDP 4 with "never" −0.1 % (+12.7 %
// while titan's FSDP released them there: 60.6 MB measured then, 68.4 MB
// now).
TEST(Estimate, PeakWithinTenPercentOfMeasured) {
  const std::vector<Case> cases = {
      {"single rank", 1, ""},
      {"fsdp 2", 2, ""},
      {"fsdp 4", 4, ""},
      {"ddp 2", 2, "--training.data_parallel_replicate_degree 2 --training.data_parallel_shard_degree 1"},
      {"ddp 4", 4, "--training.data_parallel_replicate_degree 4 --training.data_parallel_shard_degree 1"},
      {"full AC", 1, "--activation_checkpoint.mode full"},
      {"fsdp 4, full AC", 4, "--activation_checkpoint.mode full"},
      {"selective AC 2", 1, "--activation_checkpoint.mode selective --activation_checkpoint.selective_ac_option 2"},
      {"op AC", 1, "--activation_checkpoint.mode selective --activation_checkpoint.selective_ac_option op"},
      {"tp 2", 2, "--training.tensor_parallel_degree 2"},
      {"fsdp 2, bf16", 2, "--training.mixed_precision_param bfloat16"},
      {"pure bf16", 1, "--training.dtype bfloat16"},
      {"fsdp 2, pure bf16", 2, "--training.dtype bfloat16"},
      {"pp 2, 1F1B", 2, "--experimental.pipeline_parallel_degree 2 --experimental.pipeline_parallel_microbatch_size 1"},
      {"step in bwd", 1, "--optimizer.early_step_in_backward"},
      {"fsdp 4, full, sib", 4, "--activation_checkpoint.mode full --optimizer.early_step_in_backward"},
      {"fsdp 2, accum, sib", 2, "--training.global_batch_size 16 --optimizer.early_step_in_backward"},
      {"fsdp 2, accum", 2, "--training.global_batch_size 16"},
      {"pp 2 x fsdp 2", 4, "--experimental.pipeline_parallel_degree 2 --training.batch_size 8"},
      {"pp x fsdp, always", 4, "--experimental.pipeline_parallel_degree 2 --training.batch_size 8 "
                               "--training.fsdp_reshard_after_forward always"},
      {"pp 2, ZBV", 2, "--experimental.pipeline_parallel_degree 2 --training.batch_size 8 "
                       "--training.data_parallel_shard_degree 1 --experimental.pipeline_parallel_schedule ZBVZeroBubble"},
      {"pp 2 x fsdp 2, ZBV", 4, "--experimental.pipeline_parallel_degree 2 --training.batch_size 8 "
                                "--experimental.pipeline_parallel_schedule ZBVZeroBubble"},
      {"pp x fsdp, rs/mb", 4, "--experimental.pipeline_parallel_degree 2 --training.batch_size 8 "
                              "--training.fsdp_reduce_scatter_per_microbatch true"},
      {"pp x fsdp ZBV rs/mb", 4, "--experimental.pipeline_parallel_degree 2 --training.batch_size 8 "
                                 "--experimental.pipeline_parallel_schedule ZBVZeroBubble "
                                 "--training.fsdp_reduce_scatter_per_microbatch true"},
      {"pp x fsdp, full AC", 4, "--experimental.pipeline_parallel_degree 2 --training.batch_size 8 "
                                "--activation_checkpoint.mode full"},
      {"fsdp 4, full, never", 4, "--activation_checkpoint.mode full --training.fsdp_reshard_after_forward never"},
  };
  std::printf("%-18s %14s %14s %9s   %s\n", "case", "measured peak", "estimated", "est/meas", "estimated peak at");
  for (const Case& c : cases) {
    Scratch scratch;
    const Measured m = run_and_measure(scratch.dir, c.nproc, c.overrides);
    std::vector<std::string> args = {"--job.config_file", source_path("train_configs/debug_model.toml")};
    for (const std::string& w : split_words(c.overrides)) args.push_back(w);
    const titan::estimate::JobEstimate e = titan::estimate::estimate_job(titan::config::parse_job_config(args), c.nproc);
    const titan::estimate::RankMemory& r = e.worst();
    const double ratio = static_cast<double>(r.peak) / static_cast<double>(m.peak);
    std::printf("%-18s %14lld %14lld %9.4f   %s\n", c.name, static_cast<long long>(m.peak),
                static_cast<long long>(r.peak), ratio, r.peak_phase.c_str());
    EXPECT_NEAR(ratio, 1.0, 0.10) << c.name;
    // The states are exact: shard sizes and AdamW's two moments (rank 0's,
    // which is pipeline rank 0; the worst rank may hold another stage).
    EXPECT_EQ(e.ranks.front().parameters, m.start_parameters) << c.name;
    EXPECT_EQ(e.ranks.front().optimizer_state, m.start_optimizer) << c.name;
  }
}

// A 405B layout as torchtitan's llama3_405b.toml runs it (TP 8, PP 8, FSDP
// over the rest of 512 ranks) costs nothing: the model lives on the meta
// device. The count is worked by hand from Meta's params.json for Llama 3.1
// 405B (dim 16384, 126 layers, 128 heads, 8 kv heads, FFN 53248, vocab
// 128256): 126 x 3,187,703,808 per block + 2 x 128256 x 16384 + 16384.
TEST(EstimateCli, Llama405BOnTheMetaDevice) {
  const auto r = run_command(bin_path("titan") + " estimate --model.flavor 405B --nproc 512 --training.seq_len 8192"
                             " --training.batch_size 16 --training.tensor_parallel_degree 8"
                             " --experimental.pipeline_parallel_degree 8 --activation_checkpoint.mode full"
                             " --training.mixed_precision_param bfloat16 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::printf("%s", r.output.c_str());
  EXPECT_HAS(r.output, "405,853,388,800 parameters");
  EXPECT_HAS(r.output, "Estimated model size: ");
  EXPECT_HAS(r.output, "Estimated optimizer state size: ");
  EXPECT_HAS(r.output, "Total estimated GPU memory: ");
  EXPECT_HAS(r.output, "Estimated FLOP per step: ");
  EXPECT_LT(r.seconds, 30.0) << "the meta device should make this instant";
}

// Meta's Llama 3 8B has 8,030,261,248 parameters: an independent check of
// the meta model's count, and of the estimate's printed lines.
TEST(EstimateCli, Llama8BCountAndSeedLines) {
  const auto r = run_command(bin_path("titan") + " estimate --job.config_file " +
                             source_path("train_configs/llama3_8b.toml") + " --nproc 8 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::printf("%s", r.output.c_str());
  EXPECT_HAS(r.output, "8,030,261,248 parameters");
  EXPECT_HAS(r.output, "Estimated model size: 29.92 GiB (fp32, whole model)");
  // Pure bf16 ([training] dtype): 2 bytes for each weight, gradient and
  // Adam moment, so the model and the optimizer state take half.
  const auto bf16 = run_command(bin_path("titan") + " estimate --job.config_file " +
                                source_path("train_configs/llama3_8b.toml") + " --nproc 8 --training.dtype bfloat16 2>&1");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.output;
  EXPECT_HAS(bf16.output, "Estimated model size: 14.96 GiB (bf16, whole model)");
  EXPECT_HAS(bf16.output, "bfloat16 weights and optimizer state");
  const std::regex optimizer("Estimated optimizer state size: ([0-9.]+) GiB per rank");
  std::smatch full, half;
  ASSERT_TRUE(std::regex_search(r.output, full, optimizer)) << r.output;
  ASSERT_TRUE(std::regex_search(bf16.output, half, optimizer)) << bf16.output;
  EXPECT_NEAR(std::stod(full[1]) / std::stod(half[1]), 2.0, 1e-3) << full[0] << " vs " << half[0];
}

// The layout `titan estimate` names when a rank is over budget fits when
// estimated as named (the advice is checked, not trusted). A 4-D 405B
// layout (DP 2 x CP 2 x TP 8 x PP 4 on 128 ranks) is over by its stages'
// unsharded gradient sums and gathered weights: the advice keeps the
// degrees and changes FSDP's reduction and resharding under PP. Without PP
// those two keys change nothing, so a layout with no pipeline is never
// told to set them.
TEST(EstimateCli, TheNamedLayoutFits) {
  const std::string base = bin_path("titan") + " estimate --model.flavor 405B";
  const std::vector<std::string> layouts = {
      " --nproc 128 --training.data_parallel_shard_degree 2 --training.context_parallel_degree 2"
      " --training.tensor_parallel_degree 8 --experimental.pipeline_parallel_degree 4",
      " --nproc 64 --training.data_parallel_shard_degree 2 --training.tensor_parallel_degree 8"
      " --experimental.pipeline_parallel_degree 4",
      " --nproc 64 --training.tensor_parallel_degree 8",
  };
  const std::regex fit_line("\nfit        (--nproc ([0-9]+) )?(.*): peak ([0-9.]+) GiB per rank\n");
  for (size_t i = 0; i < layouts.size(); ++i) {
    const auto r = run_command(base + layouts[i] + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.output, m, fit_line)) << r.output;
    std::printf("%s\n  -> %s", layouts[i].c_str(), m[0].str().c_str() + 1);
    if (i == 0) {
      EXPECT_EQ(m[3].str(),
                "--training.fsdp_reduce_scatter_per_microbatch true --training.fsdp_reshard_after_forward always");
      // What it costs: 8 micro-batches (batch 8 of one sequence each).
      EXPECT_HAS(r.output, "\ncost       FSDP reduce-scatters each unit 8 times a step instead of once and gathers a "
                           "block again at each forward and backward that finds it freed");
    } else {
      EXPECT_EQ(r.output.find("\ncost "), std::string::npos) << r.output;
    }
    if (layouts[i].find("pipeline_parallel_degree") == std::string::npos) {
      EXPECT_EQ(m[3].str().find("fsdp_"), std::string::npos) << m[0];
    }
    // The named layout, estimated as named: the first layout with its
    // degrees (a new --nproc replaces the old one) and the named keys.
    std::string named = layouts[i];
    if (m[2].matched) named = std::regex_replace(named, std::regex("--nproc [0-9]+"), "--nproc " + m[2].str());
    const auto again = run_command(base + named + " " + m[3].str() + " 2>&1");
    ASSERT_EQ(again.exit_code, 0) << again.output;
    EXPECT_HAS(again.output, "fits       every rank within 80 GiB (peak " + m[4].str() + " GiB)");
  }
}

// `titan estimate` plans a GPU job, also on a machine without a GPU (CI has
// none): [training] device "auto" is modelled as "cuda", "cpu" as what a
// CPU job holds (here the CPU loss's fp32 [tokens, vocab] buffers and
// Gloo's reduce-scatter copies), with a note saying so.
TEST(EstimateCli, PlansAGpuJobAlsoWithoutAGpu) {
  const std::string cmd =
      bin_path("titan") + " estimate --job.config_file " + source_path("train_configs/llama3_8b.toml") + " --nproc 8";
  const auto as_default = run_command(cmd + " 2>&1");
  const auto on_gpu = run_command(cmd + " --training.device cuda 2>&1");
  const auto on_cpu = run_command(cmd + " --training.device cpu 2>&1");
  ASSERT_EQ(as_default.exit_code, 0) << as_default.output;
  ASSERT_EQ(on_gpu.exit_code, 0) << on_gpu.output;
  ASSERT_EQ(on_cpu.exit_code, 0) << on_cpu.output;
  std::printf("default:\n%s\n--training.device cpu:\n%s", as_default.output.c_str(), on_cpu.output.c_str());
  EXPECT_EQ(as_default.output, on_gpu.output);
  EXPECT_HAS(as_default.output, "not counted: CUDA context");
  EXPECT_HAS(on_cpu.output, "modelled as a CPU job");
  std::smatch m;
  auto peak = [&](const std::string& out) {
    EXPECT_TRUE(std::regex_search(out, m, std::regex(R"(Total estimated GPU memory: ([\d.]+) GiB)"))) << out;
    return m.empty() ? 0.0 : std::stod(m[1]);
  };
  EXPECT_GT(peak(on_cpu.output), peak(as_default.output));
}

TEST(EstimateCli, BadInputIsOneLine) {
  for (const std::string& args : {std::string("--nproc 0"), std::string("--nproc x"),
                                  std::string("--nproc 3 --training.tensor_parallel_degree 2"),
                                  std::string("--model.flavor 9B"), std::string("--bogus"),
                                  // what `titan train` refuses of a layout, refused alike
                                  std::string("--nproc 2 --optimizer.early_step_in_backward "
                                              "--parallelism.pipeline_parallel_degree 2"),
                                  std::string("--nproc 2 --training.tensor_parallel_degree 2 "
                                              "--parallelism.enable_async_tensor_parallel --model.converters float8 "
                                              "--quantize.linear.float8.recipe_name rowwise")}) {
    const auto r = run_command(bin_path("titan") + " estimate " + args + " 2>&1");
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output;
    std::string out = r.output;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    EXPECT_EQ(out.find('\n'), std::string::npos) << args << ": not one line:\n" << r.output;
    EXPECT_HAS(out, "error: ");
  }
}
