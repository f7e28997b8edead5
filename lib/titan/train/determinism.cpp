#include "titan/train/determinism.hpp"

#include <ATen/Context.h>
#include <torch/utils.h>

#include <cstdlib>

namespace titan::train {

void use_full_fp32_matmuls() {
  // TF32 keeps 10 of fp32's 23 mantissa bits in cuBLAS's and cuDNN's fp32
  // GEMMs: ~1e-3 relative, where fp32 runs agree to ~1e-7. torch leaves it
  // off for matmuls unless TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1, on for cuDNN.
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
}

void set_determinism(int64_t seed, bool deterministic, bool warn_only, const c10::Device& device) {
  // torch::manual_seed seeds the CPU generator and every CUDA one.
  torch::manual_seed(static_cast<uint64_t>(seed));
  if (!deterministic) return;
  if (device.is_cuda()) {
    // cuBLAS picks reduction orders per workspace; a fixed workspace makes
    // its GEMMs repeatable (required by torch's deterministic mode). Must be
    // set before the first cuBLAS handle is created, i.e. before any matmul.
    ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  }
  use_full_fp32_matmuls();
  at::globalContext().setDeterministicAlgorithms(true, warn_only);
  at::globalContext().setBenchmarkCuDNN(false);
  at::globalContext().setDeterministicCuDNN(true);
}

}  // namespace titan::train
