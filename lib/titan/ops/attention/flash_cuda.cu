// The CUDA flash-attention kernels' launchers (flash_cuda_launch.hpp); the
// kernels are in flash_cuda_kernels.cuh, which describes the algorithm.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <cstdio>

#include "titan/ops/attention/flash_cuda_launch.hpp"

#define TITAN_DYNAMIC_SMEM(name) extern __shared__ __align__(128) unsigned char name[]
#include "titan/ops/attention/flash_cuda_kernels.cuh"

namespace titan::ops::flash_cuda_detail {
namespace {

using flash_detail::BackwardArgs;
using flash_detail::ForwardArgs;
using namespace kernels;

template <typename Kernel, typename Args>
const char* launch(Kernel kernel, size_t smem, dim3 grid, void* stream, const Args& args) {
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (err != cudaSuccess) return cudaGetErrorString(err);
  kernel<<<grid, kThreads, smem, static_cast<cudaStream_t>(stream)>>>(args);
  err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

template <typename T, int D>
const char* forward_for(const ForwardArgs& a, void* stream) {
  const dim3 grid(static_cast<unsigned>((a.p.sq + kRows - 1) / kRows), static_cast<unsigned>(a.p.batch * a.p.hq));
  return launch(forward_kernel<T, D>, forward_smem_bytes<T, D>(), grid, stream, a);
}

template <typename T, int D>
const char* backward_for(const BackwardArgs& a, void* stream) {
  const dim3 grid(static_cast<unsigned>((a.p.sk + kCols - 1) / kCols), static_cast<unsigned>(a.p.batch * a.p.hkv));
  return launch(backward_kernel<T, D>, backward_smem_bytes<T, D>(), grid, stream, a);
}

// The (dtype, head dim) instantiations, chosen at run time.
template <template <typename, int> class Fn, typename Args>
const char* dispatch(const Args& a, int64_t head_dim, Dtype dtype, void* stream) {
  const bool bf16 = dtype == Dtype::bf16;
  switch (head_dim) {
    case 16: return bf16 ? Fn<__nv_bfloat16, 16>::run(a, stream) : Fn<__half, 16>::run(a, stream);
    case 32: return bf16 ? Fn<__nv_bfloat16, 32>::run(a, stream) : Fn<__half, 32>::run(a, stream);
    case 64: return bf16 ? Fn<__nv_bfloat16, 64>::run(a, stream) : Fn<__half, 64>::run(a, stream);
    case 128: return bf16 ? Fn<__nv_bfloat16, 128>::run(a, stream) : Fn<__half, 128>::run(a, stream);
    default: return "flash_attention (CUDA): head_dim must be 16, 32, 64 or 128";
  }
}

// Whether this GPU runs the kernels of (T, D): the binary holds an image
// for its architecture (or PTX it can compile), and it offers the dynamic
// shared memory the two kernels ask for (D = 128's backward asks for more
// than sm_80's 163 KiB and sm_86/89's 99 KiB; sm_90 has 227 KiB).
template <typename T, int D>
struct Check {
  static const char* run(const int& device, void*) {
    cudaFuncAttributes attr;
    cudaError_t err = cudaFuncGetAttributes(&attr, forward_kernel<T, D>);
    if (err == cudaSuccess) err = cudaFuncGetAttributes(&attr, backward_kernel<T, D>);
    if (err != cudaSuccess) {
      cudaGetLastError();  // not sticky: clear it for ATen's next check
      return cudaGetErrorString(err);
    }
    int optin = 0;
    err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return cudaGetErrorString(err);
    }
    const size_t need = std::max(forward_smem_bytes<T, D>(), backward_smem_bytes<T, D>());
    if (need > static_cast<size_t>(optin)) {
      thread_local char message[160];
      std::snprintf(message, sizeof message,
                    "its head_dim %d kernels need %zu KiB of shared memory per block, this GPU offers %d KiB", D,
                    need / 1024, optin / 1024);
      return message;
    }
    return nullptr;
  }
};

template <typename T, int D>
struct Forward {
  static const char* run(const ForwardArgs& a, void* stream) { return forward_for<T, D>(a, stream); }
};
template <typename T, int D>
struct Backward {
  static const char* run(const BackwardArgs& a, void* stream) { return backward_for<T, D>(a, stream); }
};

}  // namespace

bool head_dim_supported(int64_t d) { return d == 16 || d == 32 || d == 64 || d == 128; }

const char* launch_forward(const ForwardArgs& a, Dtype dtype, void* stream) {
  return dispatch<Forward>(a, a.p.d, dtype, stream);
}

const char* launch_backward(const BackwardArgs& a, Dtype dtype, void* stream) {
  return dispatch<Backward>(a, a.p.d, dtype, stream);
}

const char* kernels_unavailable(int device, int64_t head_dim, Dtype dtype) {
  return dispatch<Check>(device, head_dim, dtype, nullptr);
}

}  // namespace titan::ops::flash_cuda_detail
