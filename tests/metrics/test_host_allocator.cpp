// keep_freed_host_memory(): after it, a step-shaped pattern of allocations
// (megabyte blocks made in "forward", freed in "backward" while blocks of
// "gradients" come and go) costs no page faults once the process has seen
// a step; a forked child that runs the same pattern with glibc's defaults
// faults tens of thousands of times per step, which shows what the setting
// saves and that the check below can fail.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "titan/util/host_allocator.hpp"

namespace {

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// posix_memalign is what c10's CPU allocator calls for every tensor.
char* touched_block(size_t bytes, int value) {
  void* p = nullptr;
  if (posix_memalign(&p, 64, bytes) != 0) std::abort();
  std::memset(p, value, bytes);
  asm volatile("" : : "g"(p) : "memory");  // the writes happen
  return static_cast<char*>(p);
}

// Six layers of activations of a handful of sizes, then freed in reverse
// while a 4 MiB gradient is made and dropped for each.
void step() {
  const size_t sizes[] = {1 << 20, 3 << 20, 512 << 10, 6 << 20, 2 << 20, 8 << 20};
  std::vector<char*> activations;
  for (int layer = 0; layer < 6; ++layer)
    for (size_t s : sizes) activations.push_back(touched_block(s, 1));
  while (!activations.empty()) {
    char* grad = touched_block(4 << 20, 2);
    std::free(activations.back());
    activations.pop_back();
    std::free(grad);
  }
}

// Minor page faults per step, averaged over 6 steps after 4 unmeasured
// ones (the heap settles in 3 or 4: 24,000, 500, 250, 0 faults here).
long faults_per_step() {
  for (int i = 0; i < 4; ++i) step();
  const long before = minor_faults();
  for (int i = 0; i < 6; ++i) step();
  return (minor_faults() - before) / 6;
}

TEST(HostAllocator, FreedActivationsAreReusedWithoutPageFaults) {
#if !defined(__GLIBC__)
  GTEST_SKIP() << "glibc's malloc only";
#endif
  if (titan::host_allocator_set_by_user()) GTEST_SKIP() << "the environment sets glibc's malloc thresholds";

  // glibc's defaults, in a child: it reports its faults per step through a pipe.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    const long f = faults_per_step();
    const ssize_t n = write(fds[1], &f, sizeof f);
    _exit(n == sizeof f ? 0 : 1);
  }
  close(fds[1]);
  long default_faults = -1;
  ASSERT_EQ(read(fds[0], &default_faults, sizeof default_faults), static_cast<ssize_t>(sizeof default_faults));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  ASSERT_TRUE(titan::keep_freed_host_memory());
  const long kept_faults = faults_per_step();
  std::printf("minor page faults per step: %ld with glibc's defaults, %ld after keep_freed_host_memory()\n",
              default_faults, kept_faults);
  // Measured here: 24,400 with the defaults (a step touches 127 MiB of
  // blocks, 32,500 pages, some of them still mapped), 0 after.
  EXPECT_GT(default_faults, 10000);
  EXPECT_LE(kept_faults, 16);
}

}  // namespace
