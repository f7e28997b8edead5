#include "titan/metrics/peak_flops.hpp"

#include <algorithm>
#include <cctype>

namespace titan::metrics {

namespace {

// One row per product; `pattern` is matched as a case-insensitive substring
// of the CUDA device name, first match wins, so specific rows come first
// ("H100 NVL" before "H100", "GB200" before "B200"). NVIDIA quotes tensor-
// core figures "with sparsity" (2:4 structured sparsity doubles them); the
// values here are the dense ones, i.e. half the headline number.
struct Row {
  const char* pattern;
  const char* name;
  double bf16;  // dense BF16/FP16 tensor core
  double tf32;  // dense TF32 tensor core
  double fp32;  // FP32 without tensor cores
};

// Sources (NVIDIA datasheets; per GPU):
// - GB200: GB200 NVL72 datasheet, https://www.nvidia.com/en-us/data-center/gb200-nvl72/
//   (per superchip of 2 GPUs: BF16 10 PF, TF32 5 PF sparse; FP32 160 TF).
// - B200: HGX B200 datasheet (8 GPUs: BF16 36 PF and TF32 18 PF sparse, FP32 600 TF),
//   https://www.nvidia.com/en-us/data-center/hgx/ ; torchtitan uses 2.25e15
//   citing https://nvdam.widen.net/s/wwnsxrhm2w/blackwell-datasheet-3384703.
// - H200 SXM and NVL: https://www.nvidia.com/en-us/data-center/h200/
//   (SXM BF16 1,979 / TF32 989 TF sparse, FP32 67 TF; NVL 1,671 / 835, 60 TF).
//   GH200 has the same Hopper GPU as H100/H200 SXM.
// - H100 SXM, PCIe, NVL: https://www.nvidia.com/en-us/data-center/h100/
//   (SXM 1,979 / 989 sparse, 67 TF; PCIe 1,513 / 756, 51 TF; NVL 1,671 / 835, 60 TF).
//   CUDA names the SXM part "NVIDIA H100 80GB HBM3", hence the plain "H100" row.
//   H800 (SXM and PCIe) is the H100 chip with less NVLink bandwidth, the same
//   tensor-core rates; torchtitan's get_peak_flops takes it as H100 too.
// - A100 (SXM and PCIe alike): https://www.nvidia.com/en-us/data-center/a100/
//   (BF16 312 dense / 624 sparse, TF32 156 / 312, FP32 19.5 TF). A800 is the same chip.
// - L40S: https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413
//   (BF16 362.05 / 733, TF32 183 / 366, FP32 91.6 TF).
const Row kRows[] = {
    {"GB200", "GB200", 2.5e15, 1.25e15, 80e12},
    {"B200", "B200", 2.25e15, 1.125e15, 75e12},
    {"H200 NVL", "H200 NVL", 835e12, 417.5e12, 60e12},
    {"H200", "H200 SXM", 989e12, 494.5e12, 67e12},  // also matches GH200
    {"H100 NVL", "H100 NVL", 835e12, 417.5e12, 60e12},
    {"H100 PCIe", "H100 PCIe", 756e12, 378e12, 51e12},
    {"H100", "H100 SXM", 989e12, 494.5e12, 67e12},
    {"H800 PCIe", "H800 PCIe", 756e12, 378e12, 51e12},
    {"H800", "H800 SXM", 989e12, 494.5e12, 67e12},
    {"A100", "A100", 312e12, 156e12, 19.5e12},
    {"A800", "A100", 312e12, 156e12, 19.5e12},
    {"L40S", "L40S", 362e12, 183e12, 91.6e12},
};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

PeakFlops from_row(const Row& r, at::ScalarType dtype, bool tf32) {
  PeakFlops p;
  p.matched = r.name;
  // fp8 and other low-precision runs are still measured against the bf16
  // peak, as torchtitan does: MFU stays comparable across float8 on/off.
  if (dtype != at::kFloat && dtype != at::kDouble) {
    p.flops = r.bf16;
    p.precision = "bf16 dense tensor core";
  } else if (tf32 && dtype == at::kFloat) {
    p.flops = r.tf32;
    p.precision = "tf32 dense tensor core";
  } else {
    p.flops = r.fp32;
    p.precision = "fp32 (no tensor cores)";
  }
  return p;
}

}  // namespace

PeakFlops peak_flops_for_device(const std::string& device_name, at::ScalarType dtype, bool tf32) {
  const std::string name = lower(device_name);
  for (const Row& r : kRows) {
    if (name.find(lower(r.pattern)) != std::string::npos) return from_row(r, dtype, tf32);
  }
  // torchtitan's fallback: A100.
  const Row* a100 = nullptr;
  for (const Row& r : kRows)
    if (std::string(r.pattern) == "A100") a100 = &r;
  PeakFlops p = from_row(*a100, dtype, tf32);
  p.known = false;
  p.warning = "peak FLOPs unknown for device '" + device_name + "'; using A100's (" +
              std::to_string(p.flops / 1e12) + " TFLOPs, " + p.precision +
              "): MFU is only indicative";
  return p;
}

at::ScalarType compute_dtype_for_peak(bool mixed_precision, const std::string& mixed_precision_param) {
  if (!mixed_precision) return at::kFloat;
  if (mixed_precision_param == "bfloat16") return at::kBFloat16;
  if (mixed_precision_param == "float16") return at::kHalf;
  return at::kFloat;
}

}  // namespace titan::metrics
