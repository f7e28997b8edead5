// titan's oneDNN plugin (libtitan_onednn.so): oneDNN's matmul primitive,
// cached per shape and layout, behind two C functions that
// onednn_sgemm.cpp finds with dlsym. Compiled without LibTorch's include
// directories and linked to the system's libdnnl (onednn_sgemm.hpp says
// why). Errors travel back as messages, not exceptions: nothing C++ crosses
// the boundary but the plain Matrix struct.
#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "titan/ops/gemm/onednn_sgemm.hpp"

namespace {

using titan::ops::onednn::Matrix;
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

struct Cached {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
};

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::memory::desc desc_of(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  return dnnl::memory::desc({rows, cols}, dnnl::memory::data_type::f32, dnnl::memory::dims{row_stride, col_stride});
}

// The primitive for this shape and layout, made on first use. Creating
// one costs a JIT compile (tens of microseconds to milliseconds); a
// training step reuses a handful of shapes.
const Cached& primitive_for(const Matrix& a, const Matrix& b, int64_t ldc) {
  static std::mutex mutex;
  static std::map<Key, Cached> cache;
  const Key key{a.rows, a.cols, b.cols, a.row_stride, a.col_stride, b.row_stride, b.col_stride, ldc};
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const auto src = desc_of(a.rows, a.cols, a.row_stride, a.col_stride);
  const auto weights = desc_of(b.rows, b.cols, b.row_stride, b.col_stride);
  const auto dst = desc_of(a.rows, b.cols, ldc, 1);
  Cached c;
  c.pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, dst), cpu_engine());
  c.prim = dnnl::matmul(c.pd);
  return cache.emplace(key, std::move(c)).first->second;
}

// The message of the last failure on this thread.
thread_local std::string t_error;

const char* fail(const char* what) {
  t_error = what;
  return t_error.c_str();
}

}  // namespace

extern "C" {

/// C = A·B; nullptr on success, else oneDNN's message.
__attribute__((visibility("default"))) const char* titan_onednn_sgemm(const Matrix* a, const Matrix* b, float* c,
                                                                       int64_t ldc) {
  try {
    const Cached& p = primitive_for(*a, *b, ldc);
    dnnl::engine& engine = cpu_engine();
    dnnl::stream stream(engine);
    // oneDNN's memory objects take non-const handles; the primitive only
    // reads SRC and WEIGHTS.
    dnnl::memory src(p.pd.src_desc(), engine, const_cast<float*>(a->data));
    dnnl::memory weights(p.pd.weights_desc(), engine, const_cast<float*>(b->data));
    dnnl::memory dst(p.pd.dst_desc(), engine, c);
    p.prim.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    stream.wait();
    return nullptr;
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

/// The implementation's name in *impl; nullptr on success, else the message.
__attribute__((visibility("default"))) const char* titan_onednn_implementation(const Matrix* a, const Matrix* b,
                                                                                int64_t ldc, const char** impl) {
  try {
    *impl = primitive_for(*a, *b, ldc).pd.impl_info_str();
    return nullptr;
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

}  // extern "C"
