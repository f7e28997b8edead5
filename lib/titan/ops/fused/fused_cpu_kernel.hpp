#pragma once
/// @file
/// @brief Internal: the bodies of the fused CPU kernels. Included by one .cpp
/// per CPU capability (AVX-512, AVX2, portable), each compiled with its own
/// instruction-set flags and CPU_CAPABILITY, so at::vec::Vectorized<float> is
/// that capability's type and each copy lives in its own namespace — the
/// pattern of the flash-attention kernel and of ATen's own kernels.
///
/// One pass over memory per kernel where the op-by-op version makes several:
/// RMSNorm forward reads x once and writes y and one fp32 rstd per row (the
/// op-by-op version writes x², its mean, the rsqrt, x·rstd and y); SwiGLU
/// writes silu(a)·b without silu(a); RoPE rotates pairs in place of the
/// float copy, two selects, four products and a stack. bfloat16 rows are
/// widened to fp32 in a row buffer, computed, and rounded once on the way out.

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "titan/ops/fused/fused_cpu_args.hpp"

namespace titan::ops::fused_detail {
namespace CPU_CAPABILITY {
namespace {

using Vec = at::vec::Vectorized<float>;
using bf16 = c10::BFloat16;

// ---- rows in fp32 -----------------------------------------------------------

// A row of T as fp32: the row itself for float, else widened into `buf`.
template <typename T>
const float* widened(const void* base, int64_t offset, int64_t n, float* buf) {
  if constexpr (std::is_same_v<T, float>) {
    return static_cast<const float*>(base) + offset;
  } else {
    at::vec::convert(static_cast<const T*>(base) + offset, buf, n);
    return buf;
  }
}

// Where to compute a row that goes to `base` + offset: the destination itself
// for float, else `buf` (then narrow_into writes it back).
template <typename T>
float* destination(void* base, int64_t offset, float* buf) {
  if constexpr (std::is_same_v<T, float>) return static_cast<float*>(base) + offset;
  else return buf;
}

template <typename T>
void narrow_into(void* base, int64_t offset, int64_t n, const float* buf) {
  if constexpr (!std::is_same_v<T, float>) at::vec::convert(buf, static_cast<T*>(base) + offset, n);
}

float sum_of(const Vec& v) {
  float lanes[Vec::size()];
  v.store(lanes);
  float s = 0.0f;
  for (float f : lanes) s += f;
  return s;
}

// Σ x[i]·y[i] in fp32, vector lanes then the tail.
float dot(const float* x, const float* y, int64_t n) {
  int64_t i = 0;
  Vec acc(0.0f);
  for (; i + Vec::size() <= n; i += Vec::size()) acc = at::vec::fmadd(Vec::loadu(x + i), Vec::loadu(y + i), acc);
  float s = sum_of(acc);
  for (; i < n; ++i) s += x[i] * y[i];
  return s;
}

// ---- RMSNorm -----------------------------------------------------------------

// The [d] weight as fp32, read by every row.
template <typename T>
std::vector<float> weight_fp32(const void* w, int64_t d) {
  std::vector<float> out(static_cast<size_t>(d));
  const float* f = widened<T>(w, 0, d, out.data());
  if (f != out.data()) std::copy(f, f + d, out.data());
  return out;
}

template <typename T>
void rms_norm_forward_impl(const RmsNormForward& a) {
  const int64_t d = a.dim;
  const std::vector<float> w_f = weight_fp32<T>(a.w, d);
  at::parallel_for(0, a.rows, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> xbuf(static_cast<size_t>(d)), ybuf(static_cast<size_t>(d));
    for (int64_t r = begin; r < end; ++r) {
      const float* x = widened<T>(a.x, r * d, d, xbuf.data());
      const float rstd = 1.0f / std::sqrt(dot(x, x, d) / static_cast<float>(d) + a.eps);
      a.rstd[r] = rstd;
      float* y = destination<T>(a.y, r * d, ybuf.data());
      const Vec vr(rstd);
      int64_t i = 0;
      for (; i + Vec::size() <= d; i += Vec::size())
        (Vec::loadu(x + i) * vr * Vec::loadu(w_f.data() + i)).store(y + i);
      for (; i < d; ++i) y[i] = x[i] * rstd * w_f[i];
      narrow_into<T>(a.y, r * d, d, y);
    }
  });
}

// With x̂ = x·rstd and g = dy·w: dx = rstd·(g − x̂·mean(g·x̂)), dw = Σ_rows dy·x̂.
// dw's terms (fp32 products) are summed in double, per block of rows (the
// blocks depend on `rows` only), then over blocks in order, and rounded to
// fp32 once: the same bits on 1 thread or 16, and the same sum, to that
// rounding, however the rows are split (micro-batches, sequence shards) —
// an fp32 sum's rounding depends on the split, and Adam turns the rounding
// of a near-zero gradient into an lr-sized step.
template <typename T>
void rms_norm_backward_impl(const RmsNormBackward& a) {
  const int64_t d = a.dim;
  const std::vector<float> w_f = weight_fp32<T>(a.w, d);
  constexpr int64_t kMaxBlocks = 64;
  const int64_t block_rows = std::max<int64_t>(1, (a.rows + kMaxBlocks - 1) / kMaxBlocks);
  const int64_t blocks = (a.rows + block_rows - 1) / block_rows;
  std::vector<double> partial(static_cast<size_t>(blocks * d), 0.0);
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> xbuf(static_cast<size_t>(d)), dybuf(static_cast<size_t>(d)), g(static_cast<size_t>(d)),
        dxbuf(static_cast<size_t>(d)), term(static_cast<size_t>(d));
    for (int64_t blk = b0; blk < b1; ++blk) {
      double* dw = partial.data() + blk * d;
      const int64_t r_end = std::min(a.rows, (blk + 1) * block_rows);
      for (int64_t r = blk * block_rows; r < r_end; ++r) {
        const float* x = widened<T>(a.x, r * d, d, xbuf.data());
        const float* dy = widened<T>(a.dy, r * d, d, dybuf.data());
        const float rstd = a.rstd[r];
        const Vec vr(rstd);
        int64_t i = 0;
        for (; i + Vec::size() <= d; i += Vec::size())
          (Vec::loadu(dy + i) * Vec::loadu(w_f.data() + i)).store(g.data() + i);
        for (; i < d; ++i) g[i] = dy[i] * w_f[i];
        const float c = dot(g.data(), x, d) * rstd / static_cast<float>(d);  // mean(g·x̂)
        float* dx = destination<T>(a.dx, r * d, dxbuf.data());
        const Vec vc(c);
        i = 0;
        for (; i + Vec::size() <= d; i += Vec::size()) {
          const Vec xh = Vec::loadu(x + i) * vr;
          (vr * (Vec::loadu(g.data() + i) - xh * vc)).store(dx + i);
          (Vec::loadu(dy + i) * xh).store(term.data() + i);
        }
        for (; i < d; ++i) {
          const float xh = x[i] * rstd;
          dx[i] = rstd * (g[i] - xh * c);
          term[i] = dy[i] * xh;
        }
        for (int64_t j = 0; j < d; ++j) dw[j] += static_cast<double>(term[j]);  // elementwise: vectorised
        narrow_into<T>(a.dx, r * d, d, dx);
      }
    }
  });
  at::parallel_for(0, d, 256, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double s = 0.0;
      for (int64_t blk = 0; blk < blocks; ++blk) s += partial[static_cast<size_t>(blk * d + c)];
      a.dw[c] = static_cast<float>(s);
    }
  });
}

