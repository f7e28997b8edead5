// `titan train` as a user runs it: a short real run prints the log line and
// the summary; every kind of bad input gives one clear line and exit 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/cpu_gemm_here.hpp"
#include "support/metrics_jsonl.hpp"
#include "support/run_command.hpp"
#include "titan/checkpoint/file_io.hpp"
#include "titan/data/base64.hpp"
#include "titan/ops/cpu_isa.hpp"
#include "titan/ops/gemm/onednn_sgemm.hpp"
#include "titan/train/host_memory_check.hpp"
#include "titan/util/files.hpp"
#include "train_test_util.hpp"

namespace {

using titan::testing::bin_path;
using titan::testing::jsonl_losses;
using titan::testing::run_command;
using titan::testing::ScratchDir;
using titan::testing::source_path;

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "missing: " << (part) << "\n" << (text)

// The debug model, cut to a few tiny steps so that a CLI run takes seconds.
std::string debug_run(const ScratchDir& dir) {
  return bin_path("titan") + " train --job.config_file " + source_path("train_configs/debug_model.toml") +
         " --job.dump_folder " + dir.path() + "/out --training.device cpu --training.seq_len 16" +
         " --training.batch_size 2 --training.steps 3 --metrics.log_freq 1";
}

// A tiktoken rank file: the 256 single bytes, then `extra` two-byte tokens.
std::string rank_file(int extra) {
  std::string text;
  for (int i = 0; i < 256 + extra; ++i) {
    std::string bytes = i < 256 ? std::string(1, static_cast<char>(i))
                                : std::string{static_cast<char>((i - 256) / 256 + 'a'), static_cast<char>(i % 256)};
    text += titan::data::base64_encode(bytes) + " " + std::to_string(i) + "\n";
  }
  return text;
}

TEST(TrainCli, ShortRunLogsAndSummarises) {
  ScratchDir dir("train_cli_ok");
  auto r = run_command(debug_run(dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* want : {"model     llama3 debugmodel", "step:  1  loss:", "step:  3  loss:", "grad_norm:", "tps:",
                           "mfu:", "training done: 3/3 steps", "loss      "}) {
    EXPECT_HAS(r.output, want);
  }
}

// The banner names the GEMM of the fp32 Linear layers ([model]
// cpu_matmul): by default oneDNN where titan's plugin loads and the CPU is
// not Intel's (on Intel, aten::mm and why), aten::mm when asked. A
// libtitan.so with no plugin beside it (a build carried to a machine
// without it, as the GPU bundle is) falls back to aten::mm under "auto",
// says why, and trains; "onednn" there is one line and exit 1.
TEST(TrainCli, BannerNamesTheGemmOfTheLinearLayers) {
  ScratchDir dir("train_cli_gemm");
  auto r = run_command(debug_run(dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const titan::testing::CpuGemmHere here = titan::testing::cpu_gemm_here();
  EXPECT_HAS(r.output, !titan::ops::onednn::available() ? "fp32 Linear GEMMs by aten::mm (oneDNN's plugin did not load"
                       : here.intel   ? "fp32 Linear GEMMs by aten::mm (an Intel CPU, where MKL's own kernels are as fast"
                       : !here.avx512 ? "fp32 Linear GEMMs by aten::mm (oneDNN would run gemm:jit here, not its AVX-512"
                                      : " threads, fp32 Linear GEMMs by oneDNN\n");
  auto aten = run_command(debug_run(dir) + " --model.cpu_matmul aten");
  ASSERT_EQ(aten.exit_code, 0) << aten.output;
  EXPECT_HAS(aten.output, "fp32 Linear GEMMs by aten::mm\n");

  const std::string alone = dir.path() + "/alone";
  ASSERT_EQ(run_command("mkdir -p " + alone + " && cp " + bin_path("../lib/libtitan.so") + " " + alone).exit_code, 0);
  const std::string without_plugin = "LD_LIBRARY_PATH=" + alone + " " + debug_run(dir);
  auto fallback = run_command(without_plugin);
  ASSERT_EQ(fallback.exit_code, 0) << fallback.output;
  EXPECT_HAS(fallback.output, "fp32 Linear GEMMs by aten::mm (oneDNN's plugin did not load: ");
  EXPECT_HAS(fallback.output, alone + "/libtitan_onednn.so");
  EXPECT_HAS(fallback.output, "training done: 3/3 steps");
  auto insist = run_command(without_plugin + " --model.cpu_matmul onednn");
  EXPECT_EQ(insist.exit_code, 1) << insist.output;
  EXPECT_HAS(insist.output, "error: cpu_matmul = \"onednn\": oneDNN's plugin did not load: ");
}

// "auto" takes oneDNN's GEMM only after checking it against float64 on
// this machine. oneDNN's jit GEMM (what it runs without AVX-512) once
// failed inside titan: libdnnl's own symbols bound to LibTorch's copies
// (ops/gemm/onednn_sgemm.cpp). Limited to AVX2, oneDNN now trains;
// with the old loading brought back by a preload, "auto" falls back to
// aten::mm naming the check that failed, and "onednn" is one line, exit 1.
TEST(TrainCli, AutoChecksOneDnnBeforeUsingIt) {
  if (!titan::ops::onednn::available()) GTEST_SKIP() << "no oneDNN plugin: " << titan::ops::onednn::unavailable_reason();
  ScratchDir dir("train_cli_gemm_check");
  const std::string avx2 = "ONEDNN_MAX_CPU_ISA=AVX2 ";
  auto fixed = run_command(avx2 + debug_run(dir) + " --model.cpu_matmul onednn");
  ASSERT_EQ(fixed.exit_code, 0) << fixed.output;
  EXPECT_HAS(fixed.output, " threads, fp32 Linear GEMMs by oneDNN\n");
  EXPECT_HAS(fixed.output, "training done: 3/3 steps");

  const std::string broken = avx2 + "LD_PRELOAD=" + bin_path("../lib/libtitan_test_no_deepbind.so") + " ";
  auto fallback = run_command(broken + debug_run(dir));
  ASSERT_EQ(fallback.exit_code, 0) << fallback.output;
  EXPECT_HAS(fallback.output, "fp32 Linear GEMMs by aten::mm (oneDNN's GEMM failed its check against float64 (x·Wᵀ: ");
  EXPECT_HAS(fallback.output, "training done: 3/3 steps");
  auto insist = run_command(broken + debug_run(dir) + " --model.cpu_matmul onednn");
  EXPECT_EQ(insist.exit_code, 1) << insist.output;
  EXPECT_HAS(insist.output, "error: cpu_matmul = \"onednn\": oneDNN's GEMM failed its check against float64 (");
}

// The debug config's [validation] runs as it stands, pipeline included:
// its batches are the training's shape and its data the built-in corpus
// (torchtitan's defaults, seq_len 2048 and local_batch_size 8 on
// c4_validation, are refused at the debug model's 128 tokens).
TEST(TrainCli, DebugConfigValidatesWithOneFlag) {
  ScratchDir dir("train_cli_validate");
  const std::string cmd = bin_path("titan") + " train --job.config_file " +
                          source_path("train_configs/debug_model.toml") + " --job.dump_folder " + dir.path() +
                          "/out --training.steps 2 --validation.enable --validation.steps 1";
  auto one = run_command(cmd);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("validate step:  1"), std::string::npos) << one.output;
  auto pp = run_command(cmd + " --nproc 2 --experimental.pipeline_parallel_degree 2");
  ASSERT_EQ(pp.exit_code, 0) << pp.output;
  EXPECT_NE(pp.output.find("validate step:  1"), std::string::npos) << pp.output;
}

TEST(TrainCli, HugeLearningRateStopsOnNonFiniteLoss) {
  ScratchDir dir("train_cli_nan");
  auto r = run_command(debug_run(dir) + " --training.steps 30 --optimizer.lr 1e6 --lr_scheduler.warmup_steps 1" +
                       " --training.max_norm 0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_HAS(r.output, "error: step ");
  EXPECT_TRUE(r.output.find("loss is NaN") != std::string::npos || r.output.find("loss is inf") != std::string::npos ||
              r.output.find("gradient norm is") != std::string::npos)
      << r.output;
}

// `titan train` with titan's own flash attention in every block.
TEST(TrainCli, FlashAttentionBackendTrains) {
  ScratchDir dir("train_cli_flash");
  auto r = run_command(debug_run(dir) + " --model.attn_type flash");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "training done: 3/3 steps");
}

// A torchtitan config names its dataset (c4_test) and says where the files
// are (dataset_path): torchtitan's test-asset layout, a folder holding
// JSON Lines named data.json, trains as it is.
TEST(TrainCli, TorchtitanDatasetNameWithDatasetPathTrains) {
  ScratchDir dir("train_cli_c4");
  std::string lines;
  for (int i = 0; i < 40; ++i)
    lines += "{\"text\": \"Document " + std::to_string(i) +
             " of a small c4-style test set, one JSON object per line.\", \"timestamp\": \"2019-04-25T12:57:54Z\", "
             "\"url\": \"https://example.com/" + std::to_string(i) + "\"}\n";
  titan::files::make_directories(dir.path() + "/c4_test");
  dir.write("c4_test/data.json", lines);
  // The debug model's config, its dataset line naming c4_test instead.
  std::string config = titan::checkpoint::read_text_file(source_path("train_configs/debug_model.toml"));
  const size_t at = config.find("dataset = \"\"");
  ASSERT_NE(at, std::string::npos) << "debug_model.toml no longer sets dataset = \"\"";
  config.replace(at, std::string("dataset = \"\"").size(),
                 "dataset = \"c4_test\"\ndataset_path = \"" + dir.path() + "/c4_test\"");
  const std::string toml = dir.write("c4.toml", config);
  std::string cmd = debug_run(dir);
  cmd.replace(cmd.find(source_path("train_configs/debug_model.toml")),
              source_path("train_configs/debug_model.toml").size(), toml);
  auto r = run_command(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "data      " + dir.path() + "/c4_test");
  EXPECT_HAS(r.output, "training done: 3/3 steps");
}

TEST(TrainCli, BadInputIsOneLineAndExitsNonZero) {
  ScratchDir dir("train_cli_bad");
  const std::string titan = bin_path("titan") + " train --job.dump_folder " + dir.path() + "/out --training.steps 2";
  const std::string malformed = dir.write("malformed.toml", "[training\nsteps = 3\n");
  const std::string unknown = dir.write("unknown.toml", "[training]\nstpes = 3\n");
  const std::string wrong_type = dir.write("wrong_type.toml", "[training]\nsteps = \"ten\"\n");
  const std::string corrupt_tok = dir.write("corrupt.model", "this is not a tokenizer\n");
  const std::string empty_data = dir.write("empty.txt", "");
  const std::string big_tok = dir.write("big.model", rank_file(1800));  // 2056 ranks + 256 specials > 2048
  const std::vector<std::pair<std::string, std::string>> cases = {
      {" --job.config_file " + dir.path() + "/missing.toml", "config file not found"},
      {" --job.config_file " + malformed, "malformed.toml"},
      {" --job.config_file " + unknown, "did you mean"},
      {" --job.config_file " + wrong_type, "steps"},
      {" --training.steps ten", "steps"},
      {" --training.seq_len 0", "seq_len = 0 is out of range"},
      {" --training.seq_len -4", "seq_len"},
      {" --model.flavor 9B", "9B"},
      {" --model.tokenizer_path " + dir.path() + "/missing.model", "missing.model"},
      {" --model.tokenizer_path " + corrupt_tok, "corrupt.model"},
      {" --training.dataset " + empty_data, "empty"},
      {" --training.dataset c4_test", "set [training] dataset_path"},
      {" --training.dataset c4 --training.dataset_path " + dir.path() + "/no_c4", "no_c4' does not exist"},
      {" --model.tokenizer_path " + big_tok, "2312"},
      {" --no-such-flag", "unexpected argument"},
      {" --model.attn_type flex", "attn_type"},
      // Petabytes of activations: refused before anything is built.
      {" --training.seq_len 8388608 --training.batch_size 64", "GiB of memory per rank (titan estimate's peak"},
  };
  for (const auto& [args, expect] : cases) {
    SCOPED_TRACE(args);
    auto r = run_command(titan + args);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_HAS(r.output, "error: ");
    EXPECT_HAS(r.output, expect);
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
}

// The line a CPU job over the host's memory gets (the numbers are given
// here; the CLI case above reaches it through titan estimate).
TEST(TrainCli, HostMemoryShortfallNamesBothSides) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  EXPECT_EQ(titan::train::host_memory_shortfall(2 * kGiB, 4, 8 * kGiB, "start of backward"), "");
  const std::string over = titan::train::host_memory_shortfall(3 * kGiB, 4, 8 * kGiB, "start of backward");
  EXPECT_HAS(over, "needs about 3.0 GiB of memory per rank");
  EXPECT_HAS(over, "at the start of backward");
  EXPECT_HAS(over, "12.0 GiB for the 4 ranks on this host, and this host has 8.0 GiB available");
  EXPECT_HAS(over, "TITAN_SKIP_MEMORY_CHECK=1");
  EXPECT_EQ(titan::train::host_memory_shortfall(3 * kGiB, 4, 0, "x"), "");  // nothing known: no verdict
}

}  // namespace

namespace {

// Under the launcher: FSDP over 2 emulated ranks logs once (rank 0) with
// the parallel layout in the banner; degrees that do not fit the world give
// every rank the same one-line error and the launcher exits non-zero
// without a hang (the timeout of run_command would show one).
TEST(TrainCli, TwoRanksShardAndBadDegreesFailCleanly) {
  ScratchDir dir("train_cli_dp");
  auto ok = run_command(debug_run(dir) + " --nproc 2");
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_HAS(ok.output, "parallel  dp_shard=2: FSDP per block + root");
  EXPECT_HAS(ok.output, "on 2 data-parallel rank(s)");
  EXPECT_HAS(ok.output, "training done: 3/3 steps");
  EXPECT_EQ(ok.output.find("[rank 1] step:"), std::string::npos) << "only rank 0 logs\n" << ok.output;

  auto bad = run_command(debug_run(dir) + " --nproc 3 --training.data_parallel_shard_degree 2");
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  EXPECT_HAS(bad.output, "needs 2 ranks, but 3 were launched");
}

// [job] save_config_file (torchtitan's): rank 0 writes the effective config
// (file, then command line) as {"section": {"key": value}} JSON under the
// dump folder; a path that cannot be written stops both ranks with one line.
TEST(TrainCli, SaveConfigFileWritesTheEffectiveConfig) {
  ScratchDir dir("train_cli_save_config");
  auto r = run_command(debug_run(dir) + " --nproc 2 --job.save_config_file cfg/job.json --optimizer.lr 0.0005");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string path = dir.path() + "/out/cfg/job.json";
  EXPECT_HAS(r.output, "config    written to " + path);
  const nlohmann::json j = nlohmann::json::parse(titan::files::read_file(path));
  EXPECT_EQ(j["model"]["flavor"], "debugmodel");                 // from the file
  EXPECT_EQ(j["training"]["seq_len"], 16);                       // from the command line
  EXPECT_EQ(j["optimizer"]["lr"], 0.0005);
  EXPECT_EQ(j["job"]["save_config_file"], "cfg/job.json");
  EXPECT_EQ(j["training"]["steps"], 3);
  EXPECT_EQ(j["checkpoint"]["enable_checkpoint"], false);        // defaults too: every key
  std::printf("%s: %zu sections\n", path.c_str(), j.size());

  std::ofstream(dir.path() + "/blocker") << "a file, not a folder\n";
  auto bad = run_command(debug_run(dir) + " --nproc 2 --job.save_config_file " + dir.path() + "/blocker/job.json");
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  EXPECT_HAS(bad.output, "[job] save_config_file: cannot open " + dir.path() + "/blocker/job.json for writing (Not a directory)");
  EXPECT_HAS(bad.output, "[rank 1] error: [job] save_config_file failed on rank 0");
}

}  // namespace

// The capstone's 4-D layout through `titan train --nproc 16`: FSDP 2 x CP 2
// x TP 2 x PP 2 on the debug model has 2 data-parallel ranks, so it reads
// what FSDP 2 alone reads and its losses follow FSDP 2's step by step (fp32
// weights, so that only the order of the sums differs: the bound is the
// trainer tests' 1e-6 relative; the measured difference is printed).
TEST(TrainCli, FourDimensionalRunFollowsFsdpAlone) {
  ScratchDir dir("train_cli_4d");
  const std::string common = bin_path("titan") + " train --job.config_file " +
                             source_path("train_configs/debug_model.toml") +
                             " --training.device cpu --training.seq_len 64 --training.batch_size 2 --training.steps 3"
                             " --metrics.log_freq 1 --training.mixed_precision_param float32";
  auto fsdp = run_command(common + " --nproc 2 --job.dump_folder " + dir.path() + "/fsdp");
  ASSERT_EQ(fsdp.exit_code, 0) << fsdp.output;
  auto four = run_command(common + " --nproc 16 --parallelism.context_parallel_degree 2"
                                   " --training.tensor_parallel_degree 2 --experimental.pipeline_parallel_degree 2"
                                   " --job.dump_folder " + dir.path() + "/4d");
  ASSERT_EQ(four.exit_code, 0) << four.output;
  EXPECT_HAS(four.output, "pp=2 x dp_shard=2 x cp=2 x tp=2");
  EXPECT_HAS(four.output, "training done: 3/3 steps");
  const std::vector<double> a = jsonl_losses(dir.path() + "/fsdp/metrics.jsonl"),
                            b = jsonl_losses(dir.path() + "/4d/metrics.jsonl");
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), a.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::abs(a[i]));
  std::printf("[measured] titan train --nproc 16 (FSDP 2 x CP 2 x TP 2 x PP 2) vs --nproc 2 (FSDP 2): losses %.6f "
              "%.6f %.6f vs %.6f %.6f %.6f, max rel diff %.2e\n",
              b[0], b[1], b[2], a[0], a[1], a[2], worst);
  EXPECT_LT(worst, 1e-6);
}

