// gtest main for multi-process tests: `test_x --nproc 4` launches 4 ranks of
// itself (through titan's launcher); each rank joins the job and runs every
// test. Rank 0 prints gtest's full report, the others only their failures,
// so a failure on any rank is visible and makes that rank (and so the
// launcher) exit non-zero. --titan-test-files picks the tests of one
// titan_add_test out of its folder's executable (support/test_files.hpp).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>

#include "support/test_files.hpp"
#include "titan/dist/world.hpp"
#include "titan/launch/program.hpp"

namespace {

class FailurePrinter : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::printf("%s:%d: Failure\n%s\n", r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::printf("[  FAILED  ] %s.%s\n", info.test_suite_name(), info.name());
  }
};

}  // namespace

int main(int argc, char** argv) {
  return titan::run_main(argc, argv, [](int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    titan::testing::select_test_files(argc, argv);
    titan::dist::InitOptions options;
    const char* device = std::getenv("TITAN_TEST_DEVICE");
    options.device = device ? device : "cpu";
    // Tests keep collectives short: a stuck peer fails the test in a minute.
    options.timeout = std::chrono::seconds(60);
    const auto& world = titan::dist::init_distributed(options);
    if (world.rank() != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new FailurePrinter);
    }
    const int rc = RUN_ALL_TESTS();
    // Meet once more before exiting: a rank that finishes first must not
    // close its sockets while a peer is still in the handshake of the last
    // collective (seen: a test that ends by creating a process group failed
    // on rank 0 with "Connection closed by peer"). Errors here are the
    // tests' own failures showing again; the exit status already says so.
    try {
      world.group()->barrier();
    } catch (const std::exception&) {
    }
    return rc;
  });
}
