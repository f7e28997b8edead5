// CPU peak calibration (small GEMMs here: the test must stay fast) and its
// cache; CPU memory readings.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <vector>

#include "titan/metrics/cpu_peak.hpp"
#include "titan/metrics/memory.hpp"
#include "titan/metrics/rank_peak.hpp"

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
    for (const char* f : {"sub/cpu_peak.json", "sub/cpu_peak.json.lock", "cpu_peak.json", "cpu_peak.json.lock"})
      ::unlink(file(f).c_str());
    ::rmdir(file("sub").c_str());
    ::rmdir(path_.c_str());
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Small and short; every round counts as clean, so that the cache logic is
// deterministic on a busy machine (contention has its own test).
CpuCalibrationOptions small(const std::string& cache) {
  CpuCalibrationOptions o;
  o.size = 128;
  o.repeats = 2;
  o.min_seconds = 0.01;
  o.min_cpu_share = 0;
  o.cache_path = cache;
  return o;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void write_json(const std::string& path, const nlohmann::json& j) { std::ofstream(path) << j.dump(2); }

// The 1- and 2-thread entries agree (within the 15 % the cache allows).
bool conflict_free(const nlohmann::json& j, const std::string& k1, const std::string& k2) {
  const double f1 = j["entries"][k1]["flops"].get<double>(), f2 = j["entries"][k2]["flops"].get<double>();
  // The product's one rule (cpu_peak.cpp): the 2-thread entry may not beat
  // twice the 1-thread figure by more than 15 %. One thread faster than two
  // is allowed (a fresh 1-thread figure of 220 GFLOP/s next to the made-up
  // 186 for 2 threads is consistent), so it is not checked here.
  return f2 / 2 <= 1.15 * f1;
}

// Processes that keep every core busy until destroyed: another job
// competing with the calibration.
class Spinners {
 public:
  explicit Spinners(int n) {
    for (int i = 0; i < n; ++i) {
      pid_t pid = ::fork();
      if (pid == 0) {
        volatile unsigned long x = 0;
        for (;;) x = x + 1;
      }
      if (pid > 0) pids_.push_back(pid);
    }
    // Let them run first: the scheduler puts new tasks behind running
    // ones, so right after fork() the caller may still have a core alone.
    ::usleep(300 * 1000);
  }
  ~Spinners() {
    for (pid_t p : pids_) ::kill(p, SIGKILL);
    for (pid_t p : pids_) ::waitpid(p, nullptr, 0);
  }

 private:
  std::vector<pid_t> pids_;
};

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

  // Another thread count (and size, so that the two figures are not
  // compared with each other) is another entry (measured, then both kept).
  CpuCalibrationOptions one = small(cache);
  one.threads = first.threads == 1 ? 2 : 1;
  one.size = 96;
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

// The key holds what changes the figure; an entry under another key (here:
// another LibTorch version, and a v2 file) is not used.
TEST(CpuPeak, KeyMismatchIsMeasured) {
  TempDir dir;
  const std::string cache = dir.file("cpu_peak.json");
  CpuPeak first = cpu_peak_flops(small(cache));
  for (const char* part : {"|cores=", "|threads=", "|Float", "|n=128", "|torch="})
    EXPECT_NE(first.key.find(part), std::string::npos) << first.key;
  auto j = read_json(cache);
  std::string other = first.key.substr(0, first.key.find("|torch=")) + "|torch=0.0.1";
  j["entries"][other] = j["entries"][first.key];
  j["entries"].erase(first.key);
  write_json(cache, j);
  CpuPeak again = cpu_peak_flops(small(cache));
  EXPECT_FALSE(again.from_cache);
  EXPECT_EQ(again.remeasure_reason, "no entry");
  EXPECT_EQ(read_json(cache)["entries"].size(), 2u);  // the other key is kept, not used
}

// Version-1 files (before this fix) kept figures measured while ranks
// competed: none of their entries is trusted, even under the same key.
TEST(CpuPeak, OldSchemaIsRemeasured) {
  TempDir dir;
  const std::string cache = dir.file("cpu_peak.json");
  CpuPeak first = cpu_peak_flops(small(cache));
  auto j = read_json(cache);
  j["version"] = 1;
  j["entries"][first.key]["flops"] = 1e6;  // the low, contended figure
  write_json(cache, j);
  CpuPeak again = cpu_peak_flops(small(cache));
  EXPECT_FALSE(again.from_cache);
  EXPECT_NE(again.remeasure_reason.find("schema 1"), std::string::npos) << again.remeasure_reason;
  EXPECT_GT(again.flops, 1e8);
  EXPECT_EQ(read_json(cache)["version"].get<int>(), kCpuPeakCacheVersion);
  EXPECT_TRUE(cpu_peak_flops(small(cache)).from_cache);
}

// A cache once held 43 GFLOP/s for 1 thread next to 186 for 2 threads. Two
// threads cannot do more than twice one thread's work (15 % allowed), so
// the 1-thread figure was measured under contention and is re-measured.
TEST(CpuPeak, InconsistentNeighbourIsRemeasured) {
  TempDir dir;
  const std::string cache = dir.file("cpu_peak.json");
  CpuCalibrationOptions one = small(cache), two = small(cache);
  one.threads = 1;
  two.threads = 2;
  // The entries are written by hand (from one measured entry), so that what
  // a busy machine measures cannot change the set-up.
  const CpuPeak p1 = cpu_peak_flops(one);
  const std::string key1 = p1.key;
  std::string key2 = key1;
  key2.replace(key2.find("threads=1"), 9, "threads=2");
  auto j = read_json(cache);
  const auto entry1 = j["entries"][key1];
  auto entry2 = entry1;
  entry2["threads"] = 2;
  auto write = [&](double f1, double f2) {
    auto k = read_json(cache);
    k["entries"] = nlohmann::json::object();
    k["entries"][key1] = entry1;
    k["entries"][key1]["flops"] = f1;
    k["entries"][key2] = entry2;
    k["entries"][key2]["flops"] = f2;
    write_json(cache, k);
  };

  write(43e9, 186e9);
  CpuPeak again = cpu_peak_flops(one);
  EXPECT_FALSE(again.from_cache);
  EXPECT_NE(again.remeasure_reason.find("per thread"), std::string::npos) << again.remeasure_reason;
  // The fresh figure outranks the neighbour it disagrees with (the made-up
  // 186), which is dropped: two entries never keep each other stale.
  j = read_json(cache);
  if (j["entries"].contains(key2)) EXPECT_TRUE(conflict_free(j, key1, key2)) << j.dump(2);
  EXPECT_TRUE(cpu_peak_flops(one).from_cache);

  // More threads slower than fewer is no evidence (SMT siblings, more
  // threads than cores), and consistent figures are used as they are.
  write(100e9, 50e9);
  EXPECT_TRUE(cpu_peak_flops(one).from_cache);
  EXPECT_TRUE(cpu_peak_flops(two).from_cache);
  write(100e9, 190e9);
  EXPECT_TRUE(cpu_peak_flops(one).from_cache);
  EXPECT_TRUE(cpu_peak_flops(two).from_cache);
}

TEST(CpuPeak, OldOrShortOrInvalidatedEntryIsRemeasured) {
  TempDir dir;
  const std::string cache = dir.file("cpu_peak.json");
  CpuPeak first = cpu_peak_flops(small(cache));
  auto j = read_json(cache);
  j["entries"][first.key]["measured_unix"] = 1000;  // 1970
  write_json(cache, j);
  CpuPeak old = cpu_peak_flops(small(cache));
  EXPECT_FALSE(old.from_cache);
  EXPECT_NE(old.remeasure_reason.find("days ago"), std::string::npos) << old.remeasure_reason;

  CpuCalibrationOptions longer = small(cache);
  longer.min_seconds = 0.03;  // asks for more than the entry was measured with
  CpuPeak shorter = cpu_peak_flops(longer);
  EXPECT_FALSE(shorter.from_cache);
  EXPECT_NE(shorter.remeasure_reason.find("less than asked"), std::string::npos) << shorter.remeasure_reason;
  EXPECT_TRUE(cpu_peak_flops(longer).from_cache);
  EXPECT_TRUE(cpu_peak_flops(small(cache)).from_cache);  // measured longer than this asks: fine

  EXPECT_TRUE(invalidate_cpu_peak(cache, first.key, "a run achieved more"));
  EXPECT_FALSE(invalidate_cpu_peak(cache, "no such key", "x"));
  CpuPeak inv = cpu_peak_flops(small(cache));
  EXPECT_FALSE(inv.from_cache);
  EXPECT_NE(inv.remeasure_reason.find("invalidated (a run achieved more)"), std::string::npos) << inv.remeasure_reason;
  EXPECT_TRUE(cpu_peak_flops(small(cache)).from_cache);  // the re-measured entry replaced it
}

// Other processes busy on every core: each round's CPU share shows the
// preemption, the figure is not cached, and the one used is corrected for
// the share the calibration got.
TEST(CpuPeak, ContendedFigureIsNotCached) {
  TempDir dir;
  const std::string cache = dir.file("cpu_peak.json");
  CpuCalibrationOptions o = small(cache);
  o.threads = 1;
  o.min_cpu_share = 0.9;
  o.attempts = 2;
  o.min_seconds = 0.3;
  // The scheduler decides whether the spinners really take the cores
  // during the calibration's rounds (in one CI run 2 per core did not:
  // share 0.95), so add spinners until the contention shows; a machine
  // where even 8 per core do not is reported as a skip, not a pass.
  CpuPeak p;
  const int cores = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  for (int per_core : {2, 4, 8}) {
    {
      Spinners busy(per_core * cores);
      p = cpu_peak_flops(o);
    }
    if (p.cpu_share < 0.9) break;
    std::remove(cache.c_str());  // a clean figure was (rightly) cached: start over
  }
  if (p.cpu_share >= 0.9) GTEST_SKIP() << "could not make the calibration contended (share " << p.cpu_share << ")";
  EXPECT_FALSE(p.clean);
  EXPECT_FALSE(p.from_cache);
  EXPECT_LT(p.cpu_share, 0.9);
  EXPECT_GT(p.flops, 1e8);
  EXPECT_FALSE(exists(cache)) << "a contended figure must not be cached";
}

// A job's CPU peak is the GEMM of the dtype its matmuls run in: FSDP's
// bf16 mixed precision (titan's default) or pure bf16 runs bf16 GEMMs, which
// CPUs with bf16 vector instructions run ~2x faster than fp32's, so an fp32
// peak overstated their MFU (and a run "beating" it invalidated the fp32
// calibration). Each dtype is its own cache entry.
TEST(CpuPeak, AJobIsJudgedAgainstTheGemmOfItsComputeDtype) {
  TempDir dir;
  ::setenv("TITAN_CPU_PEAK_CACHE", dir.file("cpu_peak.json").c_str(), 1);
  RankPeakInputs in;
  in.compute_dtype = at::kBFloat16;
  const RankPeak bf16 = resolve_rank_peak(in);
  in.compute_dtype = at::kFloat;
  const RankPeak fp32 = resolve_rank_peak(in);
  ::unsetenv("TITAN_CPU_PEAK_CACHE");
  std::printf("bf16: %.3g FLOP/s (%s), fp32: %.3g FLOP/s (%s)\n", bf16.flops, bf16.source.c_str(), fp32.flops,
              fp32.source.c_str());
  EXPECT_NE(bf16.cache_key.find("|BFloat16|"), std::string::npos) << bf16.cache_key;
  EXPECT_NE(fp32.cache_key.find("|Float|"), std::string::npos) << fp32.cache_key;
  EXPECT_EQ(bf16.source.rfind("measured CPU bfloat16 GEMM peak, ", 0), 0u) << bf16.source;
  EXPECT_EQ(fp32.source.rfind("measured CPU GEMM peak, ", 0), 0u) << fp32.source;
  // A calibration measured on a busy machine is used but not cached
  // (ContendedFigureIsNotCached); clean ones are two entries, one per dtype.
  const bool cached = bf16.source.find("not cached") == std::string::npos &&
                      fp32.source.find("not cached") == std::string::npos;
  if (cached) EXPECT_EQ(read_json(dir.file("cpu_peak.json"))["entries"].size(), 2u);
}

TEST(CpuPeak, DefaultCachePathFollowsEnvironment) {
  ::setenv("TITAN_CPU_PEAK_CACHE", "/tmp/elsewhere/peak.json", 1);
  EXPECT_EQ(default_cpu_peak_cache_path(), "/tmp/elsewhere/peak.json");
  ::unsetenv("TITAN_CPU_PEAK_CACHE");
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
