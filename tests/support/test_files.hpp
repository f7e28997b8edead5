#pragma once
/// @file
/// @brief Runs only the tests of some source files of a test executable.
///
/// The tests of one folder are linked into one executable (a source that
/// includes LibTorch costs seconds to compile and link, so fewer and larger
/// executables build faster), while CTest keeps one test per titan_add_test:
/// each runs the executable with `--titan-test-files=a.cpp,b.cpp`, which
/// selects the tests defined in those files (gtest records each test's
/// file). A `--gtest_filter` given as well narrows the selection further.

namespace titan::testing {

/// @brief Call after ::testing::InitGoogleTest: takes
/// `--titan-test-files=LIST` out of argv and sets gtest's filter to the tests
/// defined in those files that also pass the filter already set. A list
/// that selects no test throws titan::Error (a CTest test that runs nothing
/// would pass without checking anything).
void select_test_files(int& argc, char** argv);

}  // namespace titan::testing
