// PendingWork::wait's timeout by backend: none for NCCL (the host must not
// poll until the kernel ends; the stream waits and the group's watchdog
// keeps the timeout), the group's for Gloo (whose works run on the host and
// whose timeout becomes the one-line error of tests/faults).
#include <gtest/gtest.h>

#include <torch/csrc/distributed/c10d/Work.hpp>

#include "titan/dist/work_wait.hpp"

using titan::dist::work_wait_timeout;

TEST(WorkWait, NcclWaitsWithoutATimeoutSoTheHostDoesNotBlock) {
  EXPECT_EQ(work_wait_timeout("nccl", std::chrono::seconds(600)), ::kNoTimeout);
  EXPECT_EQ(work_wait_timeout("nccl", std::chrono::milliseconds(1)), ::kNoTimeout);
}

TEST(WorkWait, GlooKeepsTheGroupTimeout) {
  EXPECT_EQ(work_wait_timeout("gloo", std::chrono::seconds(600)), std::chrono::seconds(600));
  EXPECT_EQ(work_wait_timeout("gloo", std::chrono::milliseconds(1500)), std::chrono::milliseconds(1500));
  // Anything that is not NCCL keeps the bounded wait.
  EXPECT_EQ(work_wait_timeout("ucc", std::chrono::seconds(5)), std::chrono::seconds(5));
}
