#include "titan/ops/attention/tile_gemm.hpp"

#include <ATen/ATen.h>


// LibTorch's CPU library links MKL statically and exports its BLAS symbols.
// Declared weak: where a build of LibTorch does not export them, the
// address is null and the tiles go through at::addmm_out instead.
extern "C" {
void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const float* alpha,
            const float* a, const int* lda, const float* b, const int* ldb, const float* beta, float* c,
            const int* ldc) __attribute__((weak));
int MKL_Set_Num_Threads_Local(int n) __attribute__((weak));
}

namespace titan::ops {
namespace {

// A row-major tile as a strided tensor view (no copy).
at::Tensor view(const void* p, bool trans, int64_t rows, int64_t cols, int64_t ld, at::ScalarType t) {
  // op(X) is rows×cols; the stored matrix is cols×rows when transposed.
  at::Tensor x = trans ? at::from_blob(const_cast<void*>(p), {cols, rows}, {ld, 1}, at::TensorOptions(t)).t()
                       : at::from_blob(const_cast<void*>(p), {rows, cols}, {ld, 1}, at::TensorOptions(t));
  return x;
}

void aten_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void* a, int64_t lda,
               const void* b, int64_t ldb, float beta, float* c, int64_t ldc, at::ScalarType t) {
  at::Tensor cv = at::from_blob(c, {m, n}, {ldc, 1}, at::kFloat);
  const at::Tensor av = view(a, ta, m, k, lda, t), bv = view(b, tb, k, n, ldb, t);
  if (beta == 0.0f) {
    at::mm_out(cv, av, bv);
    if (alpha != 1.0f) cv.mul_(alpha);
  } else {
    at::addmm_out(cv, cv, av, bv, beta, alpha);
  }
}

}  // namespace

SingleThreadedBlas::SingleThreadedBlas() {
  if (MKL_Set_Num_Threads_Local != nullptr) previous_ = MKL_Set_Num_Threads_Local(1);
}

// 0 restores "follow the global setting", which is what a thread had before.
SingleThreadedBlas::~SingleThreadedBlas() {
  if (MKL_Set_Num_Threads_Local != nullptr) MKL_Set_Num_Threads_Local(previous_);
}

bool tile_blas_available() { return sgemm_ != nullptr; }

void tile_gemm(TileGemm engine, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (engine == TileGemm::blas && sgemm_ != nullptr) {
    // Fortran BLAS is column-major: a row-major X is a column-major Xᵀ, so
    // C = op(A)·op(B) is computed as Cᵀ = op(B)ᵀ·op(A)ᵀ with the operands swapped.
    const int mi = static_cast<int>(n), ni = static_cast<int>(m), ki = static_cast<int>(k);
    const int la = static_cast<int>(ldb), lb = static_cast<int>(lda), lc = static_cast<int>(ldc);
    const char opa = tb ? 'T' : 'N', opb = ta ? 'T' : 'N';
    sgemm_(&opa, &opb, &mi, &ni, &ki, &alpha, b, &la, a, &lb, &beta, c, &lc);
    return;
  }
  aten_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, at::kFloat);
}

}  // namespace titan::ops
