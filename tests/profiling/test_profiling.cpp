// Profiling traces: the schedule's arithmetic, and the trace files of a
// real run parsed back: the recorded step's ranges (data loading, forward,
// backward, clipping, optimizer) nested inside it with positive durations,
// ATen's ops inside forward and backward, nothing from the unrecorded
// steps; on 2 ranks one file per rank with FSDP's and c10d's ranges.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <set>

#include "../train/train_test_util.hpp"
#include "support/run_command.hpp"
#include "titan/data/files.hpp"
#include "titan/profiling/trace_profiler.hpp"
#include "titan/train/trainer.hpp"

namespace {

using titan::profiling::ProfileSchedule;
using titan::testing::ScratchDir;

struct Event {
  std::string name;
  double ts = 0, dur = 0;
};

std::vector<Event> read_trace(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "no trace " << path;
  const nlohmann::json trace = nlohmann::json::parse(in);
  std::vector<Event> out;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.value("ph", "") != "X") continue;  // complete events: name, ts, dur
    out.push_back({e.value("name", ""), e.value("ts", 0.0), e.value("dur", 0.0)});
  }
  return out;
}

const Event* find(const std::vector<Event>& events, const std::string& name) {
  for (const auto& e : events)
    if (e.name == name) return &e;
  return nullptr;
}

bool inside(const Event& inner, const Event& outer) {
  return inner.ts >= outer.ts && inner.ts + inner.dur <= outer.ts + outer.dur;
}

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
    if ((e.name == "aten::mm" || e.name == "aten::matmul" || e.name == "aten::linear") && inside(e, fwd)) ++mm_in_forward;
  EXPECT_GE(mm_in_forward, 2 * 7) << "two blocks of 7 projections";
  std::printf("trace %s: %zu events; step %.0f us, forward %.0f us, %d matmuls in forward\n", path.c_str(),
              events.size(), step->dur, fwd.dur, mm_in_forward);
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

}  // namespace
