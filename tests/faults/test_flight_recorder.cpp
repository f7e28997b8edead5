// The flight recorder: the ring buffer and its dump (in process), the
// analysis of dumps written by hand (each kind of disagreement), and whole
// jobs that go wrong on purpose (fault_program over `titan run`), whose
// dumps must name the rank and the collective.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include "support/run_command.hpp"
#include "titan/dist/flight_analysis.hpp"
#include "titan/dist/flight_recorder.hpp"
#include "titan/util/error.hpp"
#include "titan/util/range.hpp"

using titan::dist::CommOp;
using titan::dist::FlightAnalysis;
using titan::dist::FlightFinding;
using titan::dist::FlightRecorder;
using titan::testing::bin_path;
using titan::testing::run_command;

namespace {

std::string fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("titan_fr_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// A dump as another program would write it: only the documented fields.
struct Op {
  std::string group = "world";
  int64_t seq;
  std::string op = "all_reduce";
  std::vector<int64_t> sizes{1024};
  bool completed = true;
  std::string context;
  bool started = false;  ///< not completed: the rank waits in it ("started"), else only issued ("scheduled")
  std::string state() const { return completed ? "completed" : started ? "started" : "scheduled"; }
};

void write_dump(const std::string& dir, int rank, int world, const std::vector<Op>& ops) {
  std::ofstream out(dir + "/rank_" + std::to_string(rank) + ".json");
  out << R"({"version": 1, "rank": )" << rank << R"(, "world_size": )" << world << R"(, "groups": {"world": [)";
  for (int r = 0; r < world; ++r) out << (r ? ", " : "") << r;
  out << R"(]}, "entries": [)";
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& o = ops[i];
    out << (i ? ", " : "") << R"({"id": )" << i << R"(, "group": ")" << o.group << R"(", "seq": )" << o.seq
        << R"(, "p2p": false, "op": ")" << o.op << R"(", "input_sizes": [)";
    for (size_t k = 0; k < o.sizes.size(); ++k) out << (k ? ", " : "") << o.sizes[k];
    out << R"(], "dtype": "float32", "context": ")" << o.context << R"(", "step": 3, "state": ")"
        << o.state() << R"(", "scheduled_s": )" << i << "}";
  }
  out << "]}\n";
}

FlightAnalysis analyse(const std::string& dir) {
  auto a = titan::dist::analyse_flight_traces(titan::dist::load_flight_dumps(dir));
  std::printf("%s", titan::dist::format_flight_analysis(a).c_str());
  return a;
}

}  // namespace

// ---- the recorder ---------------------------------------------------------

