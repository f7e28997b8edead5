// Pipeline schedules on paper: every schedule titan generates, for 1, 2, 3,
// 4 and 8 ranks, 1 to 4 stages per rank and several micro-batch counts, runs
// every (stage, micro-batch) once forward and once backward, on the stage's
// rank, without deadlock, also where sends wait for their receive as large
// NCCL sends do (simulate() checks all of it); the closed-form bubbles equal the
// simulated ones exactly; 1F1B holds at most pp − r micro-batches on rank r
// where GPipe holds all m; a broken order is caught; layer splits follow
// torchtitan's rules (checked against its own function); names parse in any case; bad shapes are refused; a
// step's batch is cut into micro-batches alike for every tensor.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "titan/config/job_config.hpp"
#include "titan/config/load.hpp"
#include "titan/models/llama3/pipeline.hpp"
#include "titan/parallel/pipeline/microbatch.hpp"
#include "titan/parallel/pipeline/schedule.hpp"
#include "titan/parallel/pipeline/schedule_csv.hpp"
#include "titan/parallel/pipeline/simulate.hpp"
#include "titan/parallel/pipeline/split.hpp"
#include "titan/parallel/pipeline/stage.hpp"
#include "titan/util/error.hpp"
#include "support/error_of.hpp"
#include "support/run_command.hpp"
#include "models/test_util.hpp"

namespace {

using namespace titan::pp;

using titan::testing::error_of;

const ScheduleKind kAll[] = {ScheduleKind::GPipe,     ScheduleKind::OneFOneB,
                             ScheduleKind::Interleaved1F1B, ScheduleKind::LoopedBFS,
                             ScheduleKind::InterleavedZeroBubble, ScheduleKind::ZBVZeroBubble};

TEST(PipelineSchedules, EveryScheduleIsCompleteAndDeadlockFree) {
  int checked = 0;
  for (ScheduleKind kind : kAll)
    for (int p : {1, 2, 3, 4, 8})
      for (int v : {1, 2, 3, 4})
      for (int m : {1, 2, 3, 4, 6, 8, 12, 16, 32}) {
        if ((v == 1) == is_multi_stage(kind) || (kind == ScheduleKind::ZBVZeroBubble && v != 2)) continue;
        ScheduleSpec spec{kind, p, v, m};
        if (!error_of([&] { spec.validate(); }).empty()) continue;  // shapes it refuses: tested below
        SCOPED_TRACE(spec.describe());
        std::vector<RankActions> actions;
        ASSERT_NO_THROW(actions = build_schedule(spec));
        ASSERT_NO_THROW(simulate(spec, actions));
        // Communication pairs up: every SEND has its RECV on the other side.
        int sends = 0, recvs = 0;
        for (const auto& r : actions)
          for (const Action& a : r) {
            sends += a.type == ActionType::SendForward || a.type == ActionType::SendBackward;
            recvs += a.type == ActionType::RecvForward || a.type == ActionType::RecvBackward;
          }
        EXPECT_EQ(sends, recvs);
        ++checked;
      }
  std::printf("[measured] %d schedule shapes simulated complete and deadlock-free\n", checked);
  EXPECT_GT(checked, 300);
}

TEST(PipelineSchedules, ClosedFormBubblesMatchTheSimulation) {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved1F1B,
                            ScheduleKind::LoopedBFS})
    for (int p : {2, 4})
      for (int m : {4, 8, 16}) {
        ScheduleSpec spec{kind, p, is_multi_stage(kind) ? 2 : 1, m};
        SimulatedRun run = simulate(spec, compute_actions(spec));
        const double analytic = analytic_bubble_fraction(spec);
        // The first rank's idle time is exactly the formula's (the others
        // idle the same, spread differently).
        for (double b : run.bubble) EXPECT_NEAR(b, analytic, 1e-12) << spec.describe();
      }
  ScheduleSpec gpipe{ScheduleKind::GPipe, 4, 1, 4};
  EXPECT_NEAR(analytic_bubble_fraction(gpipe), 3.0 / 7.0, 1e-15);  // (p−1)/(m+p−1)
  ScheduleSpec inter{ScheduleKind::Interleaved1F1B, 4, 2, 4};
  EXPECT_NEAR(analytic_bubble_fraction(inter), 3.0 / 11.0, 1e-15);  // (p−1)/(v·m+p−1)
}

