// CPU peak calibration (small GEMMs here: the test must stay fast) and its
// cache; CPU memory readings.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "titan/metrics/cpu_peak.hpp"
#include "titan/metrics/memory.hpp"

using namespace titan::metrics;

namespace {

// POSIX, not std::filesystem: libtorch.so exports a std::filesystem copy
// that calls may bind to (its remove_all crashes).
bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/titan_cpu_peak_XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    // The tests create at most these.
    for (const char* f : {"sub/cpu_peak.json", "cpu_peak.json"}) ::unlink(file(f).c_str());
    ::rmdir(file("sub").c_str());
    ::rmdir(path_.c_str());
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

CpuCalibrationOptions small(const std::string& cache) {
  CpuCalibrationOptions o;
  o.size = 128;
  o.repeats = 2;
  o.cache_path = cache;
  return o;
}

}  // namespace

TEST(CpuPeak, MeasuresAPlausiblePeakAndCachesIt) {
  TempDir dir;
  const std::string cache = dir.file("sub/cpu_peak.json");  // parent created on write
  CpuPeak first = cpu_peak_flops(small(cache));
  // Any CPU that runs LibTorch does more than 0.1 GFLOP/s on a 128³ GEMM,
  // and no CPU does 100 TFLOP/s in fp32.
  EXPECT_GT(first.flops, 1e8);
  EXPECT_LT(first.flops, 1e14);
  EXPECT_FALSE(first.from_cache);
  EXPECT_EQ(first.cache_path, cache);
  EXPECT_EQ(first.cpu_model, cpu_model_name());
  ASSERT_TRUE(exists(cache));

  std::ifstream in(cache);
  auto j = nlohmann::json::parse(in);
  ASSERT_TRUE(j["entries"].contains(first.key)) << j.dump();
  EXPECT_DOUBLE_EQ(j["entries"][first.key]["flops"].get<double>(), first.flops);
  EXPECT_NE(first.key.find("threads=" + std::to_string(first.threads)), std::string::npos);

  CpuPeak second = cpu_peak_flops(small(cache));
  EXPECT_TRUE(second.from_cache);
  EXPECT_DOUBLE_EQ(second.flops, first.flops);

  // Another thread count is another entry (measured, then both kept).
  CpuCalibrationOptions one = small(cache);
  one.threads = first.threads == 1 ? 2 : 1;
  CpuPeak other = cpu_peak_flops(one);
  EXPECT_FALSE(other.from_cache);
  EXPECT_NE(other.key, first.key);
  std::ifstream in2(cache);
  EXPECT_EQ(nlohmann::json::parse(in2)["entries"].size(), 2u);
}

TEST(CpuPeak, CorruptCacheIsRebuilt) {
  TempDir dir;
  const std::string cache = dir.file("cpu_peak.json");
  { std::ofstream(cache) << "{ not json"; }
  CpuPeak p = cpu_peak_flops(small(cache));
  EXPECT_FALSE(p.from_cache);
  EXPECT_GT(p.flops, 0);
  EXPECT_TRUE(cpu_peak_flops(small(cache)).from_cache);
}

TEST(CpuPeak, NoCacheWritesNothing) {
  CpuCalibrationOptions o = small("");
  o.use_cache = false;
  CpuPeak p = cpu_peak_flops(o);
  EXPECT_FALSE(p.from_cache);
  EXPECT_TRUE(p.cache_path.empty());
  EXPECT_GT(p.flops, 0);
}

TEST(CpuPeak, DefaultCachePathFollowsEnvironment) {
  ::setenv("TITAN_CACHE_DIR", "/tmp/titan-cache-test", 1);
  EXPECT_EQ(default_cpu_peak_cache_path(), "/tmp/titan-cache-test/cpu_peak.json");
  ::unsetenv("TITAN_CACHE_DIR");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg == nullptr || *xdg == '\0') {
    ::setenv("HOME", "/home/someone", 1);
    EXPECT_EQ(default_cpu_peak_cache_path(), "/home/someone/.cache/titan/cpu_peak.json");
  }
}

TEST(Memory, ProcStatusParsing) {
  const std::string status = "Name:\ttitan\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n";
  EXPECT_EQ(titan::metrics::detail::proc_status_kb(status, "VmRSS"), 102400);
  EXPECT_EQ(titan::metrics::detail::proc_status_kb(status, "VmHWM"), 204800);
  EXPECT_EQ(titan::metrics::detail::proc_status_kb(status, "VmSwap"), -1);
}

TEST(Memory, CpuReadingIsSane) {
  MemoryStats m = memory_stats(c10::Device(c10::kCPU));
  EXPECT_EQ(m.kind, "cpu");
  EXPECT_GT(m.current_bytes, 0);
  EXPECT_GE(m.peak_bytes, m.current_bytes);
  EXPECT_GT(m.capacity_bytes, m.peak_bytes);
  EXPECT_GT(m.peak_pct, 0);
  EXPECT_LT(m.peak_pct, 100);
  EXPECT_EQ(device_name(c10::Device(c10::kCPU)), cpu_model_name());
}
