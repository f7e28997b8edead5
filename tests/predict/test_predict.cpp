// `titan predict` (predict/): presets, the step's arithmetic on layouts
// simple enough to restate by hand, the mesh on the nodes, the count per
// pipeline rank, bad input in one line.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <unistd.h>
#include <string>
#include <vector>

#include "../support/error_of.hpp"
#include "../support/run_command.hpp"
#include "titan/config/load.hpp"
#include "titan/models/llama3/flops.hpp"
#include "titan/models/llama3/job_layout.hpp"
#include "titan/predict/cluster.hpp"
#include "titan/predict/cpu_calibration.hpp"
#include "titan/predict/layout_search.hpp"
#include "titan/predict/step_prediction.hpp"
#include "titan/util/files.hpp"
#include "titan/verify/comm_count.hpp"

using titan::testing::bin_path;
using titan::testing::required_error_of;
using titan::testing::run_command;

namespace {

titan::config::JobConfig parse(const std::vector<std::string>& args) {
  return titan::config::parse_job_config(args);
}

titan::models::llama3::JobLayout layout(const std::vector<std::string>& args, int64_t world) {
  return titan::models::llama3::plan_layout(parse(args), world, c10::Device(c10::kCUDA));
}

titan::predict::StepPrediction predict(const std::vector<std::string>& args, int64_t world) {
  const titan::config::JobConfig cfg = parse(args);
  return titan::predict::predict_step(titan::models::llama3::plan_layout(cfg, world, c10::Device(c10::kCUDA)),
                                      titan::predict::cluster_of(cfg));
}

bool one_line(const std::string& s) { return !s.empty() && s.find('\n') == std::string::npos; }

const titan::predict::GroupComm* group(const titan::predict::RankPrediction& r, const std::string& name) {
  for (const auto& g : r.comm)
    if (g.group == name) return &g;
  return nullptr;
}

}  // namespace

TEST(ClusterPresets, EveryPresetHasItsNumbers) {
  for (const std::string& name : titan::predict::cluster_presets()) {
    const titan::predict::Cluster c = titan::predict::cluster_preset(name);
    SCOPED_TRACE(name);
    EXPECT_EQ(c.preset, name);
    EXPECT_GT(c.peak_bf16, 1e14);
    EXPECT_GT(c.peak_fp32, 1e13);
    EXPECT_LT(c.peak_fp32, c.peak_bf16);
    EXPECT_GT(c.hbm_bandwidth, 1e12);
    EXPECT_GT(c.hbm_capacity_gib, 60);
    EXPECT_EQ(c.gpus_per_node, 8);
    EXPECT_GT(c.intra_bandwidth, c.inter_bandwidth);
    for (double e : {c.matmul_efficiency, c.attention_efficiency, c.memory_efficiency}) {
      EXPECT_GT(e, 0);
      EXPECT_LE(e, 1);
    }
  }
  // A100 has no float8 tensor cores; the Hopper and Blackwell parts do.
  EXPECT_EQ(titan::predict::cluster_preset("a100_80g").peak_fp8, 0);
  EXPECT_GT(titan::predict::cluster_preset("h200").peak_fp8, 1.9e15);
}

TEST(ClusterPresets, KeysReplaceThePresetsValues) {
  const titan::predict::Cluster c = titan::predict::cluster_of(
      parse({"--cluster.preset", "a100_80g", "--cluster.gpus_per_node", "4", "--cluster.inter_node_bandwidth_gbps",
             "100", "--cluster.matmul_efficiency", "0.5"}));
  EXPECT_EQ(c.preset, "a100_80g");
  EXPECT_EQ(c.gpus_per_node, 4);
  EXPECT_DOUBLE_EQ(c.inter_bandwidth, 100e9);
  EXPECT_DOUBLE_EQ(c.matmul_efficiency, 0.5);
  EXPECT_DOUBLE_EQ(c.peak_bf16, titan::predict::cluster_preset("a100_80g").peak_bf16);
  ASSERT_EQ(c.overridden.size(), 3u);
  EXPECT_EQ(c.overridden[0], "[cluster] gpus_per_node = 4");
}