TEST(PipelineSchedules, ZeroBubbleSchedulesIdleLessThan1F1B) {
  for (int p : {2, 4})
    for (int m : {4, 8, 16}) {
      ScheduleSpec one{ScheduleKind::OneFOneB, p, 1, m};
      ScheduleSpec zb{ScheduleKind::InterleavedZeroBubble, p, 2, m};
      ScheduleSpec zbv{ScheduleKind::ZBVZeroBubble, p, 2, m};
      // Same total work per rank: B = I + W, and two half-size stages.
      ActionCosts half{0.5, 1.0, 0.5, 0.5};
      const double b1 = simulate(one, compute_actions(one)).mean_bubble();
      const double bz = simulate(zb, compute_actions(zb), half).mean_bubble();
      const double bv = simulate(zbv, compute_actions(zbv), half).mean_bubble();
      std::printf("[measured] p=%d m=%2d simulated bubble: 1F1B %.3f  InterleavedZeroBubble %.3f  ZBVZeroBubble %.3f\n",
                  p, m, b1, bz, bv);
      EXPECT_LT(bz, b1);
      EXPECT_LT(bv, b1);
    }
}

TEST(PipelineSchedules, OneFOneBHoldsAtMostPpMinusRankMicroBatches) {
  const int p = 4, m = 8;
  ScheduleSpec one{ScheduleKind::OneFOneB, p, 1, m}, gpipe{ScheduleKind::GPipe, p, 1, m};
  SimulatedRun a = simulate(one, compute_actions(one)), b = simulate(gpipe, compute_actions(gpipe));
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(a.peak_in_flight[r], p - r);
    EXPECT_EQ(b.peak_in_flight[r], m);
  }
}

TEST(PipelineSchedules, TheSeedsGPipeOrder) {
  // GPU 0: [M0F][M1F][M2F][M3F] ... [M3B][M2B][M1B][M0B]
  ScheduleSpec spec{ScheduleKind::GPipe, 4, 1, 4};
  auto a = compute_actions(spec);
  EXPECT_EQ(format_schedule(a).substr(0, format_schedule(a).find('\n')), "rank 0: 0F0 0F1 0F2 0F3 0B3 0B2 0B1 0B0");
  ScheduleSpec one{ScheduleKind::OneFOneB, 4, 1, 4};
  auto b = compute_actions(one);
  EXPECT_EQ(b[3].front().str(), "3F0");
  EXPECT_EQ(b[3][1].str(), "3B0");  // the last rank alternates at once
  EXPECT_EQ(b[0][3].str(), "0F3");  // rank 0 warms up with 3 forwards, then 0F3 0B0
  EXPECT_EQ(b[0][4].str(), "0B0");
}

TEST(PipelineSchedules, ABrokenOrderIsCaught) {
  ScheduleSpec spec{ScheduleKind::OneFOneB, 2, 1, 2};
  auto a = compute_actions(spec);
  // Rank 1 backward before its forward: deadlock.
  std::swap(a[1][0], a[1][1]);
  EXPECT_NE(error_of([&] { simulate(spec, a); }).find("deadlocks"), std::string::npos);
  a = compute_actions(spec);
  a[0].pop_back();  // a missing backward
  EXPECT_NE(error_of([&] { simulate(spec, a); }).find("must be one B"), std::string::npos);
  a = compute_actions(spec);
  a[0][0].stage = 1;  // stage 1 lives on rank 1
  EXPECT_NE(error_of([&] { simulate(spec, a); }).find("runs on rank 1"), std::string::npos);
}

