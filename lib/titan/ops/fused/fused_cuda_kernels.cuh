#pragma once
// The fused ops' CUDA device code (SwiGLU forward/backward, RoPE, and the
// cross-entropy's per-row log-sum-exp and logits gradient), included by
// fused_cuda.cu (with CUDA's headers) and by
// tests/ops/test_fused_cuda_emulated.cpp (with tests/attention/
// cuda_emulation.hpp, which runs it on CPU threads). So it names only what
// both provide: __global__, threadIdx / blockIdx / blockDim,
// __syncthreads, TITAN_DYNAMIC_SMEM(name), expf / logf, and conversions
// between float and T (float or __nv_bfloat16) by cast.
//
// The arithmetic is the CPU kernel's (fused_cpu_kernel.hpp) in fp32, so the
// three implementations (CPU kernel, CUDA kernel, op by op) are checked
// against each other. One block of kThreads threads handles kThreads ·
// kPerThread consecutive values; value k of thread t is at t + k·kThreads,
// so each of the kPerThread loads of a warp is coalesced.

#include <cmath>
#include <cstdint>

#include "titan/ops/fused/fused_cpu_args.hpp"

namespace titan::ops::fused_cuda_detail::kernels {

constexpr int kThreads = 256;
constexpr int kPerThread = 4;
constexpr int64_t kPerBlock = int64_t{kThreads} * kPerThread;

template <typename T>
__device__ inline float to_f(T v) {
  return static_cast<float>(v);
}

template <typename T>
__device__ inline T from_f(float v) {
  return T(v);
}

// silu(a) · b; silu(a) = a / (1 + e^(−a)) as ATen writes it.
template <typename T>
__global__ void swiglu_forward_kernel(fused_detail::SwigluForward p) {
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  T* out = static_cast<T*>(p.out);
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kPerBlock + threadIdx.x;
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t i = base + int64_t{k} * kThreads;
    if (i >= p.n) return;
    const float x = to_f(a[i]);
    out[i] = from_f<T>(x / (1.0f + expf(-x)) * to_f(b[i]));
  }
}

// da = dout · b · σ(a)(1 + a(1 − σ(a))), db = dout · silu(a).
template <typename T>
__global__ void swiglu_backward_kernel(fused_detail::SwigluBackward p) {
  const T* g = static_cast<const T*>(p.dout);
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  T* da = static_cast<T*>(p.da);
  T* db = static_cast<T*>(p.db);
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kPerBlock + threadIdx.x;
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t i = base + int64_t{k} * kThreads;
    if (i >= p.n) return;
    const float x = to_f(a[i]), gv = to_f(g[i]);
    const float sig = 1.0f / (1.0f + expf(-x));
    da[i] = from_f<T>(gv * to_f(b[i]) * sig * (1.0f + x * (1.0f - sig)));
    db[i] = from_f<T>(gv * (x * sig));
  }
}

// One thread per (row, pair): row = (batch, position, head), pair i of
// half. The table row is the position's (shared tables) or the (batch,
// position)'s (per-sequence tables); `inverse` rotates by minus the angle.
template <typename T>
__global__ void rope_kernel(fused_detail::Rope p) {
  const T* x = static_cast<const T*>(p.x);
  T* out = static_cast<T*>(p.out);
  const int64_t pairs = p.batch * p.seq * p.heads * p.half;
  const float sign = p.inverse ? -1.0f : 1.0f;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kPerBlock + threadIdx.x;
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t j = base + int64_t{k} * kThreads;
    if (j >= pairs) return;
    const int64_t row = j / p.half, i = j % p.half;
    const int64_t bs = row / p.heads;  // batch · seq + position
    const int64_t t = (p.per_sequence ? bs : bs % p.seq) * p.half + i;
    const float c = p.cos[t], s = sign * p.sin[t];
    const float re = to_f(x[2 * j]), im = to_f(x[2 * j + 1]);
    out[2 * j] = from_f<T>(re * c - im * s);
    out[2 * j + 1] = from_f<T>(re * s + im * c);
  }
}

// ---- cross-entropy ------------------------------------------------------------

constexpr float kLowest = -3.0e38f;  // "no value yet": exp(kLowest − v) is 0, and no inf − inf

// (m, s) ← the running max and Σ exp(x − m) of two parts together.
__device__ inline void combine(float& m, float& s, float m2, float s2) {
  const float mx = m > m2 ? m : m2;
  s = s * expf(m - mx) + s2 * expf(m2 - mx);
  m = mx;
}

// One block per row: each thread an online (max, Σexp) over its strided
// values, then a tree over the block in shared memory (2·kThreads floats).
template <typename T>
__global__ void cross_entropy_forward_kernel(fused_detail::CrossEntropyForward p) {
  TITAN_DYNAMIC_SMEM(smem);
  float* ms = reinterpret_cast<float*>(smem);
  float* ss = ms + kThreads;
  const int64_t row = blockIdx.x;
  const T* x = static_cast<const T*>(p.logits) + row * p.vocab;
  const int t = threadIdx.x;
  float m = kLowest, s = 0.0f;
  for (int64_t j = t; j < p.vocab; j += kThreads) combine(m, s, to_f(x[j]), 1.0f);
  ms[t] = m, ss[t] = s;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (t < stride) {
      float mm = ms[t], sm = ss[t];
      combine(mm, sm, ms[t + stride], ss[t + stride]);
      ms[t] = mm, ss[t] = sm;
    }
    __syncthreads();
  }
  if (t == 0) {
    const float lse = ms[0] + logf(ss[0]);
    const int64_t label = p.labels[row];
    p.lse[row] = lse;
    // A label outside the vocabulary (the CPU path's gather throws on it)
    // gives a NaN loss, which the trainer stops on, rather than a read
    // past the row.
    const bool in_vocab = label >= 0 && label < p.vocab;
    p.loss[row] = label == fused_detail::kIgnoredLabel ? 0.0f : (in_vocab ? lse - to_f(x[label]) : NAN);
  }
}

// One thread per logit: (exp(x − lse) − [j == label]) · scale.
template <typename T>
__global__ void cross_entropy_backward_kernel(fused_detail::CrossEntropyBackward p) {
  const T* x = static_cast<const T*>(p.logits);
  T* dx = static_cast<T*>(p.dlogits);
  const int64_t n = p.rows * p.vocab;
  const float scale = *p.scale;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kPerBlock + threadIdx.x;
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t i = base + int64_t{k} * kThreads;
    if (i >= n) return;
    const int64_t row = i / p.vocab, j = i - row * p.vocab;
    const int64_t label = p.labels[row];
    float d = 0.0f;
    if (label != fused_detail::kIgnoredLabel)
      d = (expf(to_f(x[i]) - p.lse[row]) - (j == label ? 1.0f : 0.0f)) * scale;
    dx[i] = from_f<T>(d);
  }
}

/// Blocks for n values (or pairs).
inline unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kPerBlock - 1) / kPerBlock); }

}  // namespace titan::ops::fused_cuda_detail::kernels