TEST(ClusterPresets, BadKeysAreOneLineErrors) {
  const std::string unknown = required_error_of([] { parse({"--cluster.preset", "tpu_v5"}); });
  EXPECT_TRUE(one_line(unknown)) << unknown;
  EXPECT_NE(unknown.find("h100_sxm"), std::string::npos) << unknown;
  const std::string efficiency = required_error_of([] { parse({"--cluster.matmul_efficiency", "1.5"}); });
  EXPECT_TRUE(one_line(efficiency)) << efficiency;
  EXPECT_NE(efficiency.find("[cluster] matmul_efficiency"), std::string::npos) << efficiency;
  const std::string negative = required_error_of([] { parse({"--cluster.inter_node_bandwidth_gbps", "-1"}); });
  EXPECT_NE(negative.find("[cluster] inter_node_bandwidth_gbps"), std::string::npos) << negative;
  // float8 on a GPU without float8 tensor cores.
  const std::string f8 = required_error_of([] {
    predict({"--cluster.preset", "a100_80g", "--float8.enable_float8_linear"}, 1);
  });
  EXPECT_TRUE(one_line(f8)) << f8;
  EXPECT_NE(f8.find("no float8"), std::string::npos) << f8;
}

// One GPU, no communication: the step is the documented sum, restated here
// from docs/predict.md. Memory-bound kernels made free (a huge bandwidth)
// leave the GEMMs (6 FLOPs per linear weight and token, at the matmul rate)
// and attention (4·T·H·Q per token forward, half of it causal, forward +
// 2.5 forwards backward, at the attention rate).
TEST(StepPrediction, OneGpuIsItsGemmsAndAttention) {
  const std::vector<std::string> args = {"--model.flavor", "8B", "--model.n_layers", "2", "--training.seq_len",
                                         "4096", "--training.batch_size", "2", "--cluster.preset", "h100_sxm",
                                         "--cluster.hbm_bandwidth_gbps", "1e12"};
  const titan::predict::StepPrediction p = predict(args, 1);
  const auto a = layout(args, 1).args;
  const double q = static_cast<double>(a.n_heads * a.head_dim()), kv = static_cast<double>(a.kv_heads() * a.head_dim());
  const double D = static_cast<double>(a.dim), F = static_cast<double>(a.ffn_hidden_dim());
  const double V = static_cast<double>(a.vocab_size);
  const double linear = 2 * (D * (q + 2 * kv) + q * D + 3 * D * F) + D * V;
  const double tokens = 2 * 4096;
  const titan::predict::Cluster c = titan::predict::cluster_preset("h100_sxm");
  const double gemm = 6 * linear * tokens / (c.peak_bf16 * c.matmul_efficiency);
  const double attention = 2 * 4 * tokens * 4096 * q * 0.5 * 3.5 / (c.peak_bf16 * c.attention_efficiency);
  ASSERT_EQ(p.ranks.size(), 1u);
  EXPECT_TRUE(p.ranks[0].comm.empty());
  std::printf("step %.6f s; GEMMs %.6f s + attention %.6f s = %.6f s\n", p.step_seconds, gemm, attention,
              gemm + attention);
  EXPECT_NEAR(p.ranks[0].per_microbatch.gemm, gemm, 1e-9 * gemm);
  EXPECT_NEAR(p.ranks[0].per_microbatch.attention, attention, 1e-9 * attention);
  // Memory-bound work is what is left: under 0.1 % of the step at 1 PB/s.
  EXPECT_NEAR(p.step_seconds, gemm + attention, 1e-3 * p.step_seconds);
  // Throughput and MFU as torchtitan reports them.
  EXPECT_NEAR(p.tokens_per_second_per_gpu, tokens / p.step_seconds, 1e-9 * p.tokens_per_second_per_gpu);
  const double flops = titan::models::llama3::flops_per_token(a, 4096);
  EXPECT_NEAR(p.mfu_percent, 100 * flops * p.tokens_per_second_per_gpu / c.peak_bf16, 1e-9);
}

