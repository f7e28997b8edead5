#pragma once
/// @file
/// @brief Internal: the body of the CPU flash-attention kernel. Included by
/// one .cpp per CPU capability, each compiled with its own instruction-set
/// flags and CPU_CAPABILITY (AVX2 or DEFAULT), so at::vec::Vectorized is the
/// AVX2 type in one and the portable one in the other and the two copies
/// live in different namespaces.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <vector>

#include "titan/ops/attention/flash_cpu_args.hpp"

namespace titan::ops::flash_detail {
namespace CPU_CAPABILITY {
namespace {

using Vec = at::vec::Vectorized<float>;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Scratch memory comes from tensors, not std::vector, so that the CPU tensor
// memory counter (metrics/tensor_memory.hpp) sees all of it and the tests'
// linear-memory check covers the kernel's own buffers too.
template <typename T>
struct Scratch {
  at::Tensor t;
  T* ptr = nullptr;
  explicit Scratch(int64_t n) {
    if (n == 0) return;
    t = at::empty({n}, at::TensorOptions(c10::CppTypeToScalarType<T>::value));
    ptr = t.template data_ptr<T>();
  }
  T* data() const { return ptr; }
};

template <typename T>
void fill(const Scratch<T>& s, int64_t n, T value) {
  std::fill(s.ptr, s.ptr + n, value);
}

// ---- row helpers: the softmax work between the tile products -------------

float row_max(const float* x, int64_t n) {
  int64_t i = 0;
  float m = kNegInf;
  if (n >= Vec::size()) {
    Vec vm(kNegInf);
    for (; i + Vec::size() <= n; i += Vec::size()) vm = at::vec::maximum(vm, Vec::loadu(x + i));
    float lanes[Vec::size()];
    vm.store(lanes);
    for (float f : lanes) m = std::max(m, f);
  }
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// x[i] = exp(x[i] - sub) for i < n, zero for n <= i < width; returns Σ x.
// exp_u20 is ATen's polynomial exp (the one its CPU flash kernel uses); its
// error is far below the bf16 rounding the outputs see and measured in the
// fp32 tests against the math reference.
float exp_rows(float* x, int64_t n, int64_t width, float sub) {
  int64_t i = 0;
  Vec vsum(0.0f);
  const Vec vsub(sub);
  for (; i + Vec::size() <= n; i += Vec::size()) {
    Vec e = (Vec::loadu(x + i) - vsub).exp_u20();
    e.store(x + i);
    vsum = vsum + e;
  }
  float lanes[Vec::size()];
  vsum.store(lanes);
  float sum = 0.0f;
  for (float f : lanes) sum += f;
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - sub);
    sum += x[i];
  }
  std::fill(x + std::max<int64_t>(n, 0), x + width, 0.0f);
  return sum;
}

void scale_row(float* x, int64_t n, float s) {
  int64_t i = 0;
  const Vec vs(s);
  for (; i + Vec::size() <= n; i += Vec::size()) (Vec::loadu(x + i) * vs).store(x + i);
  for (; i < n; ++i) x[i] *= s;
}

void add_row(float* dst, const float* src, int64_t n) {
  int64_t i = 0;
  for (; i + Vec::size() <= n; i += Vec::size()) (Vec::loadu(dst + i) + Vec::loadu(src + i)).store(dst + i);
  for (; i < n; ++i) dst[i] += src[i];
}

// dS = P ∘ (dP − delta), in place in dp.
void ds_row(float* dp, const float* p, int64_t n, float delta) {
  int64_t i = 0;
  const Vec vd(delta);
  for (; i + Vec::size() <= n; i += Vec::size())
    (Vec::loadu(p + i) * (Vec::loadu(dp + i) - vd)).store(dp + i);
  for (; i < n; ++i) dp[i] = p[i] * (dp[i] - delta);
}

template <typename T>
void store_row(T* dst, const float* src, int64_t n, float s) {
  if constexpr (std::is_same_v<T, float>) {
    int64_t i = 0;
    const Vec vs(s);
    for (; i + Vec::size() <= n; i += Vec::size()) (Vec::loadu(src + i) * vs).store(dst + i);
    for (; i < n; ++i) dst[i] = src[i] * s;
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(src[i] * s);
  }
}

// A [rows × d] tile as fp32 for sgemm: the tile itself when T is float;
// for bf16 a dense widened copy in buf (leading dimension d), made once and
// used by every product that reads the tile (widening per product made the
// bf16 backward 0.72× ATen's at seq 4096; once per tile, 0.81×). MKL's own
// bf16 GEMM (cblas_gemm_bf16bf16f32) was no alternative: it ignored the
// per-thread limit of SingleThreadedBlas and oversubscribed the cores
// (0.01× ATen at seq 1024).
struct F32Tile {
  const float* ptr;
  int64_t ld;
};

template <typename T>
F32Tile widened(const T* x, int64_t ld, int64_t rows, int64_t d, float* buf) {
  if constexpr (std::is_same_v<T, float>) {
    (void)rows, (void)d, (void)buf;
    return {x, ld};
  } else {
    for (int64_t r = 0; r < rows; ++r) at::vec::convert(x + r * ld, buf + r * d, d);
    return {buf, d};
  }
}

// P or dS rounded to T's precision in place. bf16 tiles need them as bf16
// values for the bf16×bf16→fp32 products (what FlashAttention-2 does on GPUs
// too), kept in fp32 here so that sgemm takes them as they are.
template <typename T>
void round_to(float* x, int64_t rows, int64_t cols, int64_t ld, T* buf) {
  if constexpr (std::is_same_v<T, float>) {
    (void)x, (void)rows, (void)cols, (void)ld, (void)buf;
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      at::vec::convert(x + r * ld, buf, cols);
      at::vec::convert(buf, x + r * ld, cols);
    }
  }
}

// The keys of tile [j0, j0 + cols) that query row i of batch b may see:
// columns [lo, hi) of the tile (causal: up to the diagonal; with key bounds,
// document masking, also from the row's first visible key on). Empty when
// hi <= lo.
struct Visible {
  int64_t lo = 0, hi = 0;
  int64_t count() const { return std::max<int64_t>(0, hi - lo); }
};

Visible visible(const Problem& p, int64_t b, int64_t i, int64_t j0, int64_t cols) {
  Visible v{0, p.causal ? std::min(cols, i - j0 + 1) : cols};
  if (p.doc_start) v.lo = std::clamp<int64_t>(p.doc_start[b * p.sq + i] - j0, 0, cols);
  return v;
}

// The first key any of rows [i0, i0 + rows) sees: key bounds never
// decrease along a row, but take the minimum rather than rely on it (sk:
// none of the rows sees a key).
int64_t first_visible_key(const Problem& p, int64_t b, int64_t i0, int64_t rows) {
  if (!p.doc_start) return 0;
  int64_t lo = p.sk;
  for (int64_t r = 0; r < rows; ++r) lo = std::min(lo, p.doc_start[b * p.sq + i0 + r]);
  return lo;
}

// Softmax numerators of a row restricted to columns [lo, hi): exp(x − sub)
// there, zero elsewhere in [0, width); returns their sum.
float exp_visible(float* x, const Visible& v, int64_t width, float sub) {
  std::fill(x, x + v.lo, 0.0f);
  return exp_rows(x + v.lo, v.count(), width - v.lo, sub);
}

// ---- forward --------------------------------------------------------------

template <typename T>
void forward_impl(const ForwardArgs& a) {
  const Problem& p = a.p;
  const int64_t qt = p.q_tile, kt = p.kv_tile, d = p.d, rep = p.hq / p.hkv;
  const int64_t n_qtiles = (p.sq + qt - 1) / qt;
  const T* q = static_cast<const T*>(a.q);
  const T* k = static_cast<const T*>(a.k);
  const T* v = static_cast<const T*>(a.v);
  T* out = static_cast<T*>(a.out);
  // One task per (batch, query head, query tile); each owns its output rows.
  at::parallel_for(0, p.batch * p.hq * n_qtiles, 1, [&](int64_t begin, int64_t end) {
    const SingleThreadedBlas one_thread;
    Scratch<float> s_buf(qt * kt), o_buf(qt * d), m_buf(qt), l_buf(qt);
    // bf16: Q widened once per task, K and V once per tile, P rounded in place.
    const bool wide = !std::is_same_v<T, float>;
    Scratch<float> q32(wide ? qt * d : 0), k32(wide ? kt * d : 0), v32(wide ? kt * d : 0);
    Scratch<T> row_low(wide ? kt : 0);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / (p.hq * n_qtiles), h = (task / n_qtiles) % p.hq, it = task % n_qtiles;
      const int64_t g = h / rep, i0 = it * qt, rows = std::min(qt, p.sq - i0);
      const F32Tile qi = widened(q + b * a.qs.b + h * a.qs.h + i0 * a.qs.s, a.qs.s, rows, d, q32.data());
      fill(o_buf, qt * d, 0.0f);
      fill(m_buf, qt, kNegInf);
      fill(l_buf, qt, 0.0f);
      // Causal: keys past the tile's last query are masked for every row, so
      // the tiles above the diagonal are never computed.
      const int64_t kv_end = p.causal ? i0 + rows : p.sk;
      // Key bounds (document masking): tiles wholly before every row's
      // first visible key are skipped too (the varlen saving on short
      // documents).
      const int64_t kv_begin = (first_visible_key(p, b, i0, rows) / kt) * kt;
      for (int64_t j0 = kv_begin; j0 < kv_end; j0 += kt) {
        const int64_t cols = std::min(kt, kv_end - j0);
        const F32Tile kj = widened(k + b * a.ks.b + g * a.ks.h + j0 * a.ks.s, a.ks.s, cols, d, k32.data());
        const F32Tile vj = widened(v + b * a.vs.b + g * a.vs.h + j0 * a.vs.s, a.vs.s, cols, d, v32.data());
        float* s = s_buf.data();
        tile_gemm(p.gemm, false, true, rows, cols, d, p.scale, qi.ptr, qi.ld, kj.ptr, kj.ld, 0.0f, s, kt);
        for (int64_t r = 0; r < rows; ++r) {
          float* sr = s + r * kt;
          const Visible vis = visible(p, b, i0 + r, j0, cols);
          const int64_t n = vis.count();
          const float m_old = m_buf.ptr[r];
          const float m_new = n > 0 ? std::max(m_old, row_max(sr + vis.lo, n)) : m_old;
          const float sum = n > 0 ? exp_visible(sr, vis, cols, m_new) : (std::fill(sr, sr + cols, 0.0f), 0.0f);
          // Online softmax: what was accumulated under the old maximum is
          // rescaled to the new one (exp(-inf) = 0 on the first tile).
          const float alpha = m_old == m_new ? 1.0f : std::exp(m_old - m_new);
          l_buf.ptr[r] = l_buf.ptr[r] * alpha + sum;
          m_buf.ptr[r] = m_new;
          if (alpha != 1.0f) scale_row(o_buf.data() + r * d, d, alpha);
        }
        round_to<T>(s, rows, cols, kt, row_low.data());
        tile_gemm(p.gemm, false, false, rows, d, cols, 1.0f, s, kt, vj.ptr, vj.ld, 1.0f, o_buf.data(), d);
      }
      for (int64_t r = 0; r < rows; ++r) {
        T* dst = out + b * a.os.b + h * a.os.h + (i0 + r) * a.os.s;
        // A row that saw no key (possible only with key bounds: a ring
        // block before its document) outputs 0 with lse −inf, which the
        // merge of partial results weighs 0; 1/l would make it NaN.
        const bool none = l_buf.ptr[r] == 0.0f;
        store_row(dst, o_buf.data() + r * d, d, none ? 0.0f : 1.0f / l_buf.ptr[r]);
        a.lse[(b * p.hq + h) * p.sq + i0 + r] = none ? kNegInf : m_buf.ptr[r] + std::log(l_buf.ptr[r]);
      }
    }
  });
}

