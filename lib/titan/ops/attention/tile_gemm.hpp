#pragma once
/// @file
/// @brief Row-major GEMM on small tiles for the CPU flash-attention kernel:
/// C = alpha · op(A) · op(B) + beta · C in fp32 (the kernel widens bf16
/// tiles to fp32 once per tile before multiplying them).
///
/// Two engines, so the choice is measured rather than assumed
/// (bench/attention): the BLAS that LibTorch's CPU library already carries
/// (MKL's sgemm_, looked up as a weak symbol, so a LibTorch without it
/// still links and falls back), and at::addmm_out on views of the tile (one
/// dispatcher call per tile).

#include <cstdint>

namespace titan::ops {

/// @brief Which engine multiplies the tiles.
enum class TileGemm {
  blas,  ///< MKL through LibTorch's own exported symbols (at::addmm_out when absent)
  aten,  ///< at::addmm_out on tensor views of the tile
};

/// @brief While alive, BLAS calls on this thread run single-threaded.
///
/// The tile products already run inside at::parallel_for; MKL would
/// otherwise start its own thread team inside every call of every worker
/// (measured: 3 s instead of 41 ms for a causal fwd+bwd at seq 1024 on 2
/// cores). Uses MKL's per-thread setting, so nothing else changes.
class SingleThreadedBlas {
 public:
  SingleThreadedBlas();
  ~SingleThreadedBlas();
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;

 private:
  int previous_ = 0;
};

/// @brief True when LibTorch exports the BLAS entry point (sgemm_) the
/// `blas` engine uses.
bool tile_blas_available();

/// @brief C[m×n] = alpha · op(A) · op(B) + beta · C, all row-major with
/// leading dimensions lda/ldb/ldc; op(X) = Xᵀ when the flag is set.
void tile_gemm(TileGemm engine, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace titan::ops
