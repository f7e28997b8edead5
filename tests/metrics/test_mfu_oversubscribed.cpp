// `titan train --nproc 4` on a 2-core machine from an empty
// calibration cache must never log an MFU above 100 %. Four emulated ranks
// on two cores is the case that broke: the ranks all calibrated the CPU
// peak at once, each saw half a core, the cache kept that figure, and the
// oversubscription factor was applied on top ("mfu: 118%").
//
// Also the detection path: a cache entry that is still too low (written by
// hand here) makes the run warn that MFU exceeds 100 %, invalidates the
// entry, and the next run re-measures it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/run_command.hpp"
#include "train/train_test_util.hpp"

namespace mfu_oversubscribed_test {

namespace {

using titan::testing::bin_path;
using titan::testing::run_command;
using titan::testing::ScratchDir;
using titan::testing::source_path;

// The demo's job (scripts/demo.sh), cut to a few steps, with the CPU peak
// cache in `cache` (empty at first) and every step on the console.
std::string demo_run(const ScratchDir& dir, const std::string& cache, int steps) {
  return "TITAN_CPU_PEAK_CACHE=" + cache + " " + bin_path("titan") + " train --nproc 4 --job.config_file " +
         source_path("train_configs/debug_model.toml") + " --job.dump_folder " + dir.path() +
         "/out --training.device cpu --training.steps " + std::to_string(steps) + " --metrics.log_freq 1 2>&1";
}

// Every "mfu: X%" on the console (rank 0's log lines and summary).
std::vector<double> console_mfus(const std::string& output) {
  std::vector<double> v;
  static const std::regex re("mfu: ([0-9.]+)%|MFU ([0-9.]+)% of");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), re); it != std::sregex_iterator(); ++it)
    v.push_back(std::stod((*it)[1].matched ? (*it)[1].str() : (*it)[2].str()));
  return v;
}

// Every mfu_pct in metrics.jsonl (every rank's records).
std::vector<double> jsonl_mfus(const std::string& path) {
  std::vector<double> v;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("mfu_pct") && j["mfu_pct"].is_number()) v.push_back(j["mfu_pct"].get<double>());
  }
  return v;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

}  // namespace

TEST(MfuOversubscribed, FourRanksOnTheCoresFromAnEmptyCacheStayAtOrBelow100) {
  ScratchDir dir("mfu_oversub");
  const std::string cache = dir.path() + "/peak/cpu_peak.json";  // does not exist yet

  // 1. Empty cache: one rank calibrates while the others wait.
  auto r = run_command(demo_run(dir, cache, 8));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // "oneDNN GEMM" where titan's oneDNN plugin loads ([model] cpu_matmul "auto").
  EXPECT_TRUE(std::regex_search(r.output, std::regex("measured CPU (oneDNN )?GEMM peak, 1 threads"))) << r.output;
  EXPECT_EQ(r.output.find("warning: MFU"), std::string::npos) << r.output;
  const auto console = console_mfus(r.output);
  EXPECT_GE(console.size(), 9u) << r.output;  // 8 log lines + the summary
  for (double m : console) {
    EXPECT_GT(m, 0.0) << r.output;
    EXPECT_LE(m, 100.0) << r.output;
  }
  const auto logged = jsonl_mfus(dir.path() + "/out/metrics.jsonl");
  EXPECT_GE(logged.size(), 8u);
  for (double m : logged) EXPECT_LE(m, 100.0);

  // One entry, for the ranks' thread count, when the machine was quiet
  // enough to cache it; a busy machine leaves none (and says so).
  auto j = read_json(cache);
  if (r.output.find("not cached") != std::string::npos) {
    GTEST_SKIP() << "the machine was busy during calibration: the figure was not cached\n" << r.output;
  }
  ASSERT_TRUE(j.is_object() && j.contains("entries")) << r.output;
  ASSERT_EQ(j["entries"].size(), 1u) << j.dump(2);
  const std::string key = j["entries"].begin().key();
  EXPECT_NE(key.find("threads=1"), std::string::npos) << key;

  // 2. A figure that is still far too low: the run warns and invalidates it.
  j["entries"][key]["flops"] = 1e9;
  std::ofstream(cache) << j.dump(2);
  r = run_command(demo_run(dir, cache, 2));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1 threads, cached"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("warning: MFU"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("will be re-measured"), std::string::npos) << r.output;
  EXPECT_TRUE(read_json(cache)["entries"][key].contains("invalid")) << read_json(cache).dump(2);

  // 3. The next run re-measures.
  r = run_command(demo_run(dir, cache, 2));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (double m : console_mfus(r.output)) EXPECT_LE(m, 100.0) << r.output;
  if (r.output.find("not cached") != std::string::npos) {
    // Re-measured, but the machine was busy: the figure is not trusted, so
    // the entry stays invalid (and the next quiet run measures again).
    EXPECT_TRUE(read_json(cache)["entries"][key].contains("invalid")) << r.output;
    GTEST_SKIP() << "the machine was busy during the re-measurement: not cached\n" << r.output;
  }
  EXPECT_NE(r.output.find("1 threads, measured now"), std::string::npos) << r.output;
  EXPECT_FALSE(read_json(cache)["entries"][key].contains("invalid"));
}

}  // namespace mfu_oversubscribed_test