// torchtitan's pipeline_parallel_schedule_csv reads torch's "compute_only"
// CSV: a row of actions per rank in torch's spelling, an empty cell an idle
// step. Every schedule titan generates, written out and read back, is the
// same list; torch's spellings (spaces, quotes, idle cells, a trailing
// newline, Windows line ends) read; each mistake is one line naming the
// file, row and cell, and what simulate() catches (a missing backward, a
// deadlock) is caught before a job would start.
TEST(PipelineScheduleCsv, ReadsWhatItWritesAndTorchsSpelling) {
  const std::string dir = titan::testing::scratch_dir("pp_csv");
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  int compared = 0;
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved1F1B,
                            ScheduleKind::LoopedBFS, ScheduleKind::InterleavedZeroBubble, ScheduleKind::ZBVZeroBubble})
    for (int pp : {2, 4}) {
      ScheduleSpec spec{kind, pp, is_multi_stage(kind) ? 2 : 1, 2 * pp};
      const auto own = compute_actions(spec);
      EXPECT_EQ(read_schedule_csv(write("own.csv", schedule_csv(own)), spec), own) << spec.describe();
      ++compared;
    }
  std::printf("%d schedules written as CSV and read back unchanged\n", compared);
  EXPECT_EQ(parse_action(" 12SEND_B3 ").str(), "12SEND_B3");

  const ScheduleSpec spec{ScheduleKind::OneFOneB, 2, 1, 2};
  const auto gpipe_order = read_schedule_csv(write("torch.csv", "0F0, \"0F1\",,0B0,0B1\r\n,1F0,1B0,1F1,1B1\n\n"), spec);
  ASSERT_EQ(gpipe_order.size(), 2u);
  EXPECT_EQ(schedule_csv(gpipe_order), "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
  EXPECT_NO_THROW(simulate(spec, gpipe_order));

  const std::map<std::string, std::string> mistakes = {
      {"0F0,0B0,0F1,0B1\n1F0,1B0,1X1,1B1\n", "row 2 (rank 1) cell 3: '1X1' is not an action"},
      {"0F0,0B0,0F1,0B1\n1F0,1B0,1F,1B1\n", "row 2 (rank 1) cell 3: '1F' is not an action"},
      {"0F0,0SEND_F0,0B0,0F1,0B1\n1F0,1B0,1F1,1B1\n", "cell 2: '0SEND_F0' is a send or receive"},
      {"0UNSHARD,0F0,0B0,0F1,0B1\n1F0,1B0,1F1,1B1\n", "cell 1: '0UNSHARD' is torch's FSDP action UNSHARD"},
      {"0F0,0B0,1F1,0B1\n1F0,1B0,1F1,1B1\n", "row 1 (rank 0) cell 3: '1F1' is stage 1's, which runs on rank 1"},
      {"0F0,0B0,0F2,0B1\n1F0,1B0,1F1,1B1\n", "'0F2' names micro-batch 2 of a step of 2"},
      {"0F0,0B0,0F1,0B1\n1F0,1B0,1F1,1B1\n1F0\n", "row 3: the pipeline has 2 ranks"},
      {"0F0,0B0,0F1,0B1\n", ": 1 row(s) for a pipeline of 2 ranks"},
  };
  for (const auto& [text, expected] : mistakes) {
    const std::string path = write("bad.csv", text);
    const std::string e = error_of([&] { read_schedule_csv(path, spec); });
    EXPECT_NE(e.find("pipeline schedule " + path), std::string::npos) << e;
    EXPECT_NE(e.find(expected), std::string::npos) << text << " -> " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  EXPECT_NE(error_of([&] { read_schedule_csv(dir + "/absent.csv", spec); }).find("cannot open"), std::string::npos);

  // Through the job's plan: read and simulated before anything runs.
  titan::config::JobConfig cfg;
  cfg.experimental.pipeline_parallel_degree = 2;
  cfg.experimental.pipeline_parallel_schedule_csv = write("missing_b.csv", "0F0,0F1,0B0\n1F0,1B0,1F1,1B1\n");
  const std::string e = error_of([&] { titan::models::llama3::plan_pipeline(cfg, 2, 2); });
  EXPECT_NE(e.find("[parallelism] pipeline_parallel_schedule_csv: "), std::string::npos) << e;
  EXPECT_NE(e.find("must be one B"), std::string::npos) << e;
  cfg.experimental.pipeline_parallel_schedule_csv = write("deadlock.csv", "0F0,0B0,0F1,0B1\n1B0,1F0,1F1,1B1\n");
  EXPECT_NE(error_of([&] { titan::models::llama3::plan_pipeline(cfg, 2, 2); }).find("deadlocks"), std::string::npos);
  cfg.experimental.pipeline_parallel_schedule_csv = write("gpipe.csv", schedule_csv(gpipe_order));
  const auto plan = titan::models::llama3::plan_pipeline(cfg, 2, 2);
  EXPECT_EQ(plan.compute_actions, gpipe_order);
  EXPECT_NE(plan.describe().find("order from " + dir + "/gpipe.csv"), std::string::npos) << plan.describe();
  titan::testing::remove_scratch_dir(dir);
}

// NCCL pairs two ranks' point-to-point messages in the order each posts
// them, not by tag (Gloo matches tags). A rank that consumes a peer's
// messages in another order than the peer sends them must receive them in
// the sender's order, ahead of need; add_communication does, and simulate()
// asserts it for every list (EveryScheduleIsCompleteAndDeadlockFree covers
// the zero-bubble lists, where rank 0 of InterleavedZeroBubble at 4 ranks x
// 2 stages x 16 micro-batches runs 0F12 before 4F11 while rank 1 runs 5F11
// before 1F12).
TEST(PipelineSchedules, ReceivesFollowTheSendersOrder) {
  ScheduleSpec gpipe{ScheduleKind::GPipe, 2, 1, 2};
  auto a = compute_actions(gpipe);
  ASSERT_EQ(format_schedule(a), "rank 0: 0F0 0F1 0B1 0B0\nrank 1: 1F0 1F1 1B1 1B0\n");
  // Rank 1 runs its forwards 1, 0: it receives micro-batch 0's activation
  // first all the same, as rank 0 sends it first.
  std::swap(a[1][0], a[1][1]);
  ASSERT_NO_THROW(simulate(gpipe, a));
  const std::string with_comm = format_schedule(add_communication(gpipe, a), /*compute_only=*/false);
  std::printf("%s", with_comm.c_str());
  EXPECT_NE(with_comm.find("rank 1: 1RECV_F0 1RECV_F1 1F1 1F0 1B1 1SEND_B1 1B0 1SEND_B0"), std::string::npos)
      << with_comm;
  // Where the orders agree and the ranks keep pace, each receive lands right
  // before its use.
  EXPECT_NE(format_schedule(build_schedule(gpipe), false).find("rank 1: 1RECV_F0 1F0 1RECV_F1 1F1"),
            std::string::npos);
}

// NCCL runs a rank's point-to-point batches in order on one stream, and a
// send larger than its buffers waits for the peer's receive. Receiving each
// message just before its use (as titan did, and as Gloo's buffered sends
// allow) makes Interleaved1F1B's ranks wait for each other there: rank 1's
// batch holds a gradient for rank 0, whose receive rank 0 posts only after
// sending a gradient that rank 1 receives only after that batch.
// add_communication places every receive where its message arrives when the
// lists are played, so each send and its receive sit at one moment of one
// global order; blocking_send_deadlock plays both placements.
TEST(PipelineSchedules, ReceivesWhereTheMessageArrivesKeepBlockingSendsMoving) {
  const ScheduleSpec spec{ScheduleKind::Interleaved1F1B, 2, 2, 4};
  const std::vector<RankActions> compute = compute_actions(spec);
  // Each receive just before its use, in the sender's order (the old placement).
  std::vector<RankActions> just_before_use(compute.size());
  std::map<std::pair<int, int>, std::vector<Action>> outbox;  // (from, to) -> messages in order
  auto message_of = [&](const Action& a) {  // what a compute action sends, as the receive
    const bool fwd = a.type == ActionType::Forward;
    const int to_stage = fwd ? a.stage + 1 : a.stage - 1;
    if (to_stage < 0 || to_stage >= spec.num_stages() || a.type == ActionType::BackwardWeight) return Action{};
    return Action{fwd ? ActionType::RecvForward : ActionType::RecvBackward, to_stage, a.microbatch};
  };
  for (int r = 0; r < spec.pp; ++r)
    for (const Action& a : compute[static_cast<size_t>(r)]) {
      const Action m = message_of(a);
      if (m.type != ActionType::Forward) outbox[{r, spec.rank_of_stage(m.stage)}].push_back(m);
    }
  for (int r = 0; r < spec.pp; ++r) {
    std::map<int, size_t> taken;  // peer -> its messages received so far
    for (const Action& a : compute[static_cast<size_t>(r)]) {
      const bool fwd = a.type == ActionType::Forward;
      const int from_stage = fwd ? a.stage - 1 : a.stage + 1;
      if (from_stage >= 0 && from_stage < spec.num_stages()) {
        const int from = spec.rank_of_stage(from_stage);
        const std::vector<Action>& in = outbox[{from, r}];
        const Action need{fwd ? ActionType::RecvForward : ActionType::RecvBackward, a.stage, a.microbatch};
        const size_t at = static_cast<size_t>(std::find(in.begin(), in.end(), need) - in.begin());
        ASSERT_LT(at, in.size());
        for (size_t& k = taken[from]; k <= at; ++k) just_before_use[static_cast<size_t>(r)].push_back(in[k]);
      }
      just_before_use[static_cast<size_t>(r)].push_back(a);
      const Action m = message_of(a);
      if (m.type != ActionType::Forward)
        just_before_use[static_cast<size_t>(r)].push_back(
            {m.type == ActionType::RecvForward ? ActionType::SendForward : ActionType::SendBackward, a.stage,
             a.microbatch});
    }
  }
  const std::string old_way = blocking_send_deadlock(spec, just_before_use, /*forward_only=*/false);
  std::printf("[measured] receiving just before use, %s: %s\n", spec.describe().c_str(), old_way.c_str());
  EXPECT_NE(old_way.find("rank 0 in ["), std::string::npos);
  EXPECT_NE(blocking_send_deadlock(spec, just_before_use, /*forward_only=*/true), "");
  const std::vector<RankActions> placed = build_schedule(spec);
  EXPECT_EQ(blocking_send_deadlock(spec, placed, /*forward_only=*/false), "");
  EXPECT_EQ(blocking_send_deadlock(spec, placed, /*forward_only=*/true), "");
  std::printf("%s", format_schedule(placed, /*compute_only=*/false).c_str());
}

TEST(PipelineSchedules, NamesAndShapes) {
  EXPECT_EQ(parse_schedule_kind("1f1b"), ScheduleKind::OneFOneB);
  EXPECT_EQ(parse_schedule_kind("gpipe"), ScheduleKind::GPipe);
  EXPECT_EQ(parse_schedule_kind("INTERLEAVED1F1B"), ScheduleKind::Interleaved1F1B);
  EXPECT_EQ(parse_schedule_kind("zbvzerobubble"), ScheduleKind::ZBVZeroBubble);
  EXPECT_NE(error_of([] { parse_schedule_kind("2F2B"); }).find("GPipe, 1F1B, Interleaved1F1B"), std::string::npos);
  EXPECT_NE(error_of([] { ScheduleSpec{ScheduleKind::OneFOneB, 4, 1, 2}.validate(); }).find("at least as many micro-batches (2) as pipeline ranks (4)"),
            std::string::npos);
  EXPECT_NE(error_of([] { ScheduleSpec{ScheduleKind::Interleaved1F1B, 4, 2, 6}.validate(); }).find("rounds"), std::string::npos);
  EXPECT_NE(error_of([] { ScheduleSpec{ScheduleKind::OneFOneB, 2, 2, 4}.validate(); }).find("one stage per rank"), std::string::npos);
  EXPECT_NE(error_of([] { ScheduleSpec{ScheduleKind::ZBVZeroBubble, 2, 3, 4}.validate(); }).find("exactly 2"), std::string::npos);
  EXPECT_NO_THROW((ScheduleSpec{ScheduleKind::GPipe, 4, 1, 1}.validate()));  // the naive pipeline
  // Placement: loop vs V.
  ScheduleSpec loop{ScheduleKind::Interleaved1F1B, 4, 2, 4}, vee{ScheduleKind::ZBVZeroBubble, 4, 2, 4};
  EXPECT_EQ(loop.stages_of_rank(0), (std::vector<int>{0, 4}));
  EXPECT_EQ(vee.stages_of_rank(0), (std::vector<int>{0, 7}));
  EXPECT_EQ(vee.stages_of_rank(3), (std::vector<int>{3, 4}));
}

TEST(PipelineSplit, TorchtitansWeightedSplitPerStageAndSplitPoints) {
  EXPECT_EQ(describe_split(split_layers(8, 4)), "0-1 | 2-3 | 4-5 | 6-7");
  EXPECT_EQ(describe_split(split_layers(7, 2)), "0-3 | 4-6");          // the first takes the extra
  EXPECT_EQ(describe_split(split_layers(7, 4)), "0-1 | 2-3 | 4-5 | 6");
  EXPECT_EQ(describe_split(split_layers(5, 1, 1, 1)), "0-4");          // one stage holds everything
  // The ends' weights: 32 layers + 1 + 1 over 4 stages of 8.5 (Llama 3 8B
  // on pp 4 with torchtitan's defaults): 9 9 8 8, less 1 at each end.
  EXPECT_EQ(describe_split(split_layers(32, 4, 1, 1)), "0-7 | 8-16 | 17-24 | 25-31");
  EXPECT_EQ(describe_split(split_layers(6, 4, 1, 1)), "0 | 1-2 | 3-4 | 5");
  EXPECT_NE(error_of([] { split_layers(2, 4); }).find("4 stages but only 2 layers to spread"), std::string::npos);
  EXPECT_NE(error_of([] { split_layers(4, 3, 3, 0); }).find("first_stage_less_layers 3 exceeds the layers per stage (2"),
            std::string::npos);
  // An end stage may hold no layer: only the embeddings, or the head.
  EXPECT_EQ(describe_split(split_layers(6, 8, 1, 1)), "none | 0 | 1 | 2 | 3 | 4 | 5 | none");
  EXPECT_NE(error_of([] { split_layers(6, 2, -1, 0); }).find(">= 0"), std::string::npos);
  EXPECT_EQ(stages_for_layers_per_stage(32, 4, 1, 1), 9);  // ceil(34 / 4)
  EXPECT_EQ(stages_for_layers_per_stage(8, 2), 4);
  EXPECT_NE(error_of([] { stages_for_layers_per_stage(8, 0); }).find("must be >= 1"), std::string::npos);
  EXPECT_EQ(describe_split(split_layers_at(8, {"layers.3", "5"})), "0-2 | 3-4 | 5-7");
  EXPECT_NE(error_of([] { split_layers_at(8, {"layers.5", "layers.3"}); }).find("strictly increasing"), std::string::npos);
  // The classic interleaved picture: 40 layers, 4 ranks x 2 stages of 5;
  // rank 0 holds layers 0-4 and 20-24.
  auto plan = titan::models::llama3::plan_pipeline(40, ScheduleKind::Interleaved1F1B, 4, 8, 5);
  EXPECT_EQ(plan.spec.stages_per_rank, 2);
  const auto mine = plan.spec.stages_of_rank(0);
  EXPECT_EQ(plan.layers[mine[0]].begin, 0);
  EXPECT_EQ(plan.layers[mine[0]].end, 5);
  EXPECT_EQ(plan.layers[mine[1]].begin, 20);
  EXPECT_EQ(plan.layers[mine[1]].end, 25);
  EXPECT_NE(error_of([] { titan::models::llama3::plan_pipeline(40, ScheduleKind::OneFOneB, 4, 8, 5); })
                .find("one stage per rank, got 2"),
            std::string::npos);
}

// Against torchtitan's own split (generate_llm_fqn_per_model_part, run from
// the installed package by tests/reference/torchtitan_pp_split.py): every
// shape of 1-12, 16, 32 and 126 layers over 1-8 and 16 stages with the ends
// weighted 0, 1 or 2 gets the same layers per stage (end stages without a
// layer included), or an error where torchtitan raises.
TEST(PipelineSplit, SameAsTorchtitans) {
  if (titan::testing::ctest_python().empty()) GTEST_SKIP() << "TITAN_PYTHON is not set (run through ctest)";
  struct Shape {
    int64_t layers, stages, first, last;
  };
  std::vector<Shape> shapes;
  for (int64_t layers : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 16, 32, 126})
    for (int64_t stages : {1, 2, 3, 4, 5, 6, 7, 8, 16})
      for (int64_t first : {0, 1, 2})
        for (int64_t last : {0, 1, 2}) shapes.push_back({layers, stages, first, last});
  const std::string dir = titan::testing::scratch_dir("pp_split_crosscheck");
  {
    std::ofstream cases(dir + "/cases.txt");
    for (const Shape& c : shapes) cases << c.layers << " " << c.stages << " " << c.first << " " << c.last << "\n";
  }
  auto quoted = [](const std::string& x) { return "'" + x + "'"; };
  const auto r = titan::testing::run_command(quoted(titan::testing::python()) + " " +
                                             quoted(titan::testing::source_path("tests/reference/torchtitan_pp_split.py")) +
                                             " < " + quoted(dir + "/cases.txt") + " 2>&1");
  titan::testing::remove_scratch_dir(dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(r.output);
  int same = 0, both_refused = 0, empty_end = 0;
  for (const Shape& c : shapes) {
    std::string theirs;
    ASSERT_TRUE(std::getline(lines, theirs)) << "torchtitan's script printed fewer lines than shapes";
    std::string ours;
    const std::string error = error_of([&] {
      for (const auto& range : split_layers(c.layers, c.stages, c.first, c.last))
        ours += (ours.empty() ? "" : " ") + std::to_string(range.size());
    });
    const std::string shape = std::to_string(c.layers) + " layers, " + std::to_string(c.stages) + " stages, weights " +
                              std::to_string(c.first) + "/" + std::to_string(c.last);
    if (theirs.rfind("error: ", 0) == 0) {
      EXPECT_FALSE(error.empty()) << shape << ": torchtitan raises (" << theirs << "), titan splits " << ours;
      ++both_refused;
    } else {
      EXPECT_EQ(ours, theirs) << shape << (error.empty() ? "" : ": titan refuses: " + error);
      ++same;
      if (theirs.rfind("0 ", 0) == 0 || (theirs.size() > 2 && theirs.compare(theirs.size() - 2, 2, " 0") == 0)) ++empty_end;
    }
  }
  std::printf("%zu shapes: %d split alike (%d with an end stage holding no layer), %d refused by both\n",
              shapes.size(), same, empty_end, both_refused);
  EXPECT_GT(same, 700);
}

// torchtitan's module_fqns_per_model_part, as torchtitan itself would fill
// it: for every shape torchtitan splits above, its lists of module names
// (the reference script's --names, read through titan's command line)
// give titan's stages the same layers as its own weighted split.
TEST(PipelineSplit, TorchtitansModuleNamesGiveTheSameStages) {
  if (titan::testing::ctest_python().empty()) GTEST_SKIP() << "TITAN_PYTHON is not set (run through ctest)";
  std::vector<std::array<int64_t, 4>> shapes;
  for (int64_t layers : {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 32})
    for (int64_t stages : {1, 2, 3, 4, 8})
      for (int64_t first : {0, 1, 2})
        for (int64_t last : {0, 1, 2}) shapes.push_back({layers, stages, first, last});
  const std::string dir = titan::testing::scratch_dir("pp_names_crosscheck");
  {
    std::ofstream cases(dir + "/cases.txt");
    for (const auto& c : shapes) cases << c[0] << " " << c[1] << " " << c[2] << " " << c[3] << "\n";
  }
  auto quoted = [](const std::string& x) { return "'" + x + "'"; };
  const auto r = titan::testing::run_command(
      quoted(titan::testing::python()) + " " +
      quoted(titan::testing::source_path("tests/reference/torchtitan_pp_split.py")) + " --names < " +
      quoted(dir + "/cases.txt") + " 2>&1");
  titan::testing::remove_scratch_dir(dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(r.output);
  int compared = 0;
  for (const auto& c : shapes) {
    std::string theirs;
    ASSERT_TRUE(std::getline(lines, theirs)) << "torchtitan's script printed fewer lines than shapes";
    if (theirs.rfind("error: ", 0) == 0) continue;
    const std::string shape = std::to_string(c[0]) + " layers, " + std::to_string(c[1]) + " stages, weights " +
                              std::to_string(c[2]) + "/" + std::to_string(c[3]) + ": " + theirs;
    const titan::config::JobConfig cfg =
        titan::config::parse_job_config({"--parallelism.module_fqns_per_model_part", theirs});
    std::string named, split;
    const std::string error = error_of([&] {
      named = describe_split(titan::models::llama3::layers_of_model_parts(
          cfg.experimental.module_fqns_per_model_part, c[0]));
    });
    EXPECT_TRUE(error.empty()) << shape << ": " << error;
    EXPECT_EQ(named, describe_split(split_layers(c[0], c[1], c[2], c[3]))) << shape;
    ++compared;
  }
  std::printf("%d of torchtitan's module lists read as the same stages\n", compared);
  EXPECT_GT(compared, 300);
}

// Stages named by hand: uneven, an embeddings-only first stage, the layer
// order inside a list free; each mistake is one line naming the key.
TEST(PipelineSplit, HandPlacedStagesAndTheirMistakes) {
  using titan::models::llama3::layers_of_model_parts;
  EXPECT_EQ(describe_split(layers_of_model_parts({{"tok_embeddings"}, {"layers.1", "layers.0"},
                                                  {"layers.2", "layers.3", "norm", "output"}}, 4)),
            "none | 0-1 | 2-3");
  EXPECT_EQ(describe_split(layers_of_model_parts({{"tok_embeddings", "layers.0", "layers.1", "norm", "output"}}, 2)),
            "0-1");
  const std::map<std::string, titan::config::StringLists> mistakes = {
      {"'layers.1' is named by stage 0 and stage 1",
       {{"tok_embeddings", "layers.0", "layers.1"}, {"layers.1", "norm", "output"}}},
      {"stage 1 holds layers.2 where layers.1 comes next",
       {{"tok_embeddings", "layers.0"}, {"layers.2"}, {"layers.1", "norm", "output"}}},
      {"no stage holds layers.2 (the model has 3 layers)",
       {{"tok_embeddings", "layers.0"}, {"layers.1", "norm", "output"}}},
      {"'layers.3' is not a layer of the model (layers.0 .. layers.2)",
       {{"tok_embeddings", "layers.0", "layers.1"}, {"layers.2", "layers.3", "norm", "output"}}},
      {"'blocks.0' is not a module of the model",
       {{"tok_embeddings", "blocks.0"}, {"layers.0", "layers.1", "layers.2", "norm", "output"}}},
      {"'norm' is in stage 0 of 0..1; titan's last stage holds the norm and the output",
       {{"tok_embeddings", "layers.0", "norm"}, {"layers.1", "layers.2", "output"}}},
      {"'tok_embeddings' is in stage 1", {{"layers.0"}, {"tok_embeddings", "layers.1", "layers.2", "norm", "output"}}},
      {"no stage holds 'output'", {{"tok_embeddings", "layers.0"}, {"layers.1", "layers.2", "norm"}}},
      {"stage 1 names no module", {{"tok_embeddings", "layers.0"}, {}, {"layers.1", "layers.2", "norm", "output"}}},
  };
  for (const auto& [expected, parts] : mistakes) {
    const std::string e = error_of([&] { layers_of_model_parts(parts, 3); });
    EXPECT_NE(e.find("[parallelism] module_fqns_per_model_part: " + expected), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  // Through the job's plan: the stages must spread over the pp ranks as the
  // schedule needs, and only one way of cutting may be asked for.
  titan::config::JobConfig cfg;
  cfg.experimental.pipeline_parallel_degree = 2;
  cfg.experimental.pipeline_parallel_schedule = "Interleaved1F1B";
  cfg.experimental.module_fqns_per_model_part = {
      {"tok_embeddings"}, {"layers.0", "layers.1"}, {"layers.2"}, {"layers.3", "norm", "output"}};
  const auto plan = titan::models::llama3::plan_pipeline(cfg, 4, 4);
  EXPECT_EQ(plan.spec.stages_per_rank, 2);
  EXPECT_EQ(plan.describe().substr(plan.describe().find("layers")), "layers none | 0-1 | 2 | 3");
  cfg.experimental.pipeline_parallel_schedule = "1F1B";
  EXPECT_NE(error_of([&] { titan::models::llama3::plan_pipeline(cfg, 4, 4); }).find("one stage per rank, got 2"),
            std::string::npos);
  cfg.experimental.module_fqns_per_model_part.pop_back();
  cfg.experimental.module_fqns_per_model_part.back().insert(cfg.experimental.module_fqns_per_model_part.back().end(),
                                                            {"layers.3", "norm", "output"});
  EXPECT_NE(error_of([&] { titan::models::llama3::plan_pipeline(cfg, 4, 4); })
                .find("names 3 stages, which do not divide over pipeline_parallel_degree 2"),
            std::string::npos);
  cfg.experimental.pipeline_parallel_layers_per_stage = 2;
  EXPECT_NE(error_of([&] { titan::models::llama3::plan_pipeline(cfg, 4, 4); }).find("set one of them"),
            std::string::npos);
}

}  // namespace

// One cut for a step's tokens, labels and document starts: micro-batch i
// holds rows [i·B/m, (i+1)·B/m) of each, an absent tensor stays absent,
// and a batch that does not divide, or tensors of different batch sizes,
// are one line.
TEST(PipelineMicroBatches, SplitKeepsTheRowsOfEveryTensorTogether) {
  const at::Tensor rows = at::arange(6, at::kLong).view({6, 1}).expand({6, 4}).contiguous();
  const BatchInputs batch{rows, rows + 100, rows * 4};
  const std::vector<BatchInputs> micro = split_microbatches(batch, 3);
  ASSERT_EQ(micro.size(), 3u);
  for (int64_t i = 0; i < 3; ++i) {
    const BatchInputs& mb = micro[static_cast<size_t>(i)];
    EXPECT_TRUE(at::equal(mb.inputs, rows.narrow(0, 2 * i, 2)));
    EXPECT_TRUE(at::equal(mb.labels, mb.inputs + 100));
    EXPECT_TRUE(at::equal(mb.doc_start, mb.inputs * 4));
  }
  for (const BatchInputs& mb : split_microbatches({rows, rows, {}}, 2)) EXPECT_FALSE(mb.doc_start.defined());
  EXPECT_NE(error_of([&] { split_microbatches(batch, 4); }).find("a batch of 6 sequences does not split into 4"),
            std::string::npos);
  EXPECT_NE(error_of([&] { split_microbatches({rows, rows, rows.narrow(0, 0, 3)}, 3); })
                .find("the batch's doc_start hold 3 sequences but its inputs 6"),
            std::string::npos);
}

// The last stage says which loss it takes (a sum for the trainer, a mean
// for a pipeline alone): without one it is refused at construction, in one
// line; the stages before it need none.
TEST(PipelineStage, TheLastStageNeedsItsLoss) {
  StageOptions o;
  o.forward = [](const at::Tensor& x, const BatchInputs&) { return x; };
  o.num_stages = 2;
  o.stage_index = 0;
  EXPECT_EQ(error_of([&] { PipelineStage first(o); }), "");
  o.stage_index = 1;
  const std::string e = error_of([&] { PipelineStage last(o); });
  EXPECT_NE(e.find("pipeline stage 1 is the last of 2 and has no loss_fn"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  o.loss_fn = [](const at::Tensor& logits, const at::Tensor&) { return logits.sum(); };
  EXPECT_EQ(error_of([&] { PipelineStage last(o); }), "");
}
