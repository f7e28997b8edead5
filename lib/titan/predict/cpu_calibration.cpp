#include "titan/predict/cpu_calibration.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "titan/dist/comm_log.hpp"
#include "titan/dist/world.hpp"
#include "titan/metrics/cpu_peak.hpp"
#include "titan/metrics/memory.hpp"
#include "titan/ops/gemm/cpu_matmul.hpp"
#include "titan/util/error.hpp"
#include "titan/util/files.hpp"
#include "titan/util/strprintf.hpp"

namespace titan::predict {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The best of `rounds` timings of `fn` (after one warm-up): the rate the
// machine reaches, not what a neighbour left it.
template <typename F>
double best_seconds(int rounds, F&& fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < rounds; ++i) {
    const auto t = Clock::now();
    fn();
    best = std::min(best, seconds_since(t));
  }
  return best;
}

// A copy of 128 MiB: it reads and writes every byte once.
double copy_rate(int threads) {
  const int old = at::get_num_threads();
  at::set_num_threads(threads);
  const at::Tensor a = at::rand({32 * 1024 * 1024}), b = at::empty_like(a);
  const double s = best_seconds(5, [&] { b.copy_(a); });
  at::set_num_threads(old);
  return 2.0 * static_cast<double>(a.nbytes()) / s;
}

// Causal SDPA forward and backward, on the FLOPs it executes as
// compute_cost.cpp counts them (half the square, backward 2.5 forwards).
double attention_rate() {
  const int64_t b = 1, h = 8, T = 1024, d = 64;
  const at::Tensor q = at::randn({b, h, T, d}).requires_grad_(), k = at::randn({b, h, T, d}).requires_grad_(),
                   v = at::randn({b, h, T, d}).requires_grad_();
  const double s = best_seconds(3, [&] {
    at::Tensor o = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
    o.sum().backward();
  });
  const double forward = 4.0 * static_cast<double>(b * T * T * h * d) * 0.5;
  return 3.5 * forward / s;
}

std::string today_utc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

}  // namespace

std::string cpu_calibration_path() {
  if (const char* p = std::getenv("TITAN_PREDICT_CPU_CACHE"); p && *p) return p;
  const std::string peak = metrics::default_cpu_peak_cache_path();
  if (peak.empty()) return "";
  return files::join(files::dir_name(peak), "predict_cpu.json");
}

CpuCalibration measure_cpu_compute() {
  CpuCalibration c;
  c.cpu_model = metrics::cpu_model_name();
  c.cores = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
  c.date = today_utc();
  metrics::CpuCalibrationOptions one;
  one.threads = 1;
  c.gemm_one_thread = metrics::cpu_peak_flops(one).flops;
  metrics::CpuCalibrationOptions all;
  all.threads = static_cast<int>(c.cores);
  c.gemm_all_cores = metrics::cpu_peak_flops(all).flops;
  c.copy_one_thread = copy_rate(1);
  c.copy_all_cores = copy_rate(static_cast<int>(c.cores));
  const int old = at::get_num_threads();
  at::set_num_threads(static_cast<int>(c.cores));
  c.attention_efficiency = std::min(1.0, attention_rate() / c.gemm_all_cores);
  at::set_num_threads(old);
  return c;
}

void measure_gloo(const dist::World& world, CpuCalibration& into) {
  const dist::ProcessGroup& g = *world.group();
  at::Tensor small = at::zeros({1});
  std::vector<double> small_times;
  for (int i = 0; i < 60; ++i) {
    const auto t = Clock::now();
    g.all_reduce(small);
    if (i >= 10) small_times.push_back(seconds_since(t));
  }
  std::sort(small_times.begin(), small_times.end());
  const at::Tensor big = at::zeros({4 * 1024 * 1024});  // 16 MiB
  at::Tensor work = big.clone();
  std::vector<double> big_times;
  for (int i = 0; i < 6; ++i) {
    const auto t = Clock::now();
    g.all_reduce(work);
    if (i >= 1) big_times.push_back(seconds_since(t));
  }
  std::sort(big_times.begin(), big_times.end());
  // Medians: a loopback link on a busy laptop is noisy both ways.
  into.gloo_latency = small_times[small_times.size() / 2];
  const double wire = dist::ring_all_reduce_bytes(static_cast<double>(big.nbytes()), world.size());
  into.gloo_bandwidth = wire / std::max(1e-9, big_times[big_times.size() / 2] - into.gloo_latency);
}

