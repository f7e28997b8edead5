#pragma once
// The CUDA flash-attention kernels' device code, included by flash_cuda.cu
// (with CUDA's headers) and by tests/attention/test_flash_cuda_emulated.cpp
// (with tests/attention/cuda_emulation.hpp, which runs it on CPU threads).
// So this file names only what both provide: __global__/__device__, the
// thread indices, __syncthreads/__syncwarp, __shfl_xor_sync, atomicAdd,
// nvcuda::wmma, __nv_bfloat16/__half and their conversions, and
// TITAN_DYNAMIC_SMEM(name), the block's dynamic shared memory.
//
// The kernels: FlashAttention-2's arrangement (Dao 2023,
// arXiv:2307.08691) on the tensor cores through WMMA (16×16×16 bf16/fp16
// products, fp32 accumulation). The algorithm is the CPU kernel's
// (flash_cpu_kernel.hpp); docs/attention.md describes both.
//
// Forward: one thread block per (64-row query tile, batch × query head),
// four warps of 16 query rows each. K/V tiles of 64 rows pass through shared
// memory; each warp computes its 16×64 score block S = Q Kᵀ, updates its
// rows' running max m and normaliser l (two lanes per row), writes
// P = exp(S − m) in bf16/fp16 and adds P V into an fp32 accumulator held in
// shared memory (WMMA's register layout is opaque, so the per-row rescale is
// done there). At the end O /= l and L = m + log l is saved per row.
//
// Backward: one block per (64-row key tile, batch × kv head), holding K, V
// and fp32 dK, dV for its tile while it walks every query head of the kv
// head's group and every query tile that can see the key tile. Per query
// tile: S and dP = dO Vᵀ per warp, P = exp(S − L), dS = P ∘ (dP − D) · scale,
// then dV += Pᵀ dO and dK += dSᵀ Q (warp w owns key rows 16w..16w+15), and
// dQ += dS K, added atomically to an fp32 buffer. No atomics on dK/dV:
// a key tile belongs to one block (summing over the query heads of a GQA
// group inside it).
//
// Masks, in both passes: key j < sk; causal j <= i; block-causal (document)
// j >= doc_start[i]. Key tiles no row of a query tile can see are not
// visited (forward), nor query tiles that cannot see a key tile (backward).

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "titan/ops/attention/flash_cpu_args.hpp"

namespace titan::ops::flash_cuda_detail::kernels {

using flash_detail::BackwardArgs;
using flash_detail::ForwardArgs;
using flash_detail::Problem;
namespace wmma = nvcuda::wmma;

constexpr int kRows = 64;     // query rows per tile (forward) and per query tile (backward)
constexpr int kCols = 64;     // key rows per tile
constexpr int kWarps = 4;     // 16 query rows (forward) / 16 key rows (backward) each
constexpr int kThreads = 32 * kWarps;
constexpr int kLdS = kCols + 4;  // fp32 score rows; the padding spreads rows over the banks
constexpr int kLdP = kCols + 8;  // bf16/fp16 probability rows
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int D>
constexpr int ld_tile() {
  return D + 8;  // bf16/fp16 Q/K/V/dO rows (a multiple of 8, as WMMA needs)
}
template <int D>
constexpr int ld_acc() {
  return D + 4;  // fp32 accumulator rows (a multiple of 4)
}

template <typename T>
__device__ inline T from_float(float x);
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}
template <>
__device__ inline __half from_float<__half>(float x) {
  return __float2half(x);
}

// Copies rows [row0, row0 + rows) of a [seq, D] matrix (row stride in
// elements) into shared memory, 16 bytes per thread and step; rows past
// `seq` are zeros (so masked products never meet uninitialised values).
template <typename T, int D>
__device__ void load_rows(T* dst, const T* src, int64_t row_stride, int64_t row0, int64_t seq, int rows) {
  constexpr int kChunks = D / 8;  // 8 two-byte elements per uint4
  for (int idx = threadIdx.x; idx < rows * kChunks; idx += blockDim.x) {
    const int r = idx / kChunks, c = idx % kChunks;
    uint4 val = make_uint4(0u, 0u, 0u, 0u);
    if (row0 + r < seq) val = *reinterpret_cast<const uint4*>(src + (row0 + r) * row_stride + c * 8);
    *reinterpret_cast<uint4*>(dst + r * ld_tile<D>() + c * 8) = val;
  }
}

