#include "titan/metrics/cpu_peak.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <torch/headeronly/version.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "titan/ops/gemm/cpu_matmul.hpp"
#include "titan/util/error.hpp"
#include "titan/util/measure.hpp"

namespace titan::metrics {

using nlohmann::json;

namespace {

// Sets the intra-op thread count for a scope and puts the old one back.
class ThreadScope {
 public:
  explicit ThreadScope(int threads) : old_(at::get_num_threads()) {
    if (threads > 0 && threads != old_) at::set_num_threads(threads);
  }
  ~ThreadScope() {
    if (at::get_num_threads() != old_) at::set_num_threads(old_);
  }

 private:
  int old_;
};


// CPU time of every thread of this process: with wall time it tells whether
// the measuring threads ran all the time or were preempted.
double process_cpu_seconds() {
  timespec ts{};
  if (::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

long online_cores() { return std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)); }

std::string torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void make_parent_dirs(const std::string& path);

// An exclusive flock(2) held for the scope; "" or an unopenable file (a
// read-only cache folder) means no lock, which only costs the guarantee
// that concurrent calibrations queue.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    if (path.empty()) return;
    make_parent_dirs(path);
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return;
    while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

bool is_clean(const GemmMeasurement& m, const CpuCalibrationOptions& o) {
  // Most rounds un-preempted: the machine was quiet while we measured.
  return m.flops > 0 && m.rounds > 0 && m.clean_rounds * 2 >= m.rounds && m.cpu_share >= o.min_cpu_share;
}

bool usable(const json& e) {
  return e.is_object() && e.contains("flops") && e["flops"].is_number() && e["flops"].get<double>() > 0 &&
         std::isfinite(e["flops"].get<double>()) && !e.contains("invalid") && e.value("threads", 0) > 0;
}

// Why the figure `f` for `t` threads cannot be right next to `f2` for `t2`
// threads ("" = they agree): more threads reaching a higher rate *per
// thread* (by more than 15 %, room for clocks and noise) is what a too-low
// figure for fewer threads looks like — a cache once held 43 GFLOP/s for 1
// thread next to 186 for 2. (More threads being slower is no such evidence: SMT
// siblings and thread counts above the core count are legitimately slower.)
std::string conflict(int t, double f, int t2, double f2) {
  std::ostringstream why;
  why.precision(3);
  if (t2 > t && f2 / t2 > 1.15 * f / t)
    why << t2 << " threads reached " << f2 / t2 / 1e9 << " GFLOP/s per thread, this entry " << f / t / 1e9
        << " with " << t;
  return why.str();
}

// Why the cache's entry for `key` cannot be used ("" = it can).
std::string entry_problem(const json& cache, const std::string& key, const std::string& group, int threads,
                          const CpuCalibrationOptions& o) {
  if (!cache.contains("entries") || !cache["entries"].is_object()) return "no entry";
  if (cache.value("version", 0) != kCpuPeakCacheVersion)
    return "stale: cache schema " + std::to_string(cache.value("version", 0)) + " (older files kept figures measured "
           "while ranks competed)";
  const json& entries = cache["entries"];
  if (!entries.contains(key)) return "no entry";
  const json& e = entries[key];
  if (e.is_object() && e.contains("invalid") && e["invalid"].is_string())
    return "stale: invalidated (" + e["invalid"].get<std::string>() + ")";
  if (!usable(e)) return "stale: malformed entry";
  const double f = e["flops"].get<double>();
  if (o.max_age_days > 0) {
    const double age_days = static_cast<double>(now_unix() - e.value("measured_unix", int64_t{0})) / 86400.0;
    if (age_days > o.max_age_days || age_days < -1) return "stale: measured " + std::to_string(age_days) + " days ago";
  }
  if (e.value("min_seconds", 0.0) + 1e-9 < o.min_seconds)
    return "stale: measured for " + std::to_string(e.value("min_seconds", 0.0)) + " s, less than asked";
  // Neighbours: a figure measured under contention is low, and shows up
  // against the figures for other thread counts of the same machine.
  for (const auto& [other_key, other] : entries.items()) {
    if (other_key == key || !usable(other) || other.value("group", std::string()) != group) continue;
    const std::string why = conflict(threads, f, other["threads"].get<int>(), other["flops"].get<double>());
    if (!why.empty()) return "stale: " + why;
  }
  return "";
}

json read_cache(const std::string& path) {
  std::ifstream in(path);
  if (!in) return json::object();
  // A cache is a convenience: a corrupt one is rebuilt, never fatal.
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return json::object();
  return j;
}

// mkdir -p of the folder holding `path`. POSIX rather than
// std::filesystem: libtorch.so exports its own copy of the std::filesystem
// symbols, which calls can bind to instead of libstdc++'s (remove_all
// crashes that way).
void make_parent_dirs(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos || slash == 0) return;
  const std::string dir = path.substr(0, slash);
  size_t pos = 0;  // the search starts at 1: a leading '/' is the root
  do {
    pos = dir.find('/', pos + 1);
    const std::string part = dir.substr(0, pos);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return;
  } while (pos != std::string::npos);
}

bool write_cache(const std::string& path, const json& j) {
  make_parent_dirs(path);
  // Write then rename: concurrent writers (several ranks on one host) never
  // leave a half-written file behind.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    if (!out) return false;
    out << j.dump(2) << '\n';
    if (!out) return false;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon == std::string::npos) break;
      std::string v = line.substr(colon + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      v.erase(v.find_last_not_of(" \t\r") + 1);
      if (!v.empty()) return v;
    }
  }
  return "unknown cpu";
}