// 1F1B over 4 ranks with 8 micro-batches idles (p − 1)/(m + p − 1) of the
// pipeline's time on every rank.
TEST(StepPrediction, PipelineBubbleIsTheSchedules) {
  const titan::predict::StepPrediction p =
      predict({"--model.flavor", "8B", "--training.seq_len", "2048", "--training.batch_size", "8",
               "--parallelism.pipeline_parallel_degree", "4", "--parallelism.pipeline_parallel_schedule", "1F1B"},
              4);
  ASSERT_EQ(p.ranks.size(), 4u);
  for (const auto& r : p.ranks) {
    std::printf("pp rank %d: bubble %.6f, step %.4f s\n", r.pp_rank, r.bubble, r.step);
    EXPECT_NEAR(r.bubble, 3.0 / 11.0, 1e-9);
    EXPECT_EQ(r.microbatches, 8);
    ASSERT_NE(group(r, "pp"), nullptr);
  }
  // Interleaving shrinks it.
  const titan::predict::StepPrediction v =
      predict({"--model.flavor", "8B", "--training.seq_len", "2048", "--training.batch_size", "8",
               "--parallelism.pipeline_parallel_degree", "4", "--parallelism.pipeline_parallel_schedule",
               "Interleaved1F1B"},
              4);
  EXPECT_LT(v.ranks[0].bubble, p.ranks[0].bubble);
  EXPECT_LT(v.step_seconds, p.step_seconds);
}

// The mesh on the nodes, TP innermost: TP 8 stays in a node of 8 GPUs and
// spans two of 4, running at the NIC's rate; FSDP over the rest spans nodes.
TEST(StepPrediction, MeshDimensionsArePlacedOnTheNodes) {
  const std::vector<std::string> base = {"--model.flavor", "70B", "--training.seq_len", "8192", "--training.batch_size",
                                         "2", "--activation_checkpoint.mode", "full",
                                         "--training.tensor_parallel_degree", "8"};
  auto on_nodes_of = [&](const char* gpus, bool async_tp) {
    std::vector<std::string> a = base;
    a.insert(a.end(), {"--cluster.gpus_per_node", gpus});
    if (async_tp) a.push_back("--training.enable_async_tensor_parallel");
    return predict(a, 256);
  };
  const auto node8 = on_nodes_of("8", false), node4 = on_nodes_of("4", false);
  const auto *t8 = group(node8.ranks[0], "tp"), *t4 = group(node4.ranks[0], "tp");
  const auto* fsdp = group(node8.ranks[0], "fsdp:dp_shard");
  ASSERT_TRUE(t8 && t4 && fsdp);
  EXPECT_FALSE(t8->crosses_nodes);
  EXPECT_TRUE(t4->crosses_nodes);
  EXPECT_TRUE(fsdp->crosses_nodes);
  EXPECT_EQ(fsdp->size, 32);
  EXPECT_EQ(t8->size, 8);
  // Sync TP is all exposed; FSDP hides all but one unit's gather and reduction.
  EXPECT_DOUBLE_EQ(t8->exposed, t8->seconds);
  EXPECT_LT(fsdp->exposed, 0.05 * fsdp->seconds);
  std::printf("TP 8: %.3f s in a node of 8, %.3f s across nodes of 4; steps %.3f and %.3f s\n", t8->seconds,
              t4->seconds, node8.step_seconds, node4.step_seconds);
  EXPECT_NEAR(t4->seconds / t8->seconds, titan::predict::cluster_preset("h100_sxm").intra_bandwidth /
                                              titan::predict::cluster_preset("h100_sxm").inter_bandwidth, 0.05 * 9);
  EXPECT_GT(node4.step_seconds, node8.step_seconds);
  // Async TP hides its rings behind the GEMMs.
  const auto a = on_nodes_of("8", true);
  EXPECT_LT(group(a.ranks[0], "tp")->exposed, 0.1 * t8->exposed);
  EXPECT_LT(a.step_seconds, node8.step_seconds);
}

