#pragma once
/// @file
/// @brief Internal: the arguments of titan's fused kernels (RMSNorm,
/// SwiGLU, RoPE, Σx², cross-entropy), as raw pointers and sizes, shared by
/// the CPU kernels (fused_cpu_kernel.hpp, declared here for each compiled
/// CPU capability) and the CUDA ones (fused_cuda_kernels.cuh).
///
/// Every kernel reads and writes float32 or bfloat16 (`bf16`) and computes in
/// float32. Tensors are contiguous.

#include <cstdint>

namespace titan::ops::fused_detail {

/// torch's ignore_index (ops::kIgnoreIndex), for kernels that see raw labels.
constexpr int64_t kIgnoredLabel = -100;

/// y = x · rstd · w per row, rstd = 1 / sqrt(mean(x²) + eps); x, y [rows, dim].
struct RmsNormForward {
  const void* x = nullptr;
  const void* w = nullptr;  ///< [dim], x's dtype
  void* y = nullptr;
  float* rstd = nullptr;  ///< [rows], saved for backward
  int64_t rows = 0, dim = 0;
  float eps = 0.0f;
  bool bf16 = false;
};

/// dx and the weight's gradient dw (fp32 [dim], summed over rows in an order
/// that depends only on `rows`, so that runs are bitwise repeatable whatever
/// the thread count).
struct RmsNormBackward {
  const void* dy = nullptr;
  const void* x = nullptr;
  const void* w = nullptr;
  const float* rstd = nullptr;
  void* dx = nullptr;
  float* dw = nullptr;
  int64_t rows = 0, dim = 0;
  bool bf16 = false;
};

/// out = silu(a) · b, elementwise over n values.
struct SwigluForward {
  const void* a = nullptr;
  const void* b = nullptr;
  void* out = nullptr;
  int64_t n = 0;
  bool bf16 = false;
};

/// da = dout · b · silu'(a), db = dout · silu(a).
struct SwigluBackward {
  const void* dout = nullptr;
  const void* a = nullptr;
  const void* b = nullptr;
  void* da = nullptr;
  void* db = nullptr;
  int64_t n = 0;
  bool bf16 = false;
};

/// Rotates the interleaved pairs (x[2i], x[2i+1]) of x [batch, seq, heads,
/// 2·half] by the angle whose cos/sin are at the row of (batch, seq) position
/// (tables [seq, half], or [batch, seq, half] when `per_sequence`); `inverse`
/// rotates by minus the angle (the backward: the transpose of a rotation).
struct Rope {
  const void* x = nullptr;
  void* out = nullptr;
  const float* cos = nullptr;
  const float* sin = nullptr;
  int64_t batch = 0, seq = 0, heads = 0, half = 0;
  bool per_sequence = false;
  bool inverse = false;
  bool bf16 = false;
};

/// Σ x² over n values, each fp32 square added into fp32 partials of 32
/// values and those into double: the accuracy of a double reduction without
/// a double copy of x. The order depends on n only (bitwise repeatable).
struct SumOfSquares {
  const void* x = nullptr;
  int64_t n = 0;
  bool bf16 = false;
  double* out = nullptr;
};

/// Cross-entropy forward (the CUDA kernel): per row of logits [rows,
/// vocab], lse = log Σ exp and loss = lse − logits[label] (0 where the
/// label is -100, torch's ignore_index).
struct CrossEntropyForward {
  const void* logits = nullptr;
  const int64_t* labels = nullptr;
  float* lse = nullptr;   ///< [rows]
  float* loss = nullptr;  ///< [rows]
  int64_t rows = 0, vocab = 0;
  bool bf16 = false;
};

/// Cross-entropy backward (the CUDA kernel): dlogits = (softmax − one-hot)
/// · *scale on counted rows, 0 on ignored ones, in the logits' dtype.
struct CrossEntropyBackward {
  const void* logits = nullptr;
  const int64_t* labels = nullptr;
  const float* lse = nullptr;
  const float* scale = nullptr;  ///< one value on the device: the loss's gradient (÷ count for a mean)
  void* dlogits = nullptr;
  int64_t rows = 0, vocab = 0;
  bool bf16 = false;
};

#define TITAN_FUSED_CPU_KERNELS(NS)                \
  namespace NS {                                   \
  void rms_norm_forward(const RmsNormForward& a);  \
  void rms_norm_backward(const RmsNormBackward& a); \
  void swiglu_forward(const SwigluForward& a);     \
  void swiglu_backward(const SwigluBackward& a);   \
  void rope(const Rope& a);                        \
  void sum_of_squares(const SumOfSquares& a);      \
  }

TITAN_FUSED_CPU_KERNELS(AVX512)
TITAN_FUSED_CPU_KERNELS(AVX2)
TITAN_FUSED_CPU_KERNELS(DEFAULT)
#undef TITAN_FUSED_CPU_KERNELS

}  // namespace titan::ops::fused_detail
