// Faults: a rank that fails mid-collective makes every other rank stop,
// non-zero, within the timeout, with an error naming it; bad launch
// environments give one line and a non-zero exit, never a hang.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sstream>
#include <vector>

#include "support/run_command.hpp"
#include "titan/launch/local_launcher.hpp"

using titan::testing::bin_path;
using titan::testing::run_command;

namespace {

std::string fault(const std::string& launcher_flags, const std::string& args) {
  return bin_path("titan") + " run --nproc 3 " + launcher_flags + " -- " + bin_path("fault_program") + " " + args;
}

std::vector<std::string> lines_with(const std::string& text, const std::string& needle) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find(needle) != std::string::npos) out.push_back(line);
  return out;
}

size_t count_lines(const std::string& text) {
  size_t n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

TEST(Faults, ARankThatThrowsIsNamedByEveryOtherRank) {
  auto r = run_command(fault("--keep-going", "throw 1 20"));
  std::printf("exit %d after %.1f s\n%s", r.exit_code, r.seconds, r.output.c_str());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 20.0) << "the survivors should stop as soon as the peer's sockets close";
  for (int rank : {0, 2}) {
    auto errors = lines_with(r.output, "[rank " + std::to_string(rank) + "] error:");
    ASSERT_EQ(errors.size(), 1u) << "rank " << rank << " should print exactly one error line";
    EXPECT_NE(errors[0].find("all_reduce on group 'world'"), std::string::npos) << errors[0];
    EXPECT_NE(errors[0].find("rank 1 failed: injected failure"), std::string::npos) << errors[0];
  }
  EXPECT_EQ(lines_with(r.output, "finished").size(), 0u);
}

TEST(Faults, ARankThatExitsMidRunIsNamed) {
  auto r = run_command(fault("--keep-going", "exit 2 20"));
  std::printf("exit %d after %.1f s\n%s", r.exit_code, r.seconds, r.output.c_str());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 20.0);
  for (int rank : {0, 1}) {
    auto errors = lines_with(r.output, "[rank " + std::to_string(rank) + "] error:");
    ASSERT_EQ(errors.size(), 1u) << "rank " << rank;
    EXPECT_NE(errors[0].find("rank 2 failed: exited before finishing"), std::string::npos) << errors[0];
  }
}

TEST(Faults, AStuckRankTimesOutTheOthersAndTheLauncherNamesTheFirstFailure) {
  // Rank 1 sleeps inside the loop; with a 3 s collective timeout ranks 0 and
  // 2 fail, and the launcher then stops rank 1.
  auto r = run_command(fault("", "hang 1 3"));
  std::printf("exit %d after %.1f s\n%s", r.exit_code, r.seconds, r.output.c_str());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 30.0);
  EXPECT_FALSE(lines_with(r.output, "timeout 3 s").empty()) << "the error should give the timeout";
  auto summary = lines_with(r.output, "titan run: rank ");
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_NE(summary[0].find("failed with exit status 1"), std::string::npos) << summary[0];
}

TEST(Faults, TheLauncherStopsTheOthersAndNamesTheFailedRank) {
  auto r = run_command(fault("", "throw 2 60"));
  std::printf("exit %d after %.1f s\n%s", r.exit_code, r.seconds, r.output.c_str());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 30.0);
  EXPECT_FALSE(lines_with(r.output, "titan run: rank 2 failed with exit status 1").empty());
}

TEST(Faults, ARankThatDiesMidPipelineScheduleIsNamedByTheOthers) {
  // Rank 1 of a 3-stage 1F1B pipeline throws at its fourth action; rank 0
  // waits for its gradients, rank 2 for its activations: both must stop
  // at once, naming it, not wait out the timeout.
  auto r = run_command(fault("--keep-going", "pipeline 1 60"));
  std::printf("exit %d after %.1f s\n%s", r.exit_code, r.seconds, r.output.c_str());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 30.0) << "the survivors should stop as soon as the peer's sockets close";
  for (int rank : {0, 2}) {
    auto errors = lines_with(r.output, "[rank " + std::to_string(rank) + "] error:");
    ASSERT_EQ(errors.size(), 1u) << "rank " << rank;
    EXPECT_NE(errors[0].find("group 'world'"), std::string::npos) << errors[0];
    EXPECT_NE(errors[0].find("rank 1 failed: injected failure before"), std::string::npos) << errors[0];
  }
  EXPECT_EQ(lines_with(r.output, "finished").size(), 0u);
}

// A rank that exits 130 (a clean stop on Ctrl-C, as `titan train` does)
// is reported as stopped, not failed, and its status is the launcher's.
TEST(Faults, ARankThatStopsOnASignalIsNotCalledFailed) {
  auto r = run_command(bin_path("titan") + " run --nproc 2 -- /bin/sh -c 'exit 130'");
  std::printf("exit %d\n%s", r.exit_code, r.output.c_str());
  EXPECT_EQ(r.exit_code, 130);
  EXPECT_EQ(lines_with(r.output, "failed with").size(), 0u);
  EXPECT_EQ(lines_with(r.output, "stopped on a signal, with exit status 130").size(), 1u);
}

TEST(Faults, AHealthyRunExitsZero) {
  auto r = run_command(fault("", "ok 0"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(lines_with(r.output, "finished").size(), 3u) << r.output;
}

// ---- bad launch environments: one line, non-zero, quickly -----------------

std::string direct(const std::string& env) { return "env " + env + " " + bin_path("fault_program") + " ok 0 5"; }

void expect_one_line_error(const std::string& env, const std::string& needle, double max_seconds = 20.0) {
  auto r = run_command(direct(env));
  std::printf("%s -> exit %d after %.1f s: %s", env.c_str(), r.exit_code, r.seconds, r.output.c_str());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, max_seconds);
  EXPECT_EQ(count_lines(r.output), 1u) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
}

TEST(BadEnvironment, WorldSizeZero) { expect_one_line_error("RANK=0 WORLD_SIZE=0", "WORLD_SIZE=0 is out of range"); }

TEST(BadEnvironment, RankNotBelowWorldSize) {
  expect_one_line_error("RANK=2 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29999", "RANK=2 is out of range");
}

TEST(BadEnvironment, UnreachableMaster) {
  // Nothing listens on a port that was free a moment ago: rank 1 cannot
  // join and gives up after the rendezvous timeout.
  int port = titan::launch::pick_free_port();
  expect_one_line_error("RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                            " TITAN_RENDEZVOUS_TIMEOUT=3",
                        "could not join the rendezvous at 127.0.0.1:" + std::to_string(port));
}

TEST(BadEnvironment, PortInUse) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  int port = ntohs(addr.sin_port);
  expect_one_line_error("RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                            " TITAN_RENDEZVOUS_TIMEOUT=3",
                        "port " + std::to_string(port));
  close(fd);
}

}  // namespace
