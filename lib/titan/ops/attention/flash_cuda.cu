// The CUDA flash-attention kernels' launchers (flash_cuda_launch.hpp); the
// kernels are in flash_cuda_kernels.cuh, which describes the algorithm.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

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
const char* dispatch(const Args& a, Dtype dtype, void* stream) {
  const bool bf16 = dtype == Dtype::bf16;
  switch (a.p.d) {
    case 16: return bf16 ? Fn<__nv_bfloat16, 16>::run(a, stream) : Fn<__half, 16>::run(a, stream);
    case 32: return bf16 ? Fn<__nv_bfloat16, 32>::run(a, stream) : Fn<__half, 32>::run(a, stream);
    case 64: return bf16 ? Fn<__nv_bfloat16, 64>::run(a, stream) : Fn<__half, 64>::run(a, stream);
    case 128: return bf16 ? Fn<__nv_bfloat16, 128>::run(a, stream) : Fn<__half, 128>::run(a, stream);
    default: return "flash_attention (CUDA): head_dim must be 16, 32, 64 or 128";
  }
}

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
  return dispatch<Forward>(a, dtype, stream);
}

const char* launch_backward(const BackwardArgs& a, Dtype dtype, void* stream) {
  return dispatch<Backward>(a, dtype, stream);
}

}  // namespace titan::ops::flash_cuda_detail
