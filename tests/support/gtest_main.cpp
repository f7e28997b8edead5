// gtest main for single-process tests: gtest's own main, plus
// --titan-test-files (support/test_files.hpp), which CTest passes to run the
// tests of one titan_add_test out of its folder's executable.
#include <gtest/gtest.h>

#include <cstdio>

#include "support/test_files.hpp"
#include "titan/util/error.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  try {
    titan::testing::select_test_files(argc, argv);
  } catch (const titan::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return RUN_ALL_TESTS();
}