TEST(FlightRecorder, KeepsTheLastEntriesNumberedPerGroupAndKind) {
  FlightRecorder& fr = FlightRecorder::instance();
  fr.configure(4);
  at::Tensor t = at::ones({2, 3});
  std::vector<int64_t> ids;
  {
    TITAN_PROFILE_RANGE("fsdp::all_gather layers.0");
    ids.push_back(fr.scheduled("dp", CommOp::AllGather, false, -1, t, at::ones({4, 3})));
  }
  ids.push_back(fr.scheduled("tp", CommOp::AllReduce, false, -1, t, {}));
  ids.push_back(fr.scheduled("dp", CommOp::ReduceScatter, false, -1, t, {}));
  ids.push_back(fr.scheduled("dp", CommOp::Send, true, 3, t, {}));
  ids.push_back(fr.scheduled("dp", CommOp::AllReduce, false, -1, t, {}));
  fr.completed(ids[1]);
  fr.completed(ids[0]);  // overwritten by ids[4]: a no-op
  auto e = fr.entries();
  ASSERT_EQ(e.size(), 4u) << "the ring keeps the last 4";
  EXPECT_EQ(e[0].group, "tp");
  EXPECT_EQ(e[0].seq, 1);
  EXPECT_TRUE(e[0].completed);
  EXPECT_EQ(e[1].seq, 2) << "dp's second collective";
  EXPECT_EQ(e[2].seq, 1) << "dp's first P2P op: P2P ops count apart";
  EXPECT_EQ(e[2].peer, 3);
  EXPECT_EQ(e[3].seq, 3) << "dp's third collective";
  EXPECT_FALSE(e[3].completed);
  EXPECT_EQ(e[3].input_sizes, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(e[3].dtype, "float32");
  EXPECT_EQ(e[3].context, "");
  fr.configure(0);
  EXPECT_EQ(fr.scheduled("dp", CommOp::AllReduce, false, -1, t, {}), -1) << "off records nothing";
}

// NCCL's wait returns once the stream waits, before the collective has
// run: such an entry stays "started" until its work says it is done. The
// recorder asks again whenever it records an op or is read, stops asking
// once the answer is yes, and forgets a probe whose entry the ring dropped.
TEST(FlightRecorder, AnEntryWhoseWaitReturnedEarlyCompletesWhenItsWorkSaysSo) {
  FlightRecorder& fr = FlightRecorder::instance();
  fr.configure(3);
  at::Tensor t = at::ones({4});
  bool finished = false;
  int asked = 0;
  const int64_t id = fr.scheduled("dp", CommOp::AllReduce, false, -1, t, {});
  fr.started(id);
  fr.completes_when(id, [&] {
    ++asked;
    return finished;
  });
  titan::dist::FlightEntry e;
  ASSERT_TRUE(fr.find(id, e));
  EXPECT_STREQ(e.state(), "started");
  (void)fr.scheduled("dp", CommOp::AllReduce, false, -1, t, {});
  ASSERT_TRUE(fr.find(id, e));
  EXPECT_STREQ(e.state(), "started") << "its work has not finished";
  const int asked_before = asked;
  EXPECT_GE(asked_before, 3) << "asked when recorded, at the next op and when read";
  finished = true;
  auto entries = fr.entries();
  ASSERT_EQ(entries.front().id, id);
  EXPECT_STREQ(entries.front().state(), "completed");
  EXPECT_GE(entries.front().completed_us, entries.front().started_us);
  (void)fr.scheduled("dp", CommOp::AllReduce, false, -1, t, {});
  EXPECT_EQ(asked, asked_before + 1) << "asked again after it said done";

  // A probe that never says yes (or throws) leaves its entry "started"
  // and is dropped with the entry once the ring of 3 moves past it.
  int asked_forever = 0;
  const int64_t stuck = fr.scheduled("dp", CommOp::AllGather, false, -1, t, {});
  fr.started(stuck);
  fr.completes_when(stuck, [&]() -> bool {
    ++asked_forever;
    throw std::runtime_error("CUDA error");
  });
  ASSERT_TRUE(fr.find(stuck, e));
  EXPECT_STREQ(e.state(), "started");
  for (int i = 0; i < 3; ++i) (void)fr.scheduled("dp", CommOp::AllReduce, false, -1, t, {});
  EXPECT_FALSE(fr.find(stuck, e)) << "the ring keeps 3";
  const int asked_at_drop = asked_forever;
  (void)fr.entries();
  (void)fr.scheduled("dp", CommOp::AllReduce, false, -1, t, {});
  EXPECT_EQ(asked_forever, asked_at_drop) << "a dropped entry's probe is still asked";

  // A group's ops complete in issue order (one communicator, one stream):
  // while its earlier op runs, a later one of that group is not asked;
  // another group's is.
  fr.configure(8);
  bool first_done = false;
  int asked_second = 0, asked_other = 0;
  const int64_t first = fr.scheduled("dp", CommOp::AllGather, false, -1, t, {});
  const int64_t second = fr.scheduled("dp", CommOp::ReduceScatter, false, -1, t, {});
  const int64_t other = fr.scheduled("tp", CommOp::AllReduce, false, -1, t, {});
  for (int64_t id_waited : {first, second, other}) fr.started(id_waited);
  fr.completes_when(first, [&] { return first_done; });
  fr.completes_when(second, [&] {
    ++asked_second;
    return true;
  });
  fr.completes_when(other, [&] {
    ++asked_other;
    return true;
  });
  ASSERT_TRUE(fr.find(second, e));
  EXPECT_STREQ(e.state(), "started") << "asked while dp's earlier op runs";
  EXPECT_EQ(asked_second, 0);
  ASSERT_TRUE(fr.find(other, e));
  EXPECT_STREQ(e.state(), "completed") << "tp's op waits for nothing of dp's";
  EXPECT_EQ(asked_other, 1);
  first_done = true;
  ASSERT_TRUE(fr.find(second, e));
  EXPECT_STREQ(e.state(), "completed");
  EXPECT_EQ(asked_second, 1);
  fr.configure(0);
}

TEST(FlightRecorder, ItsDumpReadsBackAndNamesTheCallersRange) {
  const std::string dir = fresh_dir("roundtrip");
  FlightRecorder& fr = FlightRecorder::instance();
  fr.configure(8);
  fr.register_group("world", {0, 1});
  fr.set_dump_target(dir, "rank_", 1, 2);
  int64_t id;
  {
    TITAN_PROFILE_RANGE("fsdp::all_gather layers.3");
    id = fr.scheduled("world", CommOp::AllGather, false, -1, at::ones({5}, at::kBFloat16), at::ones({10}));
  }
  const int64_t recv = fr.scheduled("world", CommOp::Recv, true, 0, at::ones({7}), {});
  fr.scheduled("world", CommOp::Barrier, false, -1, {}, {});
  fr.started(recv);
  fr.completed(id);
  const std::string path = fr.dump_to_target();
  ASSERT_EQ(path, dir + "/rank_1.json");
  auto d = titan::dist::load_flight_dump(path);
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.world_size, 2);
  EXPECT_EQ(d.groups.at("world"), (std::vector<int>{0, 1}));
  ASSERT_EQ(d.entries.size(), 3u);
  EXPECT_EQ(d.entries[0].op, CommOp::AllGather);
  EXPECT_EQ(d.entries[0].context, "fsdp::all_gather layers.3");
  EXPECT_EQ(d.entries[0].dtype, "bfloat16");
  EXPECT_EQ(d.entries[0].output_sizes, (std::vector<int64_t>{10}));
  EXPECT_TRUE(d.entries[0].completed);
  EXPECT_TRUE(d.entries[0].started) << "a completed op was started (its wait began)";
  EXPECT_TRUE(d.entries[1].p2p);
  EXPECT_EQ(d.entries[1].peer, 0);
  EXPECT_STREQ(d.entries[1].state(), "started") << "waited for, not returned";
  EXPECT_STREQ(d.entries[2].state(), "scheduled") << "issued, never waited for";
  fr.configure(0);
}