// Whether query i sees key j (the one mask of both passes).
__device__ inline bool visible(const Problem& p, int64_t i, int64_t j, int64_t doc_lo) {
  return i < p.sq && j < p.sk && (!p.causal || j <= i) && j >= doc_lo;
}

// C[16 × 16·N] (+)= A[16 × K] · B, A row-major in shared memory; B either
// Kᵀ-style (col_major: element (k, n) at b[n·ldb + k]) or plain row-major.
template <typename T, int K, int N, typename BLayout>
__device__ void warp_gemm_store(float* c, int ldc, const T* a, int lda, const T* b, int ldb, bool accumulate) {
  for (int n = 0; n < N; ++n) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    if (accumulate) {
      wmma::load_matrix_sync(acc, c + n * 16, ldc, wmma::mem_row_major);
    } else {
      wmma::fill_fragment(acc, 0.0f);
    }
    for (int k = 0; k < K / 16; ++k) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, BLayout> fb;
      wmma::load_matrix_sync(fa, a + k * 16, lda);
      if constexpr (std::is_same_v<BLayout, wmma::col_major>) {
        wmma::load_matrix_sync(fb, b + n * 16 * ldb + k * 16, ldb);
      } else {
        wmma::load_matrix_sync(fb, b + k * 16 * ldb + n * 16, ldb);
      }
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + n * 16, acc, ldc, wmma::mem_row_major);
  }
}

