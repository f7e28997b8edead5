// cuda_kernels.hpp: asks the CUDA runtime, once per device, whether the
// binary's kernels load there (the launchers' checks in fused_cuda.cu and
// flash_cuda.cu), and caches the answer.
#include "titan/ops/cuda_kernels.hpp"

#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <tuple>

#include "titan/ops/attention/flash_cuda_launch.hpp"
#include "titan/ops/fused/fused_cuda_launch.hpp"
#include "titan/util/strprintf.hpp"

#ifndef TITAN_CUDA_ARCHS
#define TITAN_CUDA_ARCHS "unknown"
#endif

namespace titan::ops {
namespace {

std::string device_label(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return strprintf("GPU %d", device);
  }
  return strprintf("%s (sm_%d%d)", prop.name, prop.major, prop.minor);
}

}  // namespace

const char* cuda_architectures_built() { return TITAN_CUDA_ARCHS; }

const std::string& fused_cuda_unavailable(int device) {
  static std::mutex mutex;
  static std::map<int, std::string> answers;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = answers.find(device);
  if (it != answers.end()) return it->second;
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  const char* why = fused_cuda_detail::kernels_unavailable();
  std::string answer = why == nullptr ? std::string()
                                      : strprintf("%s: %s (titan's CUDA code is built for %s)",
                                                  device_label(device).c_str(), why, cuda_architectures_built());
  return answers.emplace(device, std::move(answer)).first->second;
}

std::string flash_cuda_unavailable(int device, int64_t head_dim, bool bf16) {
  if (!flash_cuda_detail::head_dim_supported(head_dim))
    return strprintf("the flash kernel has no head_dim %lld (16, 32, 64 or 128)", static_cast<long long>(head_dim));
  static std::mutex mutex;
  static std::map<std::tuple<int, int64_t, bool>, std::string> answers;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(device, head_dim, bf16);
  auto it = answers.find(key);
  if (it != answers.end()) return it->second;
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  const char* why = flash_cuda_detail::kernels_unavailable(
      device, head_dim, bf16 ? flash_cuda_detail::Dtype::bf16 : flash_cuda_detail::Dtype::fp16);
  std::string answer = why == nullptr ? std::string()
                                      : strprintf("%s: %s (titan's CUDA code is built for %s)",
                                                  device_label(device).c_str(), why, cuda_architectures_built());
  return answers.emplace(key, std::move(answer)).first->second;
}

std::string describe_cuda_kernels(int device, int64_t head_dim, bool fused_kernels, bool flash_attention) {
  std::string line;
  if (fused_kernels && !fused_cuda_unavailable(device).empty())
    line += "titan's fused kernels step aside for ATen's ops: " + fused_cuda_unavailable(device);
  if (flash_attention) {
    const std::string flash = flash_cuda_unavailable(device, head_dim, /*bf16=*/true);
    if (!flash.empty()) line += (line.empty() ? "" : "; ") + std::string("flash attention runs as SDPA: ") + flash;
  }
  return line;
}

}  // namespace titan::ops
