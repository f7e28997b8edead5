#pragma once
/// @file
/// @brief The `cpu` cluster: this machine as `titan predict` models it,
/// from what `titan predict --calibrate` measured here and cached — a GEMM's
/// FLOP/s and a copy's bytes/s on one thread and on every core, flash
/// attention's fraction of the GEMM rate, and Gloo's all-reduce between two
/// ranks over loopback (bandwidth and latency). The ranks of a CPU job
/// share the node's cores: each runs at the rate of its share of them, and
/// each GEMM shape a job runs is timed here when the job is predicted.

#include <cstdint>
#include <string>

#include "titan/predict/cluster.hpp"

namespace titan::dist {
class World;
}

namespace titan::predict {

/// @brief What --calibrate measured on this machine.
struct CpuCalibration {
  std::string cpu_model;  ///< /proc/cpuinfo's model name
  int64_t cores = 1;      ///< online cores
  std::string date;       ///< when it was measured, UTC, "2026-12-08"
  double gemm_one_thread = 0, gemm_all_cores = 0;  ///< fp32 FLOP/s of a 1024^3 GEMM
  double copy_one_thread = 0, copy_all_cores = 0;  ///< bytes/s a large copy reads and writes
  double attention_efficiency = 0;  ///< causal SDPA forward + backward, of gemm_all_cores
  double gloo_bandwidth = 0;        ///< bytes/s on the ring formula's wire bytes, 2 ranks
  double gloo_latency = 0;          ///< seconds of a small all-reduce between 2 ranks
};

/// @brief The cache file: TITAN_PREDICT_CPU_CACHE, else beside the CPU
/// peak's cache (~/.cache/titan/predict_cpu.json).
std::string cpu_calibration_path();

/// @brief Measures the compute side on this process (GEMM, copy, attention).
CpuCalibration measure_cpu_compute();

/// @brief Measures Gloo's all-reduce on `world` (every rank calls it) into
/// `into` (meaningful on rank 0).
void measure_gloo(const dist::World& world, CpuCalibration& into);

/// @brief Writes `c` to cpu_calibration_path(). Throws a one-line
/// titan::Error when it cannot.
void save_cpu_calibration(const CpuCalibration& c);

/// @brief The cached calibration of this machine. Throws a one-line
/// titan::Error when there is none, it is of another CPU, or unreadable,
/// saying how to make one ("titan predict --calibrate").
CpuCalibration load_cpu_calibration();

/// @brief This machine as a cluster of one node running `ranks` ranks:
/// each rank's GEMM and copy rates are its share of the cores (one
/// thread's rate times cores / ranks, at most the all-core rate for one
/// rank), its links Gloo's loopback.
Cluster cpu_cluster(const CpuCalibration& c, int64_t ranks);

/// @brief One line of what was measured, for --calibrate's output.
std::string describe(const CpuCalibration& c);

}  // namespace titan::predict
