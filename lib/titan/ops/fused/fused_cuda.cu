// The fused CUDA kernels' launchers (fused_cuda_launch.hpp); the kernels are
// in fused_cuda_kernels.cuh.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "titan/ops/fused/fused_cuda_launch.hpp"

#define TITAN_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#include "titan/ops/fused/fused_cuda_kernels.cuh"

namespace titan::ops::fused_cuda_detail {
namespace {

using namespace kernels;

const char* launched() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace

const char* kernels_unavailable() {
  cudaFuncAttributes attr;
  const cudaError_t err = cudaFuncGetAttributes(&attr, swiglu_forward_kernel<float>);
  if (err == cudaSuccess) return nullptr;
  cudaGetLastError();  // not sticky: clear it for ATen's next check
  return cudaGetErrorString(err);
}

const char* swiglu_forward(const fused_detail::SwigluForward& a, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (a.bf16) swiglu_forward_kernel<__nv_bfloat16><<<blocks_for(a.n), kThreads, 0, s>>>(a);
  else swiglu_forward_kernel<float><<<blocks_for(a.n), kThreads, 0, s>>>(a);
  return launched();
}

const char* swiglu_backward(const fused_detail::SwigluBackward& a, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (a.bf16) swiglu_backward_kernel<__nv_bfloat16><<<blocks_for(a.n), kThreads, 0, s>>>(a);
  else swiglu_backward_kernel<float><<<blocks_for(a.n), kThreads, 0, s>>>(a);
  return launched();
}

const char* rope(const fused_detail::Rope& a, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const int64_t pairs = a.batch * a.seq * a.heads * a.half;
  if (a.bf16) rope_kernel<__nv_bfloat16><<<blocks_for(pairs), kThreads, 0, s>>>(a);
  else rope_kernel<float><<<blocks_for(pairs), kThreads, 0, s>>>(a);
  return launched();
}

const char* cross_entropy_forward(const fused_detail::CrossEntropyForward& a, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const dim3 grid(static_cast<unsigned>(a.rows));
  const size_t smem = 2 * kThreads * sizeof(float);
  if (a.bf16) cross_entropy_forward_kernel<__nv_bfloat16><<<grid, kThreads, smem, s>>>(a);
  else cross_entropy_forward_kernel<float><<<grid, kThreads, smem, s>>>(a);
  return launched();
}

const char* cross_entropy_backward(const fused_detail::CrossEntropyBackward& a, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const unsigned blocks = blocks_for(a.rows * a.vocab);
  if (a.bf16) cross_entropy_backward_kernel<__nv_bfloat16><<<blocks, kThreads, 0, s>>>(a);
  else cross_entropy_backward_kernel<float><<<blocks, kThreads, 0, s>>>(a);
  return launched();
}

}  // namespace titan::ops::fused_cuda_detail