std::string default_cpu_peak_cache_path() {
  if (const char* p = std::getenv("TITAN_CPU_PEAK_CACHE"); p && *p) return p;
  if (const char* d = std::getenv("TITAN_CACHE_DIR"); d && *d) return std::string(d) + "/cpu_peak.json";
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/titan/cpu_peak.json";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/titan/cpu_peak.json";
  return "";
}

std::string cpu_peak_gemm(at::ScalarType dtype) {
  return ops::cpu_matmul_name(dtype == at::kFloat ? ops::cpu_matmul() : ops::CpuMatmul::aten);
}

GemmMeasurement measure_gemm(int64_t n, int repeats, double min_seconds, at::ScalarType dtype,
                             double min_cpu_share) {
  TITAN_CHECK(n > 0 && repeats > 0, "measure_gemm: size and repeats must be > 0");
  const auto opts = at::TensorOptions().dtype(dtype);
  at::Tensor a = at::randn({n, n}, opts);
  at::Tensor b = at::randn({n, n}, opts);
  at::Tensor c = at::empty({n, n}, opts);
  const double flops_per_gemm = 2.0 * static_cast<double>(n) * n * n;
  const int threads = std::max(1, at::get_num_threads());
  const bool onednn = cpu_peak_gemm(dtype) == "onednn";
  auto gemm = [&] {
    if (onednn) c = ops::onednn_mm(a, b);
    else at::mm_out(c, a, b);
  };
  // Warm-up (thread pool start, page faults), then time one GEMM to size
  // the rounds: each round must be long enough for the clocks to resolve it
  // and for a preemption to show in its CPU share, short enough that there
  // are many rounds to take the best of.
  gemm();
  auto t0 = std::chrono::steady_clock::now();
  gemm();
  const double one = std::max(1e-7, seconds_since(t0));
  const double round_target = std::clamp(min_seconds / repeats, 0.005, 0.05);
  const int per_round = static_cast<int>(std::clamp(std::ceil(round_target / one), 1.0, 1e5));

  GemmMeasurement m;
  m.slow = one > kSlowGemmSeconds;
  double best_any = 0, best_any_share = 0, total = 0;
  while (m.rounds < repeats || total < min_seconds) {
    if (m.slow && m.rounds > 0 && total + one * per_round > kSlowGemmBudgetSeconds) break;
    const double cpu0 = process_cpu_seconds();
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < per_round; ++i) gemm();
    const double wall = seconds_since(t0);
    const double cpu = process_cpu_seconds() - cpu0;
    total += wall;
    ++m.rounds;
    if (wall <= 0) continue;
    const double flops = per_round * flops_per_gemm / wall;
    // OpenMP workers may spin past the work (CPU time a little above
    // wall × threads): a share is at most 1.
    const double share = std::min(1.0, cpu / (wall * threads));
    if (cpu > 0) m.cpu_flops = std::max(m.cpu_flops, per_round * flops_per_gemm / (cpu / threads));
    if (flops > best_any) best_any = flops, best_any_share = share;
    if (share >= min_cpu_share) {
      ++m.clean_rounds;
      if (flops > m.flops) m.flops = flops, m.cpu_share = share;
    }
  }
  if (m.clean_rounds == 0) m.flops = best_any, m.cpu_share = best_any_share;
  return m;
}

double measure_gemm_flops(int64_t n, int repeats, at::ScalarType dtype) {
  return measure_gemm(n, repeats, /*min_seconds=*/0, dtype, /*min_cpu_share=*/0).flops;
}

