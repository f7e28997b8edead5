#pragma once
/// @file
/// @brief Internal: the raw-pointer problem description that
/// flash_cpu.cpp hands to the kernel compiled once per CPU capability
/// (flash_cpu_kernel_avx512.cpp with AVX-512, flash_cpu_kernel_avx2.cpp
/// with AVX2+FMA, flash_cpu_kernel_default.cpp without), chosen at run time like ATen's own DispatchStub.

#include <cstdint>

#include "titan/ops/attention/tile_gemm.hpp"

namespace titan::ops::flash_detail {

/// Element strides of a [B, H, S, D] tensor whose last dimension is contiguous.
struct Strides {
  int64_t b = 0, h = 0, s = 0;
};

/// The shapes and options both passes share.
struct Problem {
  int64_t batch = 0, hq = 0, hkv = 0, sq = 0, sk = 0, d = 0;
  bool causal = false;
  /// Per-row key bounds: [batch, sq] int64, never decreasing along a row,
  /// the first key each query row may see (in this call's key positions);
  /// query i sees key j iff doc_start[i] <= j (and j <= i when causal).
  /// Named for a whole window's block-causal mask, its doc_start (causal,
  /// sq == sk; what the CUDA kernel takes). The CPU kernel also takes a
  /// ring-attention block's bounds, ops::document_key_begin of its keys:
  /// not causal, or a row that sees none of them (value sk). Null: plain
  /// causal or full.
  const int64_t* doc_start = nullptr;
  bool bf16 = false;  ///< inputs/outputs are bf16 (else fp32)
  float scale = 1.0f;
  int64_t q_tile = 64, kv_tile = 256;
  TileGemm gemm = TileGemm::blas;
};

/// Forward operands: reads q, k, v; writes out and lse ([B, Hq, Sq] contiguous fp32).
struct ForwardArgs {
  Problem p;
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  Strides qs, ks, vs;
  void* out = nullptr;
  Strides os;
  float* lse = nullptr;
};

/// Backward operands: delta = rowsum(dO ∘ O) and lse are [B, Hq, Sq]
/// contiguous fp32; dq is an fp32 accumulator (zeroed by the caller); dk and
/// dv are written in the input dtype.
struct BackwardArgs {
  Problem p;
  const void *q = nullptr, *k = nullptr, *v = nullptr, *dout = nullptr;
  Strides qs, ks, vs, dos;
  const float* lse = nullptr;
  const float* delta = nullptr;
  float* dq = nullptr;
  Strides dqs;
  void *dk = nullptr, *dv = nullptr;
  Strides dks, dvs;
};

namespace AVX512 {
void forward(const ForwardArgs& a);
void backward(const BackwardArgs& a);
}  // namespace AVX512
namespace AVX2 {
void forward(const ForwardArgs& a);
void backward(const BackwardArgs& a);
}  // namespace AVX2
namespace DEFAULT {
void forward(const ForwardArgs& a);
void backward(const BackwardArgs& a);
}  // namespace DEFAULT

}  // namespace titan::ops::flash_detail