// The count the predictor reads: rank 0's as `titan verify` checks it by
// default, another pipeline rank's on request, bf16 gathers in half the
// bytes when the layout's dtypes are asked for.
TEST(CommCount, PerPipelineRankAndInTheLayoutsDtypes) {
  const auto pp = layout({"--training.seq_len", "256", "--training.batch_size", "4",
                          "--parallelism.pipeline_parallel_degree", "2", "--training.data_parallel_shard_degree", "2",
                          "--training.mixed_precision_param", "float32"},
                         4);
  const auto first = titan::verify::expected_step_comm(pp, false);
  const auto last = titan::verify::expected_step_comm(pp, false, {1, false});
  ASSERT_TRUE(first.modelled && last.modelled);
  // Two stages: each sends as many bytes as it receives of the other.
  EXPECT_DOUBLE_EQ(first.comm.at("pp").at(titan::verify::CommKind::PointToPoint).bytes,
                   last.comm.at("pp").at(titan::verify::CommKind::PointToPoint).bytes);
  // Every weight is reduce-scattered once a step on one pipeline rank or
  // the other: the two ranks' reduce-scatters are the whole model's, as the
  // same FSDP 2 reduces it without PP.
  const auto whole = titan::verify::expected_step_comm(
      layout({"--training.seq_len", "256", "--training.batch_size", "4", "--training.mixed_precision_param", "float32"},
             2),
      false);
  const auto scatter_bytes = [](const titan::verify::ExpectedComm& e) {
    return e.comm.at("dp_shard").at(titan::verify::CommKind::ReduceScatter).bytes;
  };
  std::printf("reduce-scatter bytes: pp rank 0 %.0f + pp rank 1 %.0f; without PP %.0f\n", scatter_bytes(first),
              scatter_bytes(last), scatter_bytes(whole));
  EXPECT_DOUBLE_EQ(scatter_bytes(first) + scatter_bytes(last), scatter_bytes(whole));

  const auto bf16 = layout({"--training.seq_len", "256", "--training.batch_size", "4",
                            "--training.mixed_precision_param", "bfloat16"},
                           2);
  const auto fp32 = layout({"--training.seq_len", "256", "--training.batch_size", "4",
                            "--training.mixed_precision_param", "float32"},
                           2);
  EXPECT_FALSE(titan::verify::expected_step_comm(bf16, false).modelled);
  const auto half = titan::verify::expected_step_comm(bf16, false, {0, true});
  const auto full = titan::verify::expected_step_comm(fp32, false);
  ASSERT_TRUE(half.modelled);
  const auto gather = titan::verify::CommKind::AllGather, scatter = titan::verify::CommKind::ReduceScatter;
  EXPECT_DOUBLE_EQ(2 * half.comm.at("dp_shard").at(gather).bytes, full.comm.at("dp_shard").at(gather).bytes);
  // Gradients are reduced in fp32 ([training] mixed_precision_reduce).
  EXPECT_DOUBLE_EQ(half.comm.at("dp_shard").at(scatter).bytes, full.comm.at("dp_shard").at(scatter).bytes);
}

TEST(PredictCli, PrintsTheStepAndItsLastLine) {
  const auto r = run_command(bin_path("titan") +
                             " predict --model.flavor 8B --nproc 8 --training.batch_size 1 --training.seq_len 8192 "
                             "--cluster.preset h200 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* want : {"titan predict: 8 GPUs on 1 node(s), [cluster] preset h200", "pp rank 0 (stage 0)",
                           "dp_shard FSDP    8 ranks in a node", "predicted: step "})
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
}

TEST(PredictCli, BadInputIsOneLine) {
  struct Case {
    const char* args;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {"--cluster.preset tpu", "expected one of \"h100_sxm\""},
           {"--nproc=8", "a space, not '='"},
           {"--nproc 0", "positive number of ranks"},
           {"--model.flavor 405B --nproc 8", "does not fit"},
           {"--training.device cpu", "use --cluster.preset cpu"},
           {"--cluster.preset cpu --training.device cuda", "models CPU jobs"},
           {"--cluster.preset a100_80g --float8.enable_float8_linear", "no float8"},
           {"--bogus", "unexpected argument"},
       }) {
    const auto r = run_command(bin_path("titan") + " predict " + c.args + " 2>&1");
    SCOPED_TRACE(c.args);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << r.output;
    std::string text = r.output;
    while (!text.empty() && text.back() == '\n') text.pop_back();
    EXPECT_EQ(text.find('\n'), std::string::npos) << "more than one line:\n" << r.output;
  }
}