void save_cpu_calibration(const CpuCalibration& c) {
  const std::string path = cpu_calibration_path();
  TITAN_CHECK(!path.empty(), "titan predict --calibrate: no cache folder (set HOME or TITAN_PREDICT_CPU_CACHE)");
  const nlohmann::json j = {{"schema", 1},
                            {"cpu_model", c.cpu_model},
                            {"cores", c.cores},
                            {"date", c.date},
                            {"gemm_one_thread", c.gemm_one_thread},
                            {"gemm_all_cores", c.gemm_all_cores},
                            {"copy_one_thread", c.copy_one_thread},
                            {"copy_all_cores", c.copy_all_cores},
                            {"attention_efficiency", c.attention_efficiency},
                            {"gloo_bandwidth", c.gloo_bandwidth},
                            {"gloo_latency", c.gloo_latency}};
  files::make_directories(files::dir_name(path));
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << j.dump(2) << "\n";
    TITAN_CHECK(out.good(), "titan predict --calibrate: cannot write ", tmp);
  }
  TITAN_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "titan predict --calibrate: cannot write ", path);
}

CpuCalibration load_cpu_calibration() {
  const std::string path = cpu_calibration_path();
  const std::string how = "run `titan predict --calibrate` on this machine to measure it (about a minute)";
  std::ifstream in(path);
  TITAN_CHECK(!path.empty() && in.good(), "[cluster] preset = \"cpu\": this machine has no calibration (",
              path.empty() ? std::string("no cache folder") : path, "): ", how);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
    CpuCalibration c;
    c.cpu_model = j.at("cpu_model").get<std::string>();
    c.cores = j.at("cores").get<int64_t>();
    c.date = j.at("date").get<std::string>();
    c.gemm_one_thread = j.at("gemm_one_thread").get<double>();
    c.gemm_all_cores = j.at("gemm_all_cores").get<double>();
    c.copy_one_thread = j.at("copy_one_thread").get<double>();
    c.copy_all_cores = j.at("copy_all_cores").get<double>();
    c.attention_efficiency = j.at("attention_efficiency").get<double>();
    c.gloo_bandwidth = j.at("gloo_bandwidth").get<double>();
    c.gloo_latency = j.at("gloo_latency").get<double>();
    const bool sane = c.cores >= 1 && c.gemm_one_thread > 0 && c.gemm_all_cores > 0 && c.copy_one_thread > 0 &&
                      c.copy_all_cores > 0 && c.attention_efficiency > 0 && c.gloo_bandwidth > 0 && c.gloo_latency >= 0;
    TITAN_CHECK(sane, "[cluster] preset = \"cpu\": ", path, " holds a value out of range: ", how);
    TITAN_CHECK(c.cpu_model == metrics::cpu_model_name() && c.cores == std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)),
                "[cluster] preset = \"cpu\": ", path, " was measured on another machine (", c.cpu_model, ", ",
                c.cores, " cores): ", how);
    return c;
  } catch (const nlohmann::json::exception& e) {
    throw Error("[cluster] preset = \"cpu\": " + path + " is not a calibration (" + e.what() + "): " + how);
  }
}