// A pipeline the batch cannot feed fails before any rank joins: one line.
TEST(TrainCli, TooFewMicroBatchesForTheScheduleIsOneLine) {
  ScratchDir dir("train_cli_pp_bad");
  auto r = run_command(debug_run(dir) + " --nproc 2 --experimental.pipeline_parallel_degree 2 --training.batch_size 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_HAS(r.output, "pipeline schedule 1F1B needs at least as many micro-batches (1) as pipeline ranks (2)");
  auto u = run_command(debug_run(dir) + " --nproc 2 --experimental.pipeline_parallel_degree 2 --training.batch_size 2"
                       " --experimental.pipeline_parallel_schedule zigzag");
  EXPECT_NE(u.exit_code, 0);
  EXPECT_HAS(u.output, "zigzag");
}

// torchtitan's pp_zbv integration test as its debug config has it: ZBV
// with selective AC every 2nd block. Rank 0 holds layers 0 and 5 (the V),
// and its banner counts both stages' blocks.
TEST(TrainCli, ZeroBubbleWithActivationCheckpointingAndFloat8Trains) {
  ScratchDir dir("train_cli_zbv_ac");
  auto r = run_command(debug_run(dir) + " --nproc 2 --experimental.pipeline_parallel_degree 2 --training.batch_size 4"
                       " --experimental.pipeline_parallel_schedule ZBVZeroBubble --activation_checkpoint.mode selective"
                       " --activation_checkpoint.selective_ac_option 2 --model.converters float8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Rank 0 holds layers 0 and 5 (ZBV's first and last stage): both are
  // counted, 7 linears each (wq wk wv wo w1 w2 w3; the output stays high).
  EXPECT_HAS(r.output, "layers 0 | 1-2 | 3-4 | 5; float8 linear (14 layers, tensorwise scaling); "
                       "selective AC every 2 block(s) (1 of 2 blocks)");
  EXPECT_HAS(r.output, "training done: 3/3 steps");
}

// torchtitan's [optimizer] early_step_in_backward: the banner says so, and
// that max_norm clips nothing then; PP and DDP, whose gradients are final
// only after the parameter's own backward, are one line each.
TEST(TrainCli, EarlyStepInBackwardTrainsAndRefusesPipelinesAndDdp) {
  ScratchDir dir("train_cli_early_step");
  auto r = run_command(debug_run(dir) + " --nproc 2 --optimizer.early_step_in_backward");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "optimizer AdamW (step in backward) lr");
  EXPECT_HAS(r.output, "note: [training] max_norm = 1 clips nothing with [optimizer] early_step_in_backward");
  EXPECT_HAS(r.output, "training done: 3/3 steps");
  auto pp = run_command(debug_run(dir) + " --nproc 2 --optimizer.early_step_in_backward"
                        " --parallelism.pipeline_parallel_degree 2");
  EXPECT_EQ(pp.exit_code, 1) << pp.output;
  EXPECT_HAS(pp.output, "[optimizer] early_step_in_backward with pipeline parallelism is not supported");
  auto ddp = run_command(debug_run(dir) + " --nproc 2 --optimizer.early_step_in_backward"
                         " --parallelism.data_parallel_replicate_degree 2 --parallelism.data_parallel_shard_degree 1");
  EXPECT_EQ(ddp.exit_code, 1) << ddp.output;
  EXPECT_HAS(ddp.output, "[optimizer] early_step_in_backward with DDP is not supported");
}

// `--nproc N` works the layout out in the launcher before starting any
// rank: a bad config is one line from one process (it was the same line
// from each of the N ranks, then the launcher's line naming rank 0), and no
// rank starts.
TEST(TrainCli, ABadConfigUnderNprocIsOneLineFromTheLauncher) {
  ScratchDir dir("train_cli_nproc_bad");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--training.tensor_parallel_degree 3", "4 ranks do not divide by dp_replicate*cp*tp*pp = 3"},
      {"--parallelism.context_parallel_load_balancer ptrr",
       "context_parallel_load_balancer = \"ptrr\" is not valid: expected one of \"headtail\", \"contiguous\", "
       "\"None\""},
      {"--optimizer.early_step_in_backward --parallelism.pipeline_parallel_degree 2",
       "[optimizer] early_step_in_backward with pipeline parallelism is not supported"},
  };
  for (const auto& [flags, message] : cases) {
    auto r = run_command(debug_run(dir) + " --nproc 4 " + flags);
    EXPECT_EQ(r.exit_code, 1) << flags << "\n" << r.output;
    EXPECT_HAS(r.output, "error: ");
    EXPECT_HAS(r.output, message);
    int error_lines = 0;
    std::istringstream in(r.output);
    for (std::string line; std::getline(in, line);) error_lines += line.find("error") != std::string::npos;
    EXPECT_EQ(error_lines, 1) << flags << ": one line\n" << r.output;
    EXPECT_EQ(r.output.find("[rank"), std::string::npos) << flags << ": no rank started\n" << r.output;
    EXPECT_EQ(r.output.find("titan run:"), std::string::npos) << flags << "\n" << r.output;
    std::printf("%s\n  -> %s", flags.c_str(), r.output.c_str());
  }
}