// ---- SwiGLU ------------------------------------------------------------------

constexpr int64_t kChunk = 1024;  // elementwise work per task (and row buffer)

// silu(a) = a · σ(a), σ(a) = 1 / (1 + e^(−a)): ATen's silu written the same way.
template <typename T>
void swiglu_forward_impl(const SwigluForward& p) {
  at::parallel_for(0, (p.n + kChunk - 1) / kChunk, 1, [&](int64_t c0, int64_t c1) {
    float abuf[kChunk], bbuf[kChunk], obuf[kChunk];
    const Vec one(1.0f);
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t off = c * kChunk, n = std::min(kChunk, p.n - off);
      const float* x = widened<T>(p.a, off, n, abuf);
      const float* y = widened<T>(p.b, off, n, bbuf);
      float* o = destination<T>(p.out, off, obuf);
      int64_t i = 0;
      for (; i + Vec::size() <= n; i += Vec::size()) {
        const Vec xv = Vec::loadu(x + i);
        (xv / (one + xv.neg().exp()) * Vec::loadu(y + i)).store(o + i);
      }
      for (; i < n; ++i) o[i] = x[i] / (1.0f + std::exp(-x[i])) * y[i];
      narrow_into<T>(p.out, off, n, o);
    }
  });
}

template <typename T>
void swiglu_backward_impl(const SwigluBackward& p) {
  at::parallel_for(0, (p.n + kChunk - 1) / kChunk, 1, [&](int64_t c0, int64_t c1) {
    float gbuf[kChunk], abuf[kChunk], bbuf[kChunk], dabuf[kChunk], dbbuf[kChunk];
    const Vec one(1.0f);
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t off = c * kChunk, n = std::min(kChunk, p.n - off);
      const float* g = widened<T>(p.dout, off, n, gbuf);
      const float* x = widened<T>(p.a, off, n, abuf);
      const float* y = widened<T>(p.b, off, n, bbuf);
      float* da = destination<T>(p.da, off, dabuf);
      float* db = destination<T>(p.db, off, dbbuf);
      int64_t i = 0;
      for (; i + Vec::size() <= n; i += Vec::size()) {
        const Vec xv = Vec::loadu(x + i), gv = Vec::loadu(g + i);
        const Vec sig = one / (one + xv.neg().exp());
        (gv * Vec::loadu(y + i) * sig * (one + xv * (one - sig))).store(da + i);
        (gv * (xv * sig)).store(db + i);
      }
      for (; i < n; ++i) {
        const float sig = 1.0f / (1.0f + std::exp(-x[i]));
        da[i] = g[i] * y[i] * sig * (1.0f + x[i] * (1.0f - sig));
        db[i] = g[i] * (x[i] * sig);
      }
      narrow_into<T>(p.da, off, n, da);
      narrow_into<T>(p.db, off, n, db);
    }
  });
}