CpuPeak cpu_peak_flops(const CpuCalibrationOptions& o) {
  TITAN_CHECK(o.size > 0 && o.repeats > 0, "cpu_peak_flops: size and repeats must be > 0");
  CpuPeak peak;
  peak.cpu_model = cpu_model_name();
  peak.threads = o.threads > 0 ? o.threads : at::get_num_threads();
  const long cores = online_cores();
  const std::string dtype = c10::toString(o.dtype);
  // The GEMM library is part of what was measured (fp32: aten::mm or
  // oneDNN's).
  peak.gemm = cpu_peak_gemm(o.dtype);
  const std::string& gemm = peak.gemm;
  const std::string what = dtype + (o.dtype == at::kFloat ? "|gemm=" + gemm : "");
  std::ostringstream group;  // every field of the key but the thread count
  group << peak.cpu_model << "|cores=" << cores << '|' << what << "|n=" << o.size << "|torch=" << torch_version();
  std::ostringstream key;
  key << peak.cpu_model << "|cores=" << cores << "|threads=" << peak.threads << '|' << what << "|n=" << o.size
      << "|torch=" << torch_version();
  peak.key = key.str();
  if (o.use_cache) peak.cache_path = o.cache_path.empty() ? default_cpu_peak_cache_path() : o.cache_path;

  // One calibration at a time on this machine: concurrent jobs queue here
  // (blocked in flock, using no CPU) and then find the entry written by the
  // one before them.
  FileLock lock(peak.cache_path.empty() ? std::string() : peak.cache_path + ".lock");
  json cache = json::object();
  if (!peak.cache_path.empty()) {
    cache = read_cache(peak.cache_path);
    const std::string problem = entry_problem(cache, peak.key, group.str(), peak.threads, o);
    if (problem.empty()) {
      peak.flops = cache["entries"][peak.key]["flops"].get<double>();
      peak.cpu_share = cache["entries"][peak.key].value("cpu_share", 1.0);
      peak.from_cache = true;
      return peak;
    }
    peak.remeasure_reason = problem;
  }

  GemmMeasurement best;
  {
    ThreadScope scope(peak.threads);
    for (int attempt = 0; attempt < std::max(1, o.attempts); ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      GemmMeasurement m = measure_gemm(o.size, o.repeats, o.min_seconds, o.dtype, o.min_cpu_share);
      const bool was_clean = is_clean(best, o), now_clean = is_clean(m, o);
      if ((now_clean && !was_clean) || (now_clean == was_clean && m.flops > best.flops)) best = m;
      if (now_clean || m.slow) break;
    }
  }
  peak.clean = is_clean(best, o);
  peak.cpu_share = best.cpu_share;
  // A contended figure is low by what the other processes took; the rate
  // per CPU-second the threads received estimates the uncontended one
  // (for one thread exactly; with more, spinning at barriers makes it a
  // little low still).
  peak.flops = peak.clean ? best.flops : std::max(best.flops, best.cpu_flops);
  if (!peak.cache_path.empty() && peak.clean) {
    if (!cache.contains("entries") || !cache["entries"].is_object() || cache.value("version", 0) != kCpuPeakCacheVersion)
      cache["entries"] = json::object();  // older schemas: nothing in them is trusted
    // A fresh clean figure outranks a cached neighbour it disagrees with
    // (that one was the contended measurement): drop it, to be re-measured
    // when asked for, so that two entries can never make each other stale
    // on every run.
    std::vector<std::string> drop;
    for (const auto& [other_key, other] : cache["entries"].items()) {
      if (other_key == peak.key || !usable(other) || other.value("group", std::string()) != group.str()) continue;
      const int t2 = other["threads"].get<int>();
      const double f2 = other["flops"].get<double>();
      if (!conflict(peak.threads, peak.flops, t2, f2).empty() || !conflict(t2, f2, peak.threads, peak.flops).empty())
        drop.push_back(other_key);
    }
    for (const auto& k : drop) cache["entries"].erase(k);
    cache["version"] = kCpuPeakCacheVersion;
    cache["entries"][peak.key] = {
        {"flops", peak.flops},
        {"cpu_model", peak.cpu_model},
        {"cores", cores},
        {"threads", peak.threads},
        {"dtype", dtype},
        {"gemm", gemm},
        {"size", o.size},
        {"torch", torch_version()},
        {"group", group.str()},
        {"repeats", best.rounds},
        {"min_seconds", o.min_seconds},
        {"cpu_share", best.cpu_share},
        {"clean_rounds", best.clean_rounds},
        {"measured_unix", now_unix()},
    };
    write_cache(peak.cache_path, cache);
  }
  return peak;
}

bool invalidate_cpu_peak(const std::string& cache_path, const std::string& key, const std::string& reason) {
  if (cache_path.empty()) return false;
  FileLock lock(cache_path + ".lock");
  json cache = read_cache(cache_path);
  if (!cache.contains("entries") || !cache["entries"].is_object() || !cache["entries"].contains(key)) return false;
  json& e = cache["entries"][key];
  if (!e.is_object()) return false;
  e["invalid"] = reason;
  return write_cache(cache_path, cache);
}

}  // namespace titan::metrics