// Fast enough to use in a loop: a 16,384-GPU layout in well under 10 s.
TEST(PredictCli, SixteenThousandGpusInSeconds) {
  const auto r = run_command(bin_path("titan") +
                             " predict --model.flavor 405B --nproc 16384 --training.batch_size 16 "
                             "--training.seq_len 8192 --training.tensor_parallel_degree 8 "
                             "--parallelism.pipeline_parallel_degree 16 --parallelism.pipeline_parallel_schedule "
                             "Interleaved1F1B --activation_checkpoint.mode full 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::printf("405B on 16,384 GPUs predicted in %.2f s\n", r.seconds);
  EXPECT_LT(r.seconds, 10.0);
}

// Any Llama-shaped model: the flavors' shape keys plus the FFN width and the
// vocabulary. Mistral 7B v0.1 (dim 4096, 32 layers, 32/8 heads, FFN 14336,
// vocabulary 32000) has 7,241,732,096 parameters as published.
TEST(ModelOverrides, FfnWidthAndVocabularyDescribeOtherModels) {
  const auto mistral = layout({"--model.flavor", "8B", "--model.ffn_hidden_size", "14336", "--model.vocab_size",
                               "32000", "--training.seq_len", "4096"},
                              1)
                           .args;
  EXPECT_EQ(mistral.ffn_hidden_dim(), 14336);
  EXPECT_EQ(mistral.vocab_size, 32000);
  EXPECT_EQ(titan::models::llama3::count_parameters(mistral), 7241732096LL);
  // A width no flavor of that dim has gets a recipe of its own.
  const auto odd = layout({"--model.flavor", "8B", "--model.ffn_hidden_size", "11008"}, 1).args;
  EXPECT_EQ(odd.ffn_hidden_dim(), 11008);
  const std::string negative = required_error_of([] { layout({"--model.vocab_size", "-5"}, 1); });
  EXPECT_NE(negative.find("[model] vocab_size"), std::string::npos) << negative;
}

// --search: the winner fits, is no slower than the runner-up or the
// config's own layout, and its flags, read back as a config, predict the
// same step.
TEST(LayoutSearch, FindsTheFastestLayoutThatFits) {
  const std::vector<std::string> job = {"--model.flavor", "8B", "--training.seq_len", "8192", "--training.batch_size",
                                        "2", "--cluster.preset", "h100_sxm", "--activation_checkpoint.mode", "full"};
  ASSERT_TRUE(predict(job, 16).fits);  // the config's own layout is one of the grid's
  const titan::config::JobConfig cfg = parse(job);
  const titan::predict::Cluster cluster = titan::predict::cluster_of(cfg);
  const titan::predict::SearchResult r = titan::predict::search_layouts(cfg, 16, cluster);
  std::printf("searched %lld layouts in %.2f s; fastest %s: %.4f s\n", static_cast<long long>(r.tried + r.refused),
              r.seconds, r.best.empty() ? "-" : r.best[0].flags.c_str(),
              r.best.empty() ? 0.0 : r.best[0].prediction.step_seconds);
  ASSERT_EQ(r.best.size(), 2u);
  EXPECT_TRUE(r.best[0].prediction.fits);
  EXPECT_LE(r.best[0].prediction.step_seconds, r.best[1].prediction.step_seconds);
  EXPECT_EQ(r.best[0].prediction.tokens_per_step, predict(job, 16).tokens_per_step);  // the same global batch
  EXPECT_LE(r.best[0].prediction.step_seconds, predict(job, 16).step_seconds);
  std::vector<std::string> back = job;
  std::string flags = r.best[0].flags;
  for (size_t at = 0; at != std::string::npos;) {
    const size_t next = flags.find(' ', at);
    back.push_back(flags.substr(at, next == std::string::npos ? next : next - at));
    at = next == std::string::npos ? next : next + 1;
  }
  EXPECT_DOUBLE_EQ(predict(back, 16).step_seconds, r.best[0].prediction.step_seconds);
  const std::string text = titan::predict::format_search(r);
  EXPECT_NE(text.find("runner-up: "), std::string::npos) << text;
  EXPECT_NE(text.find("% slower"), std::string::npos) << text;
}

// The cpu preset: this machine as calibrated, its ranks sharing the cores.
TEST(CpuPreset, RanksShareTheCalibratedMachine) {
  titan::predict::CpuCalibration c;
  c.cpu_model = "test cpu", c.cores = 4, c.date = "2026-12-08";
  c.gemm_one_thread = 50e9, c.gemm_all_cores = 180e9;
  c.copy_one_thread = 10e9, c.copy_all_cores = 30e9;
  c.attention_efficiency = 0.3, c.gloo_bandwidth = 2e9, c.gloo_latency = 40e-6;
  const titan::predict::Cluster one = titan::predict::cpu_cluster(c, 1), two = titan::predict::cpu_cluster(c, 2),
                                eight = titan::predict::cpu_cluster(c, 8);
  EXPECT_DOUBLE_EQ(one.peak_fp32, 180e9);   // every core, as measured
  EXPECT_DOUBLE_EQ(two.peak_fp32, 100e9);   // two cores each: 2 x one thread
  EXPECT_DOUBLE_EQ(eight.peak_fp32, 25e9);  // half a core each
  EXPECT_DOUBLE_EQ(two.hbm_bandwidth, 20e9);
  EXPECT_EQ(two.gpus_per_node, 2);
  EXPECT_FALSE(two.overlaps_communication);
  EXPECT_DOUBLE_EQ(two.intra_bandwidth, 2e9);
}

TEST(CpuPreset, NoCalibrationIsOneLineSayingHowToMakeOne) {
  const std::string dir = titan::files::join(titan::files::temp_dir(), "titan_predict_cpu_" + std::to_string(::getpid()));
  titan::files::make_directories(dir);
  ::setenv("TITAN_PREDICT_CPU_CACHE", (dir + "/none.json").c_str(), 1);
  const std::string missing = required_error_of([] { titan::predict::load_cpu_calibration(); });
  EXPECT_TRUE(one_line(missing)) << missing;
  EXPECT_NE(missing.find("titan predict --calibrate"), std::string::npos) << missing;
  {
    std::ofstream(dir + "/other.json") << R"({"cpu_model": "another cpu", "cores": 96, "date": "2026-01-01",
      "gemm_one_thread": 1e10, "gemm_all_cores": 1e11, "copy_one_thread": 1e10, "copy_all_cores": 1e11,
      "attention_efficiency": 0.3, "gloo_bandwidth": 1e9, "gloo_latency": 1e-5})";
  }
  ::setenv("TITAN_PREDICT_CPU_CACHE", (dir + "/other.json").c_str(), 1);
  const std::string other = required_error_of([] { titan::predict::load_cpu_calibration(); });
  EXPECT_NE(other.find("another machine"), std::string::npos) << other;
  { std::ofstream(dir + "/cut.json") << R"({"cpu_model": )"; }
  ::setenv("TITAN_PREDICT_CPU_CACHE", (dir + "/cut.json").c_str(), 1);
  const std::string cut = required_error_of([] { titan::predict::load_cpu_calibration(); });
  EXPECT_TRUE(one_line(cut)) << cut;
  EXPECT_NE(cut.find("is not a calibration"), std::string::npos) << cut;
  ::unsetenv("TITAN_PREDICT_CPU_CACHE");
  titan::files::remove_all(dir);
}