template <typename T, int D>
constexpr size_t forward_smem_bytes() {
  return sizeof(T) * (kRows + 2 * kCols) * ld_tile<D>()     // Q, K, V
         + sizeof(float) * kWarps * 16 * kLdS                // S per warp
         + sizeof(T) * kWarps * 16 * kLdP                    // P per warp
         + sizeof(float) * kRows * ld_acc<D>();              // O accumulator
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) forward_kernel(const ForwardArgs a) {
  TITAN_DYNAMIC_SMEM(smem);
  constexpr int LD = ld_tile<D>(), LDO = ld_acc<D>();
  T* sQ = reinterpret_cast<T*>(smem);
  T* sK = sQ + kRows * LD;
  T* sV = sK + kCols * LD;
  float* sS = reinterpret_cast<float*>(sV + kCols * LD);
  T* sP = reinterpret_cast<T*>(sS + kWarps * 16 * kLdS);
  float* sO = reinterpret_cast<float*>(sP + kWarps * 16 * kLdP);

  const Problem& p = a.p;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t b = blockIdx.y / p.hq, h = blockIdx.y % p.hq, hk = h / (p.hq / p.hkv);
  const T* q = static_cast<const T*>(a.q) + b * a.qs.b + h * a.qs.h;
  const T* k = static_cast<const T*>(a.k) + b * a.ks.b + hk * a.ks.h;
  const T* v = static_cast<const T*>(a.v) + b * a.vs.b + hk * a.vs.h;
  const int64_t* doc = p.doc_start ? p.doc_start + b * p.sq : nullptr;

  load_rows<T, D>(sQ, q, a.qs.s, q0, p.sq, kRows);
  for (int idx = threadIdx.x; idx < kRows * LDO; idx += kThreads) sO[idx] = 0.0f;
  // The zeros are other threads' writes: visible before any warp reads its
  // rows, also when the tile sees no key and the loop below never runs.
  __syncthreads();

  // Lane pair (2r, 2r+1) owns row r of the warp's 16; each lane half its columns.
  const int r = lane / 2, half = lane % 2;
  const int64_t row = q0 + warp * 16 + r;
  const int64_t doc_lo = doc && row < p.sq ? doc[row] : 0;
  float m = -INFINITY, l = 0.0f;  // running max (log2 units) and normaliser of this row
  const float scale_log2 = p.scale * kLog2e;

  // The keys the tile's rows may see: up to its last row when causal, from
  // its first row's document start when block-causal (starts never decrease).
  int64_t k_begin = 0, k_end = p.sk;
  if (p.causal) k_end = q0 + kRows < p.sk ? q0 + kRows : p.sk;
  if (doc) k_begin = doc[q0 < p.sq ? q0 : p.sq - 1] / kCols * kCols;

  float* S = sS + warp * 16 * kLdS;
  T* P = sP + warp * 16 * kLdP;
  float* O = sO + warp * 16 * LDO;
  for (int64_t k0 = k_begin; k0 < k_end; k0 += kCols) {
    __syncthreads();  // every warp is done with the previous K/V tile
    load_rows<T, D>(sK, k, a.ks.s, k0, p.sk, kCols);
    load_rows<T, D>(sV, v, a.vs.s, k0, p.sk, kCols);
    __syncthreads();

    warp_gemm_store<T, D, kCols / 16, wmma::col_major>(S, kLdS, sQ + warp * 16 * LD, LD, sK, LD, false);
    __syncwarp();

    float* srow = S + r * kLdS + half * 32;
    float mx = -INFINITY;
    for (int c = 0; c < 32; ++c) {
      const float s = visible(p, row, k0 + half * 32 + c, doc_lo) ? srow[c] * scale_log2 : -INFINITY;
      srow[c] = s;
      mx = fmaxf(mx, s);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m, mx);
    // A row with nothing visible yet keeps m = −inf; 0 in its place keeps
    // exp2 of (−inf − m) at 0 instead of NaN.
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = exp2f(m - m_use);
    float sum = 0.0f;
    T* prow = P + r * kLdP + half * 32;
    for (int c = 0; c < 32; ++c) {
      const float e = exp2f(srow[c] - m_use);
      sum += e;
      prow[c] = from_float<T>(e);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * alpha + sum;
    m = m_new;
    float* orow = O + r * LDO + half * (D / 2);
    for (int c = 0; c < D / 2; ++c) orow[c] *= alpha;
    __syncwarp();

    warp_gemm_store<T, kCols, D / 16, wmma::row_major>(O, LDO, P, kLdP, sV, LD, true);
    __syncwarp();
  }

  if (row < p.sq) {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    T* out = static_cast<T*>(a.out) + b * a.os.b + h * a.os.h + row * a.os.s;
    const float* orow = O + r * LDO;
    // A row that saw no key writes zeros without reading O (0 · NaN is NaN).
    for (int c = half * (D / 2); c < (half + 1) * (D / 2); ++c)
      out[c] = from_float<T>(l > 0.0f ? orow[c] * inv : 0.0f);
    if (half == 0) a.lse[(b * p.hq + h) * p.sq + row] = l > 0.0f ? (m + log2f(l)) * kLn2 : -INFINITY;
  }
}

template <typename T, int D>
constexpr size_t backward_smem_bytes() {
  return sizeof(T) * (2 * kCols + 2 * kRows) * ld_tile<D>()  // K, V, Q, dO
         + sizeof(float) * 2 * kCols * ld_acc<D>()           // dK, dV accumulators
         + sizeof(float) * 2 * kWarps * 16 * kLdS            // S/P and dP/scratch per warp
         + sizeof(T) * 2 * kRows * kLdP                      // P and dS of the query tile
         + sizeof(float) * 2 * kRows;                        // L and D of the query tile's rows
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) backward_kernel(const BackwardArgs a) {
  TITAN_DYNAMIC_SMEM(smem);
  constexpr int LD = ld_tile<D>(), LDO = ld_acc<D>();
  T* sK = reinterpret_cast<T*>(smem);
  T* sV = sK + kCols * LD;
  T* sQ = sV + kCols * LD;
  T* sdO = sQ + kRows * LD;
  float* sdK = reinterpret_cast<float*>(sdO + kRows * LD);
  float* sdV = sdK + kCols * LDO;
  float* sS = sdV + kCols * LDO;
  float* sdP = sS + kWarps * 16 * kLdS;
  T* sP = reinterpret_cast<T*>(sdP + kWarps * 16 * kLdS);
  T* sdS = sP + kRows * kLdP;
  float* sL = reinterpret_cast<float*>(sdS + kRows * kLdP);
  float* sDelta = sL + kRows;

  const Problem& p = a.p;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * kCols;
  const int64_t k_last = (k0 + kCols < p.sk ? k0 + kCols : p.sk) - 1;
  const int64_t b = blockIdx.y / p.hkv, hk = blockIdx.y % p.hkv;
  const int64_t rep = p.hq / p.hkv;
  const T* k = static_cast<const T*>(a.k) + b * a.ks.b + hk * a.ks.h;
  const T* v = static_cast<const T*>(a.v) + b * a.vs.b + hk * a.vs.h;
  const int64_t* doc = p.doc_start ? p.doc_start + b * p.sq : nullptr;
  const float scale_log2 = p.scale * kLog2e;

  load_rows<T, D>(sK, k, a.ks.s, k0, p.sk, kCols);
  load_rows<T, D>(sV, v, a.vs.s, k0, p.sk, kCols);
  for (int idx = threadIdx.x; idx < kCols * LDO; idx += kThreads) sdK[idx] = 0.0f, sdV[idx] = 0.0f;

  // Query rows i >= k0 are the only ones that can see the tile when causal.
  const int64_t q_begin = p.causal ? k0 / kRows * kRows : 0;
  const int r = lane / 2, half = lane % 2;
  float* S = sS + warp * 16 * kLdS;
  float* dP = sdP + warp * 16 * kLdS;
  for (int64_t g = 0; g < rep; ++g) {
    const int64_t h = hk * rep + g;
    const T* q = static_cast<const T*>(a.q) + b * a.qs.b + h * a.qs.h;
    const T* dout = static_cast<const T*>(a.dout) + b * a.dos.b + h * a.dos.h;
    const float* lse = a.lse + (b * p.hq + h) * p.sq;
    const float* delta = a.delta + (b * p.hq + h) * p.sq;
    float* dq = a.dq + b * a.dqs.b + h * a.dqs.h;
    for (int64_t q0 = q_begin; q0 < p.sq; q0 += kRows) {
      // Block-causal: the tile's first row has the smallest document start;
      // once it begins after the key tile, no later row sees the tile.
      if (doc && doc[q0] > k_last) break;
      __syncthreads();  // the previous query tile's readers are done
      load_rows<T, D>(sQ, q, a.qs.s, q0, p.sq, kRows);
      load_rows<T, D>(sdO, dout, a.dos.s, q0, p.sq, kRows);
      for (int i = threadIdx.x; i < kRows; i += kThreads) {
        const bool in = q0 + i < p.sq;
        sL[i] = in ? lse[q0 + i] : 0.0f;
        sDelta[i] = in ? delta[q0 + i] : 0.0f;
      }
      __syncthreads();

      // This warp's 16 query rows: S = Q Kᵀ and dP = dO Vᵀ.
      warp_gemm_store<T, D, kCols / 16, wmma::col_major>(S, kLdS, sQ + warp * 16 * LD, LD, sK, LD, false);
      warp_gemm_store<T, D, kCols / 16, wmma::col_major>(dP, kLdS, sdO + warp * 16 * LD, LD, sV, LD, false);
      __syncwarp();
      {
        const int64_t i = q0 + warp * 16 + r;
        const int64_t doc_lo = doc && i < p.sq ? doc[i] : 0;
        const float L = sL[warp * 16 + r] * kLog2e, Di = sDelta[warp * 16 + r];
        T* prow = sP + (warp * 16 + r) * kLdP + half * 32;
        T* dsrow = sdS + (warp * 16 + r) * kLdP + half * 32;
        const float* srow = S + r * kLdS + half * 32;
        const float* dprow = dP + r * kLdS + half * 32;
        for (int c = 0; c < 32; ++c) {
          const bool vis = visible(p, i, k0 + half * 32 + c, doc_lo);
          const float pr = vis ? exp2f(srow[c] * scale_log2 - L) : 0.0f;
          prow[c] = from_float<T>(pr);
          dsrow[c] = from_float<T>(pr * (dprow[c] - Di) * p.scale);
        }
      }
      __syncthreads();  // dV and dK read every warp's P and dS rows

      // dV += Pᵀ dO and dK += dSᵀ Q for this warp's 16 key rows: Pᵀ is P
      // read column-major.
      for (int n = 0; n < D / 16; ++n) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc_v, acc_k;
        float* dv_at = sdV + warp * 16 * LDO + n * 16;
        float* dk_at = sdK + warp * 16 * LDO + n * 16;
        wmma::load_matrix_sync(acc_v, dv_at, LDO, wmma::mem_row_major);
        wmma::load_matrix_sync(acc_k, dk_at, LDO, wmma::mem_row_major);
        for (int kk = 0; kk < kRows / 16; ++kk) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::col_major> pt, dst;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fdo, fq;
          wmma::load_matrix_sync(pt, sP + kk * 16 * kLdP + warp * 16, kLdP);
          wmma::load_matrix_sync(dst, sdS + kk * 16 * kLdP + warp * 16, kLdP);
          wmma::load_matrix_sync(fdo, sdO + kk * 16 * LD + n * 16, LD);
          wmma::load_matrix_sync(fq, sQ + kk * 16 * LD + n * 16, LD);
          wmma::mma_sync(acc_v, pt, fdo, acc_v);
          wmma::mma_sync(acc_k, dst, fq, acc_k);
        }
        wmma::store_matrix_sync(dv_at, acc_v, LDO, wmma::mem_row_major);
        wmma::store_matrix_sync(dk_at, acc_k, LDO, wmma::mem_row_major);
      }

      // dQ += dS K for this warp's 16 query rows, 16 columns at a time
      // through the warp's dP block (free now), added to the fp32 dq.
      for (int n = 0; n < D / 16; ++n) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int kk = 0; kk < kCols / 16; ++kk) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fds;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fk;
          wmma::load_matrix_sync(fds, sdS + warp * 16 * kLdP + kk * 16, kLdP);
          wmma::load_matrix_sync(fk, sK + kk * 16 * LD + n * 16, LD);
          wmma::mma_sync(acc, fds, fk, acc);
        }
        wmma::store_matrix_sync(dP, acc, kLdS, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 16 * 16; e += 32) {
          const int rr = e / 16, cc = e % 16;
          const int64_t i = q0 + warp * 16 + rr;
          if (i < p.sq) atomicAdd(dq + i * a.dqs.s + n * 16 + cc, dP[rr * kLdS + cc]);
        }
        __syncwarp();
      }
    }
  }
  __syncthreads();
  T* dk = static_cast<T*>(a.dk) + b * a.dks.b + hk * a.dks.h;
  T* dv = static_cast<T*>(a.dv) + b * a.dvs.b + hk * a.dvs.h;
  for (int idx = threadIdx.x; idx < kCols * D; idx += kThreads) {
    const int rr = idx / D, c = idx % D;
    if (k0 + rr >= p.sk) continue;
    dk[(k0 + rr) * a.dks.s + c] = from_float<T>(sdK[rr * LDO + c]);
    dv[(k0 + rr) * a.dvs.s + c] = from_float<T>(sdV[rr * LDO + c]);
  }
}

}  // namespace titan::ops::flash_cuda_detail::kernels