TEST(TrainCli, TensorParallelDegreeThatDoesNotDivideTheHeadsIsOneLine) {
  ScratchDir dir("train_cli_tp_bad");
  // debugmodel has 16 heads: 3 ranks cannot hold whole heads.
  auto r = run_command(debug_run(dir) + " --nproc 3 --training.tensor_parallel_degree 3");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_HAS(r.output, "tensor parallel degree 3 does not divide the model's n_heads (16)");
}

// Document masking through `titan train`: block_causal trains with every
// attention backend (the model-level equivalence with each document run
// alone is tests/attention's DocumentMask.ModelEqualsEachDocumentAlone), its
// first loss differs from the causal run's on the same data (the mask and
// the hidden boundary targets take effect), it trains under pipeline and
// under context parallelism, and the two together are one line.
TEST(TrainCli, BlockCausalTrainsWithPipelinesAndContextParallel) {
  ScratchDir dir("train_cli_block_causal");
  auto first_loss = [](const std::string& out) {
    const size_t at = out.find("step:  1  loss: ");
    return at == std::string::npos ? -1.0 : std::stod(out.substr(at + 16, 8));
  };
  auto causal = run_command(debug_run(dir) + " --training.seq_len 64");
  ASSERT_EQ(causal.exit_code, 0) << causal.output;
  for (const char* backend : {"sdpa", "flash", "math"}) {
    auto r = run_command(debug_run(dir) + " --training.seq_len 64 --model.attn_mask_type block_causal"
                         " --model.attn_type " + backend);
    ASSERT_EQ(r.exit_code, 0) << backend << "\n" << r.output;
    EXPECT_HAS(r.output, "training done: 3/3 steps");
    EXPECT_NE(first_loss(r.output), first_loss(causal.output)) << backend;
  }
  // Pipeline stages get each micro-batch's document starts, context
  // parallelism each shard's, and both together each micro-batch's shard
  // (their equivalence with one process is
  // test_trainer_dp's TrainerPipelineParallel.BlockCausalMatchesReference,
  // TrainerContextParallel.BlockCausal* and TrainerFourDimensions).
  auto pp = run_command(debug_run(dir) + " --nproc 2 --experimental.pipeline_parallel_degree 2"
                        " --training.batch_size 2 --model.attn_mask_type block_causal");
  EXPECT_EQ(pp.exit_code, 0) << pp.output;
  EXPECT_HAS(pp.output, "training done: 3/3 steps");
  auto cp = run_command(debug_run(dir) + " --nproc 2 --parallelism.context_parallel_degree 2 --training.seq_len 64"
                        " --model.attn_mask_type block_causal");
  EXPECT_EQ(cp.exit_code, 0) << cp.output;
  EXPECT_HAS(cp.output, "training done: 3/3 steps");
  auto both = run_command(debug_run(dir) + " --nproc 4 --experimental.pipeline_parallel_degree 2"
                          " --parallelism.context_parallel_degree 2 --training.batch_size 2"
                          " --model.attn_mask_type block_causal");
  EXPECT_EQ(both.exit_code, 0) << both.output;
  EXPECT_HAS(both.output, "training done: 3/3 steps");
}

