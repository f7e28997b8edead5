#include "titan/predict/cluster.hpp"

#include <functional>

#include "titan/config/job_config.hpp"
#include "titan/predict/cpu_calibration.hpp"
#include "titan/util/error.hpp"
#include "titan/util/strprintf.hpp"

namespace titan::predict {
namespace {

constexpr double kTera = 1e12, kGiga = 1e9, kMicro = 1e-6;
// What NCCL's rings reach of a link's nominal rate (docs/predict.md).
constexpr double kLinkShare = 0.8;

// The kernels' fractions of the peaks, calibrated on one H200 (cluster.hpp).
Cluster with_h200_efficiencies(Cluster c) {
  c.matmul_efficiency = 0.875;
  c.attention_efficiency = 0.34;
  c.memory_efficiency = 0.5;
  return c;
}

// Hopper's NVLink 4 (900 GB/s both ways per GPU) with NVLink SHARP, and a
// 400 Gb/s NIC per GPU (ConnectX-7 or the RDMA network of torchtitan's
// benchmarks).
Cluster hopper_node(Cluster c) {
  c.gpus_per_node = 8;
  c.intra_bandwidth = 450 * kGiga * kLinkShare;
  // NVLink SHARP reduces in the switch: each GPU sends and receives its
  // data about once instead of a ring's 2(n−1)/n; modelled as 1.3x the
  // ring's rate (an assumption, overridable).
  c.intra_all_reduce_bandwidth = 1.3 * c.intra_bandwidth;
  c.intra_latency = 2 * kMicro;
  c.inter_bandwidth = 50 * kGiga * kLinkShare;
  c.inter_latency = 6 * kMicro;
  return with_h200_efficiencies(c);
}

Cluster h100_sxm() {
  Cluster c;
  c.accelerator = "NVIDIA H100 SXM 80GB HBM3 (700 W)";
  c.peak_bf16 = 989.4 * kTera, c.peak_fp8 = 1978.9 * kTera, c.peak_fp32 = 66.9 * kTera;
  c.hbm_bandwidth = 3350 * kGiga, c.hbm_capacity_gib = 79.6;
  return hopper_node(c);
}

Cluster h100_hbm2e_500w() {
  Cluster c;
  // torchtitan's benchmarks (benchmarks/llama3_h100_202412_torchtitan.md):
  // "HBM2e-based SXM H100 with lower TDP; the actual peak TFLOPs number is
  // between SXM and NVL". Taken halfway: (989.4 + 835.5) / 2.
  c.accelerator = "NVIDIA H100 96GB HBM2e (500 W, Grand Teton)";
  c.peak_bf16 = 912.5 * kTera, c.peak_fp8 = 1825 * kTera, c.peak_fp32 = 63.5 * kTera;
  c.hbm_bandwidth = 2400 * kGiga, c.hbm_capacity_gib = 95.6;
  c = hopper_node(c);
  // At 500 W the clocks under GEMMs fall below the H200's: the compute
  // efficiencies are calibrated on one published run, Llama 3 8B on 8 GPUs
  // with FSDP, batch 2 x 8,192, per-op SAC, eager (5,762 tokens/s per GPU;
  // docs/predict.md): 0.71 of the H200's. Memory-bound kernels keep theirs.
  c.matmul_efficiency = 0.62;
  c.attention_efficiency = 0.24;
  return c;
}

Cluster h200() {
  Cluster c;
  c.accelerator = "NVIDIA H200 SXM 141GB HBM3e";
  c.peak_bf16 = 989.4 * kTera, c.peak_fp8 = 1978.9 * kTera, c.peak_fp32 = 66.9 * kTera;
  c.hbm_bandwidth = 4800 * kGiga, c.hbm_capacity_gib = 140.4;  // 143,771 MiB as CUDA reports it
  return hopper_node(c);
}

Cluster a100_80g() {
  Cluster c;
  c.accelerator = "NVIDIA A100 SXM 80GB";
  c.peak_bf16 = 312 * kTera, c.peak_fp8 = 0, c.peak_fp32 = 19.5 * kTera;
  c.hbm_bandwidth = 2039 * kGiga, c.hbm_capacity_gib = 80;
  c.gpus_per_node = 8;
  c.intra_bandwidth = 300 * kGiga * kLinkShare;  // NVLink 3: 600 GB/s both ways
  c.intra_all_reduce_bandwidth = c.intra_bandwidth;  // no NVLink SHARP
  c.intra_latency = 2 * kMicro;
  c.inter_bandwidth = 25 * kGiga * kLinkShare;  // 8 x 200 Gb/s HDR InfiniBand per node
  c.inter_latency = 6 * kMicro;
  return with_h200_efficiencies(c);
}

Cluster b200() {
  Cluster c;
  c.accelerator = "NVIDIA B200 180GB HBM3e";
  c.peak_bf16 = 2250 * kTera, c.peak_fp8 = 4500 * kTera, c.peak_fp32 = 75 * kTera;
  c.hbm_bandwidth = 8000 * kGiga, c.hbm_capacity_gib = 179;
  c = hopper_node(c);
  c.intra_bandwidth = 900 * kGiga * kLinkShare;  // NVLink 5: 1.8 TB/s both ways
  c.intra_all_reduce_bandwidth = 1.3 * c.intra_bandwidth;
  return c;
}

struct Preset {
  const char* name;
  Cluster (*make)();
};

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = {{"h100_sxm", h100_sxm},
                                          {"h100_hbm2e_500w", h100_hbm2e_500w},
                                          {"h200", h200},
                                          {"a100_80g", a100_80g},
                                          {"b200", b200}};
  return all;
}

}  // namespace

