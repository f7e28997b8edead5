#pragma once
/// @file
/// @brief fp32 GEMM through oneDNN's matmul primitive, loaded at run time
/// from titan's oneDNN plugin (libtitan_onednn.so, beside libtitan.so).
///
/// Why a second GEMM on the CPU: LibTorch's fp32 aten::mm calls MKL's
/// sgemm, and MKL picks its kernels by CPU vendor: on AMD CPUs with
/// AVX-512 it runs its AVX2 path. oneDNN picks by instruction set, so the
/// same machine's AVX-512 units do the work (about 2x on the debug
/// model's GEMMs on a 2-core AMD EPYC, 1.8x its training step;
/// docs/train.md, "Against eager PyTorch"). LibTorch's wheel keeps its own oneDNN's symbols hidden, so
/// the plugin links the system's libdnnl (Debian's libdnnl-dev) and is
/// compiled without LibTorch's include directories: the wheel ships oneDNN
/// headers of another version under the same names. libtitan itself does
/// not link oneDNN: a machine without it (a GPU node the build was carried
/// to) runs ATen's GEMM, and available() says why.

#include <cstdint>
#include <string>

namespace titan::ops::onednn {

/// @brief A matrix operand: `data` with element (i, j) at
/// data[i·row_stride + j·col_stride]. A transposed view is the same data
/// with the strides swapped, so C = Aᵀ·B costs no copy.
struct Matrix {
  const float* data;
  int64_t rows, cols, row_stride, col_stride;
};

/// @brief True when the oneDNN plugin was built and loads.
bool available();
/// @brief Why available() is false ("" when it is true).
std::string unavailable_reason();

/// @brief C = A·B in fp32 (A [M, K], B [K, N]; C [M, N] row-major with
/// leading dimension `ldc`), computed by oneDNN with the calling thread's
/// OpenMP thread count. Primitives are made once per shape and layout and
/// kept. Throws titan::Error when oneDNN is not available or refuses the
/// operands (the message names their shapes and strides).
void sgemm(const Matrix& a, const Matrix& b, float* c, int64_t ldc);

/// @brief The oneDNN implementation that runs C = A·B for these layouts
/// ("brg:avx512_core", "gemm:jit", ...): what a benchmark names, and what a
/// test checks is not the reference fallback.
std::string implementation(const Matrix& a, const Matrix& b, int64_t ldc);

}  // namespace titan::ops::onednn