// Context parallelism through `titan train`: FSDP 2 x CP 2 on 4 emulated
// ranks runs (its equivalence with one process is test_trainer_dp's
// TrainerContextParallel), and a sequence that does not cut into 2 x cp
// chunks is one line on every rank and a non-zero exit, before any rank
// joins the job.
TEST(TrainCli, ContextParallelRunsAndRefusesAnUncuttableSequence) {
  ScratchDir dir("train_cli_cp");
  auto ok = run_command(debug_run(dir) + " --nproc 4 --parallelism.context_parallel_degree 2"
                        " --parallelism.context_parallel_rotate_method alltoall");
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_HAS(ok.output, "CP 2 (ring attention, alltoall, headtail sequence split)");
  EXPECT_HAS(ok.output, "training done: 3/3 steps");
  auto bad = run_command(debug_run(dir) + " --nproc 2 --parallelism.context_parallel_degree 2 --training.seq_len 18");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_HAS(bad.output, "[training] seq_len = 18 does not divide into 4 equal chunks");
  EXPECT_HAS(bad.output, "seq_len must divide by 2 x cp");
}

namespace {

// A debug-model config in torchtitan v0.2's layout ([model] hf_assets_path,
// [training] local_batch_size / dataset = "c4_test" / dataset_path,
// [parallelism], ...) trains on c4-style JSON Lines and a tokenizer.json
// that the Python tokenizers package trained (Llama 3's
// layout, its special tokens only in tokenizer_config.json, so they get ids
// right after the 500-token vocabulary and fit the debug model's 2048).
TEST(TrainCli, TorchtitanLayoutTrainsOnAnHfAssetsFolder) {
  const char* py = std::getenv("TITAN_PYTHON");
  if (!py || !*py) GTEST_SKIP() << "TITAN_PYTHON is not set (run through ctest)";
  ScratchDir dir("train_cli_hf");
  const std::string ref = source_path("tests/reference/");
  const std::string text = dir.path() + "/sample.txt", assets = dir.path() + "/assets";
  for (const std::string& cmd : {std::string(py) + " " + ref + "tiktoken_reference.py sample-text " + text,
                                 std::string(py) + " " + ref + "hf_tokenizer_reference.py make llama3 " + text +
                                     " 500 " + assets}) {
    auto r = run_command(cmd);
    ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  }
  // The data as torchtitan's c4_test holds it: JSON Lines with a "text"
  // field, one record per paragraph of the sample text.
  std::string records, paragraph;
  {
    std::ifstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) paragraph += (paragraph.empty() ? "" : "\n") + line;
      if (line.empty() && !paragraph.empty()) records += nlohmann::json{{"text", paragraph}}.dump() + "\n", paragraph.clear();
    }
    if (!paragraph.empty()) records += nlohmann::json{{"text", paragraph}}.dump() + "\n";
  }
  titan::files::make_directories(dir.path() + "/c4_test");
  dir.write("c4_test/c4_sample.jsonl", records);
  const std::string toml = dir.write("torchtitan_debug.toml",
                                     "[job]\ndump_folder = \"" + dir.path() + "/out\"\n"
                                     "description = \"torchtitan v0.2 layout, Hugging Face tokenizer\"\n"
                                     "[metrics]\nlog_freq = 1\nenable_tensorboard = false\n"
                                     "[model]\nname = \"llama3\"\nflavor = \"debugmodel\"\n"
                                     "hf_assets_path = \"" + assets + "\"\n"
                                     "[optimizer]\nname = \"AdamW\"\nlr = 8e-4\neps = 1e-8\n"
                                     "[lr_scheduler]\nwarmup_steps = 2\ndecay_ratio = 0.8\ndecay_type = \"linear\"\n"
                                     "min_lr_factor = 0.0\n"
                                     "[training]\nlocal_batch_size = 2\nseq_len = 16\nmax_norm = 1.0\nsteps = 3\n"
                                     "dataset = \"c4_test\"\ndataset_path = \"" + dir.path() + "/c4_test\"\n"
                                     "[parallelism]\ndata_parallel_replicate_degree = 1\n"
                                     "data_parallel_shard_degree = -1\ntensor_parallel_degree = 1\n"
                                     "pipeline_parallel_degree = 1\ncontext_parallel_degree = 1\n"
                                     "[checkpoint]\nenable = false\nfolder = \"checkpoint\"\n"
                                     "[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"2\"\n");
  const std::string train = bin_path("titan") + " train --job.config_file " + toml + " --training.device cpu";
  auto r = run_command(train);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "tokenizer Hugging Face BPE " + assets + "/tokenizer.json (517 ids, BOS 501, EOS 502)");
  EXPECT_HAS(r.output, "training done: 3/3 steps");
  EXPECT_EQ(r.output.find("wins over"), std::string::npos) << r.output;

  // Both given: tokenizer_path wins, as in torchtitan, and the banner says so.
  r = run_command(train + " --training.steps 1 --model.tokenizer_path builtin:byte");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "tokenizer byte tokenizer (258 tokens)");
  EXPECT_HAS(r.output, "[model] tokenizer_path wins over hf_assets_path = \"" + assets + "\"");

  // torchtitan's own default folder, absent here: the built-in tokenizer, said so.
  r = run_command(train + " --training.steps 1 --model.hf_assets_path ./tests/assets/tokenizer");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "tokenizer tiktoken BPE");
  EXPECT_HAS(r.output, "(torchtitan's test tokenizer folder) is not here: using the built-in tokenizer");

  // A folder that is not there: one line naming it.
  r = run_command(train + " --model.hf_assets_path " + dir.path() + "/no_such_assets");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_HAS(r.output, "no_such_assets' not found");
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

}  // namespace