// --calibrate measures this machine (two ranks of Gloo included), and the
// cpu preset then predicts a CPU job with it.
TEST(CpuPreset, CalibrateThenPredict) {
  const std::string dir = titan::files::join(titan::files::temp_dir(), "titan_calibrate_" + std::to_string(::getpid()));
  titan::files::make_directories(dir);
  const std::string env = "TITAN_PREDICT_CPU_CACHE=" + dir + "/predict_cpu.json TITAN_CPU_PEAK_CACHE=" + dir +
                          "/cpu_peak.json ";
  const auto cal = run_command(env + bin_path("titan") + " predict --calibrate 2>&1");
  ASSERT_EQ(cal.exit_code, 0) << cal.output;
  std::printf("%s(%.1f s)\n", cal.output.c_str(), cal.seconds);
  EXPECT_NE(cal.output.find("calibrated: "), std::string::npos) << cal.output;
  const auto p = run_command(env + bin_path("titan") +
                             " predict --cluster.preset cpu --nproc 2 --training.seq_len 256 --training.batch_size 2 "
                             "2>&1");
  EXPECT_EQ(p.exit_code, 0) << p.output;
  EXPECT_NE(p.output.find("(calibrated "), std::string::npos) << p.output;
  EXPECT_NE(p.output.find("predicted: step "), std::string::npos) << p.output;
  titan::files::remove_all(dir);
}