// ---- backward -------------------------------------------------------------

template <typename T>
void backward_impl(const BackwardArgs& a) {
  const Problem& p = a.p;
  const int64_t qt = p.q_tile, kt = p.kv_tile, d = p.d, rep = p.hq / p.hkv;
  const int64_t n_ktiles = (p.sk + kt - 1) / kt;
  const T* q = static_cast<const T*>(a.q);
  const T* k = static_cast<const T*>(a.k);
  const T* v = static_cast<const T*>(a.v);
  const T* dout = static_cast<const T*>(a.dout);
  T* dk = static_cast<T*>(a.dk);
  T* dv = static_cast<T*>(a.dv);
  // dq of one (batch, kv group) receives a term from every kv tile; tasks of
  // the same group on different threads add their share under its lock.
  std::vector<std::mutex> group_locks(p.batch * p.hkv);
  // One task per (batch, kv head, kv tile): it owns dK/dV of its tile rows,
  // summed over the rep query heads that read this kv head, so those need
  // no synchronisation at all.
  at::parallel_for(0, p.batch * p.hkv * n_ktiles, 1, [&](int64_t begin, int64_t end) {
    const SingleThreadedBlas one_thread;
    Scratch<float> s_buf(qt * kt), dp_buf(qt * kt), dk_buf(kt * d), dv_buf(kt * d);
    // bf16: K, V (per task) and Q, dO (per query tile) widened to fp32 once,
    // and a row buffer for rounding P / dS; all five products are sgemm.
    const bool wide = !std::is_same_v<T, float>;
    Scratch<float> k32(wide ? kt * d : 0), v32(wide ? kt * d : 0), q32(wide ? qt * d : 0), do32(wide ? qt * d : 0);
    Scratch<T> row_low(wide ? kt : 0);
    // This thread's dq for the rep heads of its current group, [rep, Sq, D]:
    // linear in the sequence, one per thread.
    Scratch<float> dq_acc(rep * p.sq * d);
    int64_t cur_group = -1, first_row = p.sq;
    auto flush = [&]() {
      if (cur_group < 0 || first_row >= p.sq) return;
      const int64_t b = cur_group / p.hkv, g = cur_group % p.hkv;
      std::lock_guard<std::mutex> lock(group_locks[cur_group]);
      for (int64_t hh = 0; hh < rep; ++hh)
        for (int64_t i = first_row; i < p.sq; ++i)
          add_row(a.dq + b * a.dqs.b + (g * rep + hh) * a.dqs.h + i * a.dqs.s, dq_acc.data() + (hh * p.sq + i) * d,
                  d);
    };
    for (int64_t task = begin; task < end; ++task) {
      const int64_t group = task / n_ktiles, jt = task % n_ktiles;
      const int64_t b = group / p.hkv, g = group % p.hkv;
      const int64_t j0 = jt * kt, cols = std::min(kt, p.sk - j0);
      if (group != cur_group) {
        flush();
        cur_group = group;
        first_row = p.sq;
        fill(dq_acc, rep * p.sq * d, 0.0f);
      }
      const F32Tile kj = widened(k + b * a.ks.b + g * a.ks.h + j0 * a.ks.s, a.ks.s, cols, d, k32.data());
      const F32Tile vj = widened(v + b * a.vs.b + g * a.vs.h + j0 * a.vs.s, a.vs.s, cols, d, v32.data());
      fill(dk_buf, kt * d, 0.0f);
      fill(dv_buf, kt * d, 0.0f);
      // Causal: query rows before j0 see none of this tile's keys.
      const int64_t i_first = p.causal ? (j0 / qt) * qt : 0;
      // Key bounds: rows whose first visible key is after this tile's last
      // key see none of it; bounds never decrease, so they are a suffix.
      int64_t i_end = p.sq;
      if (p.doc_start)
        while (i_end > i_first && p.doc_start[b * p.sq + i_end - 1] > j0 + cols - 1) --i_end;
      first_row = std::min(first_row, i_first);
      for (int64_t hh = 0; hh < rep; ++hh) {
        const int64_t h = g * rep + hh;
        const float* lse = a.lse + (b * p.hq + h) * p.sq;
        const float* delta = a.delta + (b * p.hq + h) * p.sq;
        for (int64_t i0 = i_first; i0 < i_end; i0 += qt) {
          const int64_t rows = std::min(qt, p.sq - i0);
          const F32Tile qi = widened(q + b * a.qs.b + h * a.qs.h + i0 * a.qs.s, a.qs.s, rows, d, q32.data());
          const F32Tile doi =
              widened(dout + b * a.dos.b + h * a.dos.h + i0 * a.dos.s, a.dos.s, rows, d, do32.data());
          float* s = s_buf.data();
          float* dp = dp_buf.data();
          // P recomputed from the saved log-sum-exp: exp(scale·q·k − L).
          tile_gemm(p.gemm, false, true, rows, cols, d, p.scale, qi.ptr, qi.ld, kj.ptr, kj.ld, 0.0f, s, kt);
          for (int64_t r = 0; r < rows; ++r) {
            float* sr = s + r * kt;
            const Visible vis = visible(p, b, i0 + r, j0, cols);
            if (vis.count() > 0)
              exp_visible(sr, vis, cols, lse[i0 + r]);
            else
              std::fill(sr, sr + cols, 0.0f);
          }
          // dS needs the unrounded P; the rounded copy goes into dp's
          // product first, then P itself is rounded for dV (bf16 only).
          tile_gemm(p.gemm, false, true, rows, cols, d, 1.0f, doi.ptr, doi.ld, vj.ptr, vj.ld, 0.0f, dp, kt);
          for (int64_t r = 0; r < rows; ++r) ds_row(dp + r * kt, s + r * kt, cols, delta[i0 + r]);
          round_to<T>(s, rows, cols, kt, row_low.data());
          tile_gemm(p.gemm, true, false, cols, d, rows, 1.0f, s, kt, doi.ptr, doi.ld, 1.0f, dv_buf.data(), d);
          round_to<T>(dp, rows, cols, kt, row_low.data());
          tile_gemm(p.gemm, true, false, cols, d, rows, p.scale, dp, kt, qi.ptr, qi.ld, 1.0f, dk_buf.data(), d);
          tile_gemm(p.gemm, false, false, rows, d, cols, p.scale, dp, kt, kj.ptr, kj.ld, 1.0f,
                    dq_acc.data() + (hh * p.sq + i0) * d, d);
        }
      }
      for (int64_t c = 0; c < cols; ++c) {
        store_row(dk + b * a.dks.b + g * a.dks.h + (j0 + c) * a.dks.s, dk_buf.data() + c * d, d, 1.0f);
        store_row(dv + b * a.dvs.b + g * a.dvs.h + (j0 + c) * a.dvs.s, dv_buf.data() + c * d, d, 1.0f);
      }
    }
    flush();
  });
}

}  // namespace

void forward(const ForwardArgs& a) {
  if (a.p.bf16)
    forward_impl<c10::BFloat16>(a);
  else
    forward_impl<float>(a);
}

void backward(const BackwardArgs& a) {
  if (a.p.bf16)
    backward_impl<c10::BFloat16>(a);
  else
    backward_impl<float>(a);
}

}  // namespace CPU_CAPABILITY
}  // namespace titan::ops::flash_detail
