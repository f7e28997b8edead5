#pragma once
/// @file
/// @brief The machines `titan predict` models a job on: one accelerator's
/// peaks and memory, how many share a node, the links between them, and
/// the fractions of each peak real kernels reach. A preset by name
/// ([cluster] preset), each value replaceable by its [cluster] key.
///
/// Peaks are NVIDIA's dense (no 2:4 sparsity) datasheet figures. Link
/// bandwidths are per GPU and each way, at 80 % of the nominal rate (what
/// NCCL's ring reaches on them is about that; docs/predict.md). The
/// efficiencies are calibrated on one H200 (docs/gpu.md, 2026-12-04) and
/// assumed alike on the other Hopper and Blackwell parts:
/// - matmul 0.875: the Llama 3 8B-shaped step's GEMMs (dim 4,096, 8,192
///   tokens) took 62.9 % of 163 ms of kernel time with attention, against
///   the FLOPs they execute;
/// - attention 0.34: cuDNN's causal flash attention, forward and backward,
///   at 338 TFLOP/s of the 989 TFLOP/s bf16 peak (4,096 tokens, d 128);
/// - memory 0.5: the fused AdamW and clipping kernels moved the 40 bytes
///   per parameter of a step at 2.3 TB/s of the 4.8 TB/s peak.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace titan::config {
struct JobConfig;
}

namespace titan::predict {

/// @brief One cluster's numbers, in SI units (FLOP/s, bytes/s, seconds).
struct Cluster {
  std::string preset;             ///< the [cluster] preset it started from
  std::string accelerator;        ///< "NVIDIA H100 SXM 80GB", ...
  double peak_bf16 = 0;           ///< dense bf16 FLOP/s per GPU
  double peak_fp8 = 0;            ///< dense float8 FLOP/s per GPU (0: none)
  double peak_fp32 = 0;           ///< fp32 FLOP/s per GPU without tensor cores
  double hbm_bandwidth = 0;       ///< bytes/s per GPU
  double hbm_capacity_gib = 0;    ///< GiB per GPU
  int64_t gpus_per_node = 8;
  double intra_bandwidth = 0;     ///< bytes/s per GPU each way inside a node
  double intra_all_reduce_bandwidth = 0;  ///< an all-reduce inside a node (NVLink SHARP where there is one)
  double intra_latency = 0;       ///< seconds per ring step inside a node
  double inter_bandwidth = 0;     ///< bytes/s per GPU each way across nodes
  double inter_latency = 0;       ///< seconds per ring step across nodes
  double matmul_efficiency = 0;   ///< fraction of the peak a large GEMM reaches
  double attention_efficiency = 0;  ///< fraction of the peak flash attention reaches on the FLOPs it runs
  double memory_efficiency = 0;   ///< fraction of hbm_bandwidth elementwise kernels reach
  /// Collectives run beside the compute (a GPU's copy engines and NCCL's
  /// SMs); false on CPUs, where Gloo's threads take the compute's cores.
  bool overlaps_communication = true;
  /// Seconds of one GEMM [m, k] x [k, n] as measured on this machine (the
  /// cpu preset times each shape a job runs, once); empty: the roofline of
  /// the peaks and efficiencies above.
  std::shared_ptr<std::function<double(double m, double k, double n)>> measured_gemm;
  std::vector<std::string> overridden;  ///< "[cluster] gpus_per_node = 4", each key the config set

  /// @brief "NVIDIA H100 SXM 80GB, 8 per node, 989 TFLOP/s bf16, NVLink 360 GB/s, 40 GB/s across nodes".
  std::string describe() const;
};

/// @brief The preset names, in the order `titan predict --help` lists them.
const std::vector<std::string>& cluster_presets();

/// @brief The preset `name`. Throws a one-line titan::Error naming the
/// presets for an unknown one.
Cluster cluster_preset(const std::string& name);

/// @brief [cluster] of `cfg` for a job of `ranks`: its preset with every
/// non-zero key in place of the preset's value. The preset "cpu" is this
/// machine as calibrated (cpu_calibration.hpp), its `ranks` sharing it.
Cluster cluster_of(const config::JobConfig& cfg, int64_t ranks = 1);

}  // namespace titan::predict
