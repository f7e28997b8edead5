// cuda_kernels.hpp: asks, once per device and kernel family, whether the
// binary's kernels load there (the callers hand in their launchers' checks,
// fused_cuda.cu's and flash_cuda.cu's), and caches the answer.
#include "titan/ops/cuda_kernels.hpp"

#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <utility>

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

std::string cuda_kernels_unavailable(int device, const std::string& family, const std::function<const char*()>& ask) {
  static std::mutex mutex;
  static std::map<std::pair<int, std::string>, std::string> answers;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(device, family);
  auto it = answers.find(key);
  if (it != answers.end()) return it->second;
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  const char* why = ask();
  std::string answer = why == nullptr ? std::string()
                                      : strprintf("%s: %s (titan's CUDA code is built for %s)",
                                                  device_label(device).c_str(), why, cuda_architectures_built());
  return answers.emplace(key, std::move(answer)).first->second;
}

}  // namespace titan::ops