TEST(FlightRecorder, SigUsr1WritesTheBufferAndTheProcessGoesOn) {
  const std::string dir = fresh_dir("usr1");
  FlightRecorder& fr = FlightRecorder::instance();
  fr.configure(8);
  fr.set_dump_target(dir, "rank_", 0, 1);
  fr.scheduled("world", CommOp::Barrier, false, -1, {}, {});
  fr.install_signal_dumps();
  ASSERT_EQ(::raise(SIGUSR1), 0);
  const std::string path = dir + "/rank_0.json";
  for (int i = 0; i < 100 && !std::filesystem::exists(path); ++i) ::usleep(50000);
  ASSERT_TRUE(std::filesystem::exists(path)) << "no dump 5 s after SIGUSR1";
  EXPECT_EQ(titan::dist::load_flight_dump(path).entries.size(), 1u);
  fr.configure(0);
}

TEST(FlightRecorder, ABadDumpIsOneLine) {
  const std::string dir = fresh_dir("bad");
  std::ofstream(dir + "/rank_0.json") << "{\"rank\": 0}";
  try {
    titan::dist::load_flight_dumps(dir);
    FAIL() << "a file without entries was accepted";
  } catch (const titan::Error& e) {
    std::printf("%s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("is not a flight-recorder dump"), std::string::npos);
  }
  EXPECT_THROW(titan::dist::load_flight_dumps(fresh_dir("empty")), titan::Error);
}

// ---- the analysis, on dumps written by hand --------------------------------

TEST(FlightAnalysis, ARankThatNeverEnteredIsBehind) {
  const std::string dir = fresh_dir("never");
  for (int r : {0, 1, 3}) write_dump(dir, r, 4, {{.seq = 1}, {.seq = 2, .completed = false, .context = "titan::clip_grad_norm"}});
  write_dump(dir, 2, 4, {{.seq = 1}});
  auto a = analyse(dir);
  ASSERT_EQ(a.findings.size(), 1u);
  EXPECT_EQ(a.findings[0].kind, FlightFinding::Kind::NeverEntered);
  EXPECT_EQ(a.findings[0].seq, 2);
  EXPECT_NE(a.findings[0].text.find("never by rank 2"), std::string::npos) << a.findings[0].text;
  EXPECT_NE(a.findings[0].text.find("titan::clip_grad_norm"), std::string::npos);
  EXPECT_EQ(a.behind, (std::vector<int>{2}));
}

TEST(FlightAnalysis, ARankWithoutATraceIsBehindTheCollectiveTheOthersWaitIn) {
  const std::string dir = fresh_dir("absent");
  for (int r : {0, 1, 3}) write_dump(dir, r, 4, {{.seq = 1}, {.seq = 2}, {.seq = 3, .completed = false}});
  auto a = analyse(dir);
  EXPECT_EQ(a.ranks_without_traces, (std::vector<int>{2}));
  ASSERT_EQ(a.findings.size(), 1u);
  EXPECT_EQ(a.findings[0].kind, FlightFinding::Kind::NeverCompleted);
  EXPECT_EQ(a.findings[0].seq, 3);
  EXPECT_EQ(a.behind, (std::vector<int>{2}));
}

// Of the ranks where a collective never completed, those that were waiting
// in it ("started") are told apart from those that had only issued it.
TEST(FlightAnalysis, RanksWaitingInACollectiveAreToldFromRanksThatOnlyIssuedIt) {
  const std::string dir = fresh_dir("waiting");
  for (int r : {0, 2}) write_dump(dir, r, 3, {{.seq = 1}, {.seq = 2, .completed = false, .started = true}});
  write_dump(dir, 1, 3, {{.seq = 1}, {.seq = 2, .completed = false}});
  auto a = analyse(dir);
  ASSERT_EQ(a.findings.size(), 1u);
  EXPECT_EQ(a.findings[0].kind, FlightFinding::Kind::NeverCompleted);
  EXPECT_NE(a.findings[0].text.find("never completed on ranks 0, 1, 2 (waiting in it: ranks 0, 2)"),
            std::string::npos)
      << a.findings[0].text;
  // A state no recorder writes is refused in one line naming the file.
  const std::string bad = fresh_dir("bad_state");
  write_dump(bad, 0, 1, {{.seq = 1}});
  {
    std::ifstream in(bad + "/rank_0.json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    text.replace(text.find("\"completed\""), 11, "\"running\"");
    std::ofstream(bad + "/rank_0.json") << text;
  }
  try {
    titan::dist::load_flight_dumps(bad);
    FAIL() << "a dump with state 'running' was accepted";
  } catch (const titan::Error& e) {
    std::printf("%s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("rank_0.json: entry 0 has state 'running'"), std::string::npos) << e.what();
  }
}

TEST(FlightAnalysis, MismatchedSizesAndASkippedCollectiveAreNamed) {
  const std::string dir = fresh_dir("mismatch");
  // Rank 1 calls the 2nd all_reduce with another size.
  for (int r : {0, 2}) write_dump(dir, r, 3, {{.seq = 1}, {.seq = 2, .sizes = {64}}, {.seq = 3, .sizes = {8}}});
  write_dump(dir, 1, 3, {{.seq = 1}, {.seq = 2, .sizes = {128}}, {.seq = 3, .sizes = {8}}});
  auto a = analyse(dir);
  ASSERT_EQ(a.findings.size(), 1u);
  EXPECT_EQ(a.findings[0].kind, FlightFinding::Kind::Mismatch);
  EXPECT_EQ(a.findings[0].seq, 2);
  EXPECT_EQ(a.behind, (std::vector<int>{1}));
  EXPECT_EQ(a.findings[0].text.find("skipped"), std::string::npos) << "a wrong size is not a skip";

  const std::string skip = fresh_dir("skip");
  // Rank 1 skips the 2nd: its #2 is the others' #3.
  for (int r : {0, 2})
    write_dump(skip, r, 3, {{.seq = 1}, {.seq = 2, .op = "all_gather"}, {.seq = 3, .op = "broadcast", .completed = false}});
  write_dump(skip, 1, 3, {{.seq = 1}, {.seq = 2, .op = "broadcast", .completed = false}});
  a = analyse(skip);
  ASSERT_EQ(a.findings.size(), 1u);
  EXPECT_NE(a.findings[0].text.find("rank 1 skipped #2"), std::string::npos) << a.findings[0].text;
  EXPECT_EQ(a.behind, (std::vector<int>{1}));
}

TEST(FlightAnalysis, AgreeingTracesSayNothingIsWrong) {
  const std::string dir = fresh_dir("ok");
  for (int r : {0, 1}) write_dump(dir, r, 2, {{.seq = 1}, {.seq = 2}, {.group = "tp", .seq = 1}});
  auto a = analyse(dir);
  EXPECT_TRUE(a.findings.empty());
  EXPECT_TRUE(a.behind.empty());
}

// ---- whole jobs that go wrong ---------------------------------------------

namespace {

struct FaultRun {
  titan::testing::CommandResult job, analysis;
};

// fault_program MODE 1 over 3 ranks with a 3 s timeout, then
// `titan flight-recorder` on the ranks' dumps.
FaultRun run_fault(const std::string& mode) {
  const std::string dir = fresh_dir("job_" + mode);
  FaultRun r;
  // A hung rank never ends on its own: there the launcher stops the job at
  // the first failure; elsewhere every rank runs to its own end.
  const std::string keep_going = mode == "hang" ? "" : "--keep-going ";
  r.job = run_command(bin_path("titan") + " run --nproc 3 " + keep_going + "-- " + bin_path("fault_program") + " " +
                      mode + " 1 3 " + dir);
  std::printf("job: exit %d after %.1f s\n%s", r.job.exit_code, r.job.seconds, r.job.output.c_str());
  r.analysis = run_command(bin_path("titan") + " flight-recorder " + dir);
  std::printf("titan flight-recorder: exit %d\n%s", r.analysis.exit_code, r.analysis.output.c_str());
  return r;
}

}  // namespace

TEST(FlightRecorderJobs, AStuckRankIsNamedInTheErrorAndByTheAnalysis) {
  // Rank 1 sleeps at the 4th all-reduce: ranks 0 and 2 time out in it.
  auto r = run_fault("hang");
  EXPECT_NE(r.job.exit_code, 0);
  EXPECT_NE(r.job.output.find("this group's collective #4 (all_reduce)"), std::string::npos);
  EXPECT_NE(r.job.output.find("rank 1 never reported reaching it"), std::string::npos);
  EXPECT_EQ(r.analysis.exit_code, 0);
  EXPECT_NE(r.analysis.output.find("none from rank 1"), std::string::npos);
  EXPECT_NE(r.analysis.output.find("collective #4"), std::string::npos);
  EXPECT_NE(r.analysis.output.find("all_reduce [1027] float32"), std::string::npos);
  EXPECT_NE(r.analysis.output.find("ranks behind: 1\n"), std::string::npos);
}

TEST(FlightRecorderJobs, ARankThatSkipsACollectiveIsNamed) {
  // Rank 1's 4th all-reduce is the others' 5th (1028 floats, not 1027).
  // The job dies in it (Gloo aborts on the size mismatch), so no rank
  // holds a 5th to show that rank 1 skipped one: the analysis names the
  // disagreement (the skip itself is named from hand-made dumps above).
  auto r = run_fault("skip");
  EXPECT_EQ(r.analysis.exit_code, 0);
  EXPECT_NE(r.analysis.output.find("traces from ranks 0, 1, 2 of 3"), std::string::npos);
  EXPECT_NE(r.analysis.output.find("collective #4"), std::string::npos);
  EXPECT_NE(r.analysis.output.find("ranks 0, 2 all_reduce [1027] float32; rank 1 all_reduce [1028] float32"),
            std::string::npos);
  EXPECT_NE(r.analysis.output.find("ranks behind: 1\n"), std::string::npos);
}

TEST(FlightRecorderJobs, ARankThatCallsWithAnotherSizeIsNamed) {
  auto r = run_fault("size");
  EXPECT_EQ(r.analysis.exit_code, 0);
  EXPECT_NE(r.analysis.output.find("collective #4"), std::string::npos);
  EXPECT_NE(r.analysis.output.find("rank 1 all_reduce [2048] float32"), std::string::npos);
  EXPECT_NE(r.analysis.output.find("ranks behind: 1\n"), std::string::npos);
}