Cluster cpu_cluster(const CpuCalibration& c, int64_t ranks) {
  Cluster k;
  k.preset = "cpu";
  k.accelerator = strprintf("%s, %lld cores (calibrated %s)", c.cpu_model.c_str(), static_cast<long long>(c.cores),
                            c.date.c_str());
  // Each rank's share of the cores: one thread's rate times the cores it
  // gets, no more than every core's rate together.
  const double share = static_cast<double>(c.cores) / static_cast<double>(std::max<int64_t>(ranks, 1));
  k.peak_fp32 = std::min(c.gemm_all_cores, c.gemm_one_thread * share);
  k.peak_bf16 = k.peak_fp32;  // titan trains CPU jobs in fp32
  k.peak_fp8 = 0;
  k.hbm_bandwidth = std::min(c.copy_all_cores, c.copy_one_thread * share);
  k.hbm_capacity_gib = static_cast<double>(metrics::memory_stats(c10::Device(c10::kCPU)).capacity_bytes) /
                       (1024.0 * 1024.0 * 1024.0) / static_cast<double>(std::max<int64_t>(ranks, 1));
  k.gpus_per_node = std::max<int64_t>(ranks, 1);  // every rank on this machine
  k.intra_bandwidth = k.intra_all_reduce_bandwidth = c.gloo_bandwidth;
  k.intra_latency = c.gloo_latency;  // per collective: the log2(2) = 1 step it was measured with
  k.inter_bandwidth = c.gloo_bandwidth, k.inter_latency = c.gloo_latency;
  k.matmul_efficiency = 1.0;  // the rates above are what GEMMs and copies reached here
  k.memory_efficiency = 1.0;
  k.attention_efficiency = c.attention_efficiency;
  // Gloo's work runs on the same cores as the compute: nothing hides.
  k.overlaps_communication = false;
  // Each GEMM shape the job runs, timed here on a rank's threads (cores /
  // ranks, as the launcher gives them) and scaled by its share of the cores
  // when the ranks outnumber them; a GEMM past a few GFLOP runs at the
  // calibrated rate (timing it would take seconds, and it is at the
  // library's steady state). The small and narrow GEMMs of a CPU job (TP's
  // half-width ones) run well below the 1024^3 rate.
  const int threads = static_cast<int>(std::max<int64_t>(1, c.cores / std::max<int64_t>(ranks, 1)));
  const double time_share = std::min(1.0, share / threads);
  const double rate = k.peak_fp32;
  auto cache = std::make_shared<std::map<std::tuple<int64_t, int64_t, int64_t>, double>>();
  k.measured_gemm = std::make_shared<std::function<double(double, double, double)>>(
      [cache, threads, time_share, rate](double m, double kk, double n) {
        const double flops = 2 * m * kk * n;
        if (flops > 4e9) return flops / rate;
        const auto key = std::make_tuple(static_cast<int64_t>(m), static_cast<int64_t>(kk), static_cast<int64_t>(n));
        if (auto it = cache->find(key); it != cache->end()) return it->second;
        const int old = at::get_num_threads();
        at::set_num_threads(threads);
        // As a Linear runs it: x [m, k] times W [n, k] transposed, on the
        // GEMM library titan's Linear layers use here (ops/gemm).
        const at::Tensor x = at::randn({std::get<0>(key), std::get<1>(key)});
        const at::Tensor w = at::randn({std::get<2>(key), std::get<1>(key)});
        const double s = best_seconds(3, [&] { (void)ops::linear(x, w); }) / time_share;
        at::set_num_threads(old);
        cache->emplace(key, s);
        return s;
      });
  return k;
}

std::string describe(const CpuCalibration& c) {
  return strprintf("%s, %lld cores, %s: GEMM %.1f GFLOP/s on one thread, %.1f on all; copy %.1f GB/s and %.1f; "
                   "attention at %.2f of the GEMM rate; Gloo all-reduce %.2f GB/s, %.0f us",
                   c.cpu_model.c_str(), static_cast<long long>(c.cores), c.date.c_str(), c.gemm_one_thread / 1e9,
                   c.gemm_all_cores / 1e9, c.copy_one_thread / 1e9, c.copy_all_cores / 1e9, c.attention_efficiency,
                   c.gloo_bandwidth / 1e9, c.gloo_latency * 1e6);
}

}  // namespace titan::predict