// ---- RoPE --------------------------------------------------------------------

// One row is one (batch, position, head): head_dim values, `half` pairs.
template <typename T>
void rope_impl(const Rope& p) {
  const int64_t hd = 2 * p.half, rows = p.batch * p.seq * p.heads;
  const float sign = p.inverse ? -1.0f : 1.0f;
  at::parallel_for(0, rows, 16, [&](int64_t r0, int64_t r1) {
    std::vector<float> xbuf(static_cast<size_t>(hd)), obuf(static_cast<size_t>(hd));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t bs = r / p.heads;  // batch · seq + position
      const int64_t table_row = p.per_sequence ? bs : bs % p.seq;
      const float* cs = p.cos + table_row * p.half;
      const float* sn = p.sin + table_row * p.half;
      const float* x = widened<T>(p.x, r * hd, hd, xbuf.data());
      float* o = destination<T>(p.out, r * hd, obuf.data());
      for (int64_t i = 0; i < p.half; ++i) {
        const float re = x[2 * i], im = x[2 * i + 1], c = cs[i], s = sign * sn[i];
        o[2 * i] = re * c - im * s;
        o[2 * i + 1] = re * s + im * c;
      }
      narrow_into<T>(p.out, r * hd, hd, o);
    }
  });
}

// ---- Σ x² (the gradient-norm's partial) ----------------------------------------

constexpr int64_t kSumBlock = 32768;  // values per task; the order of the sum depends on n only

template <typename T>
double sum_of_squares_block(const T* x, int64_t n) {
  float buf[kChunk];
  double acc[Vec::size()] = {};
  double total = 0.0;
  for (int64_t off = 0; off < n; off += kChunk) {
    const int64_t m = std::min(kChunk, n - off);
    const float* v;
    if constexpr (std::is_same_v<T, float>) {
      v = x + off;
    } else {
      at::vec::convert(x + off, buf, m);
      v = buf;
    }
    int64_t i = 0;
    // 4 vectors of squares summed in fp32 (32 values at AVX2 width), then
    // the lanes added into double.
    for (; i + 4 * Vec::size() <= m; i += 4 * Vec::size()) {
      Vec s = Vec::loadu(v + i) * Vec::loadu(v + i);
      for (int k = 1; k < 4; ++k) {
        const Vec y = Vec::loadu(v + i + k * Vec::size());
        s = at::vec::fmadd(y, y, s);
      }
      float lanes[Vec::size()];
      s.store(lanes);
      for (int l = 0; l < Vec::size(); ++l) acc[l] += lanes[l];
    }
    for (; i < m; ++i) total += static_cast<double>(v[i]) * v[i];
  }
  for (double a : acc) total += a;
  return total;
}

template <typename T>
void sum_of_squares_impl(const SumOfSquares& p) {
  const int64_t blocks = (p.n + kSumBlock - 1) / kSumBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
  const T* x = static_cast<const T*>(p.x);
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      partial[static_cast<size_t>(b)] = sum_of_squares_block(x + b * kSumBlock, std::min(kSumBlock, p.n - b * kSumBlock));
  });
  double total = 0.0;
  for (double s : partial) total += s;
  *p.out = total;
}

}  // namespace

void rms_norm_forward(const RmsNormForward& a) {
  a.bf16 ? rms_norm_forward_impl<bf16>(a) : rms_norm_forward_impl<float>(a);
}
void rms_norm_backward(const RmsNormBackward& a) {
  a.bf16 ? rms_norm_backward_impl<bf16>(a) : rms_norm_backward_impl<float>(a);
}
void swiglu_forward(const SwigluForward& a) { a.bf16 ? swiglu_forward_impl<bf16>(a) : swiglu_forward_impl<float>(a); }
void swiglu_backward(const SwigluBackward& a) {
  a.bf16 ? swiglu_backward_impl<bf16>(a) : swiglu_backward_impl<float>(a);
}
void rope(const Rope& a) { a.bf16 ? rope_impl<bf16>(a) : rope_impl<float>(a); }
void sum_of_squares(const SumOfSquares& a) {
  a.bf16 ? sum_of_squares_impl<bf16>(a) : sum_of_squares_impl<float>(a);
}

}  // namespace CPU_CAPABILITY
}  // namespace titan::ops::fused_detail
