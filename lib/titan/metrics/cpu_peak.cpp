#include "titan/metrics/cpu_peak.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "titan/util/error.hpp"

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

void write_cache(const std::string& path, const json& j) {
  make_parent_dirs(path);
  // Write then rename: concurrent writers (several ranks on one host) never
  // leave a half-written file behind.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    if (!out) return;
    out << j.dump(2) << '\n';
    if (!out) return;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) std::remove(tmp.c_str());
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
  if (const char* d = std::getenv("TITAN_CACHE_DIR"); d && *d) return std::string(d) + "/cpu_peak.json";
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/titan/cpu_peak.json";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/titan/cpu_peak.json";
  return "";
}

double measure_gemm_flops(int64_t n, int repeats, at::ScalarType dtype) {
  TITAN_CHECK(n > 0 && repeats > 0, "measure_gemm_flops: size and repeats must be > 0");
  const auto opts = at::TensorOptions().dtype(dtype);
  at::Tensor a = at::randn({n, n}, opts);
  at::Tensor b = at::randn({n, n}, opts);
  at::Tensor c = at::empty({n, n}, opts);
  const double flops_per_gemm = 2.0 * static_cast<double>(n) * n * n;
  // Small sizes finish in microseconds, below the clock's useful
  // resolution: batch enough GEMMs into each timed round (~0.2 GFLOP).
  const int per_round = static_cast<int>(std::max(1.0, 2e8 / flops_per_gemm));
  at::mm_out(c, a, b);  // warm-up: BLAS thread pool start, page faults
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < per_round; ++i) at::mm_out(c, a, b);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, per_round * flops_per_gemm / s);
  }
  return best;
}

CpuPeak cpu_peak_flops(const CpuCalibrationOptions& o) {
  TITAN_CHECK(o.size > 0 && o.repeats > 0, "cpu_peak_flops: size and repeats must be > 0");
  CpuPeak peak;
  peak.cpu_model = cpu_model_name();
  peak.threads = o.threads > 0 ? o.threads : at::get_num_threads();
  std::ostringstream key;
  key << peak.cpu_model << "|threads=" << peak.threads << '|' << c10::toString(o.dtype)
      << "|n=" << o.size;
  peak.key = key.str();
  if (o.use_cache) peak.cache_path = o.cache_path.empty() ? default_cpu_peak_cache_path() : o.cache_path;

  json cache = json::object();
  if (!peak.cache_path.empty()) {
    cache = read_cache(peak.cache_path);
    const json& entries = cache.contains("entries") ? cache["entries"] : json::object();
    if (entries.is_object() && entries.contains(peak.key)) {
      const json& e = entries[peak.key];
      if (e.is_object() && e.contains("flops") && e["flops"].is_number() &&
          e["flops"].get<double>() > 0) {
        peak.flops = e["flops"].get<double>();
        peak.from_cache = true;
        return peak;
      }
    }
  }

  {
    ThreadScope scope(peak.threads);
    peak.flops = measure_gemm_flops(o.size, o.repeats, o.dtype);
  }
  if (!peak.cache_path.empty()) {
    if (!cache.contains("entries") || !cache["entries"].is_object()) cache["entries"] = json::object();
    cache["version"] = 1;
    cache["entries"][peak.key] = {
        {"flops", peak.flops},
        {"cpu_model", peak.cpu_model},
        {"threads", peak.threads},
        {"dtype", c10::toString(o.dtype)},
        {"size", o.size},
        {"repeats", o.repeats},
        {"measured_unix",
         std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
             .count()},
    };
    write_cache(peak.cache_path, cache);
  }
  return peak;
}

}  // namespace titan::metrics
