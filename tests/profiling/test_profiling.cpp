// Profiling traces: the schedule's arithmetic, and the trace files of a
// real run parsed back: the recorded step's ranges (data loading, forward,
// backward, clipping, optimizer) nested inside it with positive durations,
// ATen's ops inside forward and backward, nothing from the unrecorded
// steps; on 2 ranks one file per rank with FSDP's and c10d's ranges.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <set>

#include "../train/train_test_util.hpp"
#include "support/run_command.hpp"
#include "titan/util/files.hpp"
#include "titan/profiling/memory_snapshot.hpp"
#include "titan/profiling/trace_profiler.hpp"
#include "titan/profiling/trace_reader.hpp"
#include "titan/train/trainer.hpp"

namespace {

using titan::profiling::ProfileSchedule;
using titan::testing::ScratchDir;

using Event = titan::profiling::TraceEvent;

std::vector<Event> read_trace(const std::string& path) { return titan::profiling::read_trace_events(path); }

const Event* find(const std::vector<Event>& events, const std::string& name) {
  return titan::profiling::find_event(events, name);
}

bool inside(const Event& inner, const Event& outer) { return outer.contains(inner); }

TEST(ProfileSchedule, FollowsTorchtitansWindows) {
  const ProfileSchedule s{10, 3, 1};
  std::vector<int64_t> active, warm, ends;
  for (int64_t step = 1; step <= 30; ++step) {
    if (s.is_active(step)) active.push_back(step);
    if (s.starts_warmup(step)) warm.push_back(step);
    if (s.ends_window(step)) ends.push_back(step);
  }
  EXPECT_EQ(active, (std::vector<int64_t>{10, 20, 30}));
  EXPECT_EQ(warm, (std::vector<int64_t>{7, 17, 27}));  // wait 6, warm up 3, record 1
  EXPECT_EQ(ends, (std::vector<int64_t>{10, 20, 30}));
  const ProfileSchedule two{5, 0, 2};
  EXPECT_TRUE(two.is_active(4) && two.is_active(5) && !two.is_active(3) && two.starts_warmup(4));
  EXPECT_THROW((ProfileSchedule{3, 3, 1}.validate()), std::exception);
  EXPECT_THROW((ProfileSchedule{3, 0, 0}.validate()), std::exception);
}

TEST(ProfilingTrainer, TraceHoldsTheStepsRangesNested) {
  ScratchDir dir("profiling_trace");
  titan::config::JobConfig cfg = titan::testing::tiny_config(dir.path(), 4);
  cfg.profiling.enable_profiling = true;
  cfg.profiling.profile_freq = 3, cfg.profiling.profiler_warmup = 1, cfg.profiling.profiler_active = 1;
  titan::train::TrainerOptions o;
  o.model_args = titan::testing::tiny_model();
  o.console = false, o.handle_signals = false, o.peak_flops = 0;
  titan::train::Trainer t(cfg, o);
  t.train();
  const std::string path = dir.path() + "/profile_traces/iteration_3/rank0_trace.json";
  const std::vector<Event> events = read_trace(path);
  const Event* step = find(events, "ProfilerStep#3");
  ASSERT_NE(step, nullptr) << path;
  EXPECT_EQ(find(events, "ProfilerStep#2"), nullptr) << "step 2 was only a warm-up step";
  EXPECT_EQ(find(events, "ProfilerStep#4"), nullptr) << "step 4 starts the next window";
  for (const char* name : {"titan::data_loading", "titan::forward", "titan::backward", "titan::clip_grad_norm",
                           "titan::optimizer"}) {
    const Event* e = find(events, name);
    ASSERT_NE(e, nullptr) << name << " missing from " << path;
    EXPECT_GT(e->dur, 0) << name;
    EXPECT_TRUE(inside(*e, *step)) << name << " lies outside ProfilerStep#3";
  }
  // In order within the step: data, forward, backward, clipping, optimizer.
  EXPECT_LT(find(events, "titan::forward")->ts, find(events, "titan::backward")->ts);
  EXPECT_LT(find(events, "titan::backward")->ts, find(events, "titan::optimizer")->ts);
  // ATen's matmuls inside the forward range.
  const Event& fwd = *find(events, "titan::forward");
  int mm_in_forward = 0;
  for (const auto& e : events)
    if ((e.name == "aten::mm" || e.name == "aten::matmul" || e.name == "aten::linear" || e.name == "titan::mm") &&
        inside(e, fwd))
      ++mm_in_forward;
  EXPECT_GE(mm_in_forward, 2 * 7) << "two blocks of 7 projections";
  std::printf("trace %s: %zu events; step %.0f us, forward %.0f us, %d matmuls in forward\n", path.c_str(),
              events.size(), step->dur, fwd.dur, mm_in_forward);
}

// CUDA's allocator history records no C++ stacks unless asked
// (unwinding per allocation and symbolising at the snapshot cost minutes).
TEST(MemorySnapshot, CudaHistoryStacksAreCheapByDefault) {
  using titan::profiling::detail::cuda_history_stacks;
  EXPECT_EQ(cuda_history_stacks(nullptr), "python");
  EXPECT_EQ(cuda_history_stacks(""), "python");
  EXPECT_EQ(cuda_history_stacks("0"), "python");
  EXPECT_EQ(cuda_history_stacks("1"), "all");
  EXPECT_EQ(cuda_history_stacks("true"), "all");
  EXPECT_EQ(cuda_history_stacks("yes"), "all");
}

TEST(MemorySnapshot, TimelineAccountsForTheTrainersTensors) {
  ScratchDir dir("memory_timeline");
  titan::config::JobConfig cfg = titan::testing::tiny_config(dir.path(), 4);
  cfg.profiling.enable_memory_snapshot = true;
  cfg.profiling.profile_freq = 2;
  titan::train::TrainerOptions o;
  o.model_args = titan::testing::tiny_model();
  o.console = false, o.handle_signals = false, o.peak_flops = 0;
  titan::train::Trainer t(cfg, o);
  t.train();
  int64_t param_bytes = 0;
  for (const auto& p : t.trained_parameters()) param_bytes += p.numel() * 4;
  for (int step : {2, 4}) {
    const std::string base = dir.path() + "/memory_snapshot/iteration_" + std::to_string(step) + "/rank0_memory_timeline";
    std::ifstream in(base + ".json");
    ASSERT_TRUE(in.good()) << base;
    const nlohmann::json marks = nlohmann::json::parse(in);
    ASSERT_EQ(marks.size(), 4u);
    std::map<std::string, nlohmann::json> by;
    for (const auto& m : marks) by[m.at("phase").get<std::string>()] = m;
    // Exact accounting of what the trainer owns (fp32, one process).
    for (const auto& [phase, m] : by) EXPECT_EQ(m.at("parameters").get<int64_t>(), param_bytes) << phase;
    EXPECT_EQ(by["step start"].at("gradients").get<int64_t>(), 0);  // zero_grad(set_to_none)
    EXPECT_EQ(by["forward + backward"].at("gradients").get<int64_t>(), param_bytes);
    EXPECT_EQ(by["optimizer"].at("optimizer_state").get<int64_t>(), 2 * param_bytes);  // Adam's two moments
    // The counting allocator sees at least what the trainer names, and the
    // activations of forward + backward as the phase's peak above its end.
    for (const auto& [phase, m] : by) EXPECT_GE(m.at("other").get<int64_t>(), 0) << phase;
    EXPECT_GT(by["forward + backward"].at("peak_in_phase").get<int64_t>(),
              by["forward + backward"].at("total").get<int64_t>());
    std::ifstream svg(base + ".svg");
    std::string text((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("<svg"), std::string::npos);
    EXPECT_NE(text.find("forward + backward"), std::string::npos);
    if (step == 2)
      std::printf("step 2: parameters %lld B, forward + backward peak %lld B, after optimizer %lld B\n",
                  static_cast<long long>(param_bytes),
                  static_cast<long long>(by["forward + backward"].at("peak_in_phase").get<int64_t>()),
                  static_cast<long long>(by["optimizer"].at("total").get<int64_t>()));
  }
  EXPECT_FALSE(titan::files::exists(dir.path() + "/memory_snapshot/iteration_1"));
}

TEST(ProfilingCli, EveryRankWritesItsTraceWithCollectives) {
  ScratchDir dir("profiling_cli");
  const auto r = titan::testing::run_command(
      titan::testing::bin_path("titan") + " train --nproc 2 --job.config_file " +
      titan::testing::source_path("train_configs/debug_model.toml") + " --job.dump_folder " + dir.path() +
      " --training.device cpu --training.seq_len 16 --training.batch_size 1 --training.steps 2"
      " --profiling.enable_profiling --profiling.profile_freq 2 --profiling.profiler_warmup 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("profiling: trace of step 2 written to " + dir.path() +
                          "/profile_trace/iteration_2/rank0_trace.json"),
            std::string::npos)
      << r.output;
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<Event> events =
        read_trace(dir.path() + "/profile_trace/iteration_2/rank" + std::to_string(rank) + "_trace.json");
    std::set<std::string> prefixes;
    for (const auto& e : events) {
      if (e.name.rfind("fsdp::all_gather ", 0) == 0) prefixes.insert("fsdp::all_gather");
      if (e.name.rfind("fsdp::reduce_scatter ", 0) == 0) prefixes.insert("fsdp::reduce_scatter");
      if (e.name.rfind("c10d::all_reduce ", 0) == 0) prefixes.insert("c10d::all_reduce");
    }
    EXPECT_EQ(prefixes.size(), 3u) << "rank " << rank << ": FSDP's gathers and reductions and the loss all-reduce";
  }
}

TEST(ProfilingCli, PipelineActionsAreRanges) {
  ScratchDir dir("profiling_pp");
  const auto r = titan::testing::run_command(
      titan::testing::bin_path("titan") + " train --nproc 2 --job.config_file " +
      titan::testing::source_path("train_configs/debug_model.toml") + " --job.dump_folder " + dir.path() +
      " --training.device cpu --training.seq_len 16 --training.batch_size 2 --training.steps 2"
      " --experimental.pipeline_parallel_degree 2 --profiling.enable_profiling --profiling.profile_freq 2"
      " --profiling.profiler_warmup 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The last stage (rank 1) runs forward and backward of both micro-batches
  // and exchanges activations and gradients with rank 0.
  const std::vector<Event> events = read_trace(dir.path() + "/profile_trace/iteration_2/rank1_trace.json");
  for (const char* name : {"pp::1F0", "pp::1F1", "pp::1B0", "pp::1B1", "c10d::batch_p2p pp"})
    EXPECT_NE(find(events, name), nullptr) << name;
}

}  // namespace
