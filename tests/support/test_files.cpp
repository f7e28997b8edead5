#include "support/test_files.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "titan/util/error.hpp"
#include "titan/util/measure.hpp"

namespace titan::testing {
namespace {

constexpr const char* kFlag = "--titan-test-files=";

// gtest's wildcard rule: '*' any run of characters, '?' any one character.
bool wildcard_match(const char* pattern, const char* text) {
  if (*pattern == '\0') return *text == '\0';
  if (*pattern == '*') return wildcard_match(pattern + 1, text) || (*text != '\0' && wildcard_match(pattern, text + 1));
  if (*text == '\0') return false;
  return (*pattern == '?' || *pattern == *text) && wildcard_match(pattern + 1, text + 1);
}

bool matches_any(const std::string& patterns, const std::string& name) {
  size_t start = 0;
  while (start <= patterns.size()) {
    size_t end = patterns.find(':', start);
    if (end == std::string::npos) end = patterns.size();
    if (wildcard_match(patterns.substr(start, end - start).c_str(), name.c_str())) return true;
    start = end + 1;
  }
  return false;
}

// gtest's filter: "POSITIVE[-NEGATIVE]", each a ':'-separated list of
// patterns; an empty positive part means every test.
bool passes_filter(const std::string& filter, const std::string& name) {
  const size_t dash = filter.find('-');
  std::string positive = filter.substr(0, dash);
  if (positive.empty()) positive = "*";
  if (!matches_any(positive, name)) return false;
  return dash == std::string::npos || !matches_any(filter.substr(dash + 1), name);
}

std::string base_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

}  // namespace

void select_test_files(int& argc, char** argv) {
  std::string list;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], kFlag, std::strlen(kFlag)) != 0) continue;
    list = argv[i] + std::strlen(kFlag);
    for (int j = i; j < argc; ++j) argv[j] = argv[j + 1];
    --argc;
    break;
  }
  if (list.empty()) return;
  std::set<std::string> files;
  for (const auto& f : split_commas(list)) files.insert(base_name(f.c_str()));

  const std::string filter = GTEST_FLAG_GET(filter);
  std::string selected;
  auto& unit = *::testing::UnitTest::GetInstance();
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const auto& suite = *unit.GetTestSuite(s);
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const auto& info = *suite.GetTestInfo(t);
      const std::string name = std::string(info.test_suite_name()) + "." + info.name();
      if (!files.count(base_name(info.file())) || !passes_filter(filter, name)) continue;
      selected += (selected.empty() ? "" : ":") + name;
    }
  }
  TITAN_CHECK(!selected.empty(), "--titan-test-files=", list, " with --gtest_filter=", filter,
              " selects no test of this executable");
  GTEST_FLAG_SET(filter, selected);
}

}  // namespace titan::testing