std::string Cluster::describe() const {
  if (preset == "cpu")
    return strprintf("%s: per rank %.1f GFLOP/s fp32, %.1f GB/s, %.1f GiB; Gloo %.2f GB/s, %.0f us per collective",
                     accelerator.c_str(), peak_fp32 / kGiga, hbm_bandwidth / kGiga, hbm_capacity_gib,
                     intra_bandwidth / kGiga, intra_latency / kMicro);
  return strprintf("%s, %lld per node, %.0f TFLOP/s bf16, %.0f GB/s HBM, %.0f GiB; links %.0f GB/s in a node, %.0f GB/s "
                   "across nodes (per GPU, each way)",
                   accelerator.c_str(), static_cast<long long>(gpus_per_node), peak_bf16 / kTera,
                   hbm_bandwidth / kGiga, hbm_capacity_gib, intra_bandwidth / kGiga, inter_bandwidth / kGiga);
}

const std::vector<std::string>& cluster_presets() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Preset& p : presets()) out.push_back(p.name);
    return out;
  }();
  return names;
}

Cluster cluster_preset(const std::string& name) {
  for (const Preset& p : presets())
    if (name == p.name) {
      Cluster c = p.make();
      c.preset = name;
      return c;
    }
  std::string known;
  for (const std::string& n : cluster_presets()) known += (known.empty() ? "" : ", ") + n;
  throw Error("[cluster] preset = \"" + name + "\" is not a preset (known: " + known + ")");
}

Cluster cluster_of(const config::JobConfig& cfg, int64_t ranks) {
  const config::ClusterSection& k = cfg.cluster;
  Cluster c = k.preset == "cpu" ? cpu_cluster(load_cpu_calibration(), ranks) : cluster_preset(k.preset);
  // Each key, when set, replaces the preset's value (in the key's unit).
  auto take = [&](const char* key, double given, double unit, double& into) {
    if (given <= 0) return;
    into = given * unit;
    c.overridden.push_back(strprintf("[cluster] %s = %g", key, given));
  };
  take("peak_bf16_tflops", k.peak_bf16_tflops, kTera, c.peak_bf16);
  take("peak_fp8_tflops", k.peak_fp8_tflops, kTera, c.peak_fp8);
  take("peak_fp32_tflops", k.peak_fp32_tflops, kTera, c.peak_fp32);
  take("hbm_bandwidth_gbps", k.hbm_bandwidth_gbps, kGiga, c.hbm_bandwidth);
  take("hbm_capacity_gib", k.hbm_capacity_gib, 1, c.hbm_capacity_gib);
  double gpus = static_cast<double>(c.gpus_per_node);
  take("gpus_per_node", static_cast<double>(k.gpus_per_node), 1, gpus);
  c.gpus_per_node = static_cast<int64_t>(gpus);
  take("intra_node_bandwidth_gbps", k.intra_node_bandwidth_gbps, kGiga, c.intra_bandwidth);
  take("intra_node_all_reduce_bandwidth_gbps", k.intra_node_all_reduce_bandwidth_gbps, kGiga,
       c.intra_all_reduce_bandwidth);
  take("intra_node_latency_us", k.intra_node_latency_us, kMicro, c.intra_latency);
  take("inter_node_bandwidth_gbps", k.inter_node_bandwidth_gbps, kGiga, c.inter_bandwidth);
  take("inter_node_latency_us", k.inter_node_latency_us, kMicro, c.inter_latency);
  take("matmul_efficiency", k.matmul_efficiency, 1, c.matmul_efficiency);
  take("attention_efficiency", k.attention_efficiency, 1, c.attention_efficiency);
  take("memory_efficiency", k.memory_efficiency, 1, c.memory_efficiency);
  return c;
}

}  // namespace titan::predict
