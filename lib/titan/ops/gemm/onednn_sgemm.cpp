// onednn_sgemm.hpp: finds titan's oneDNN plugin beside libtitan.so and
// calls it.
#include "titan/ops/gemm/onednn_sgemm.hpp"

#include <dlfcn.h>

#include "titan/util/error.hpp"

namespace titan::ops::onednn {
namespace {

using SgemmFn = const char* (*)(const Matrix*, const Matrix*, float*, int64_t);
using ImplementationFn = const char* (*)(const Matrix*, const Matrix*, int64_t, const char**);

struct Plugin {
  SgemmFn sgemm = nullptr;
  ImplementationFn implementation = nullptr;
  std::string error;  // why it is not loaded
};

// Loaded once, on first use: from the folder libtitan.so was loaded from.
const Plugin& plugin() {
  static const Plugin p = [] {
    Plugin out;
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&available), &info) == 0 || info.dli_fname == nullptr) {
      out.error = "cannot tell where libtitan.so was loaded from";
      return out;
    }
    std::string dir = info.dli_fname;
    dir = dir.substr(0, dir.find_last_of('/') + 1);
    const std::string path = dir + "libtitan_onednn.so";
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* e = dlerror();
      out.error = e ? e : "dlopen failed: " + path;
      return out;
    }
    out.sgemm = reinterpret_cast<SgemmFn>(dlsym(handle, "titan_onednn_sgemm"));
    out.implementation = reinterpret_cast<ImplementationFn>(dlsym(handle, "titan_onednn_implementation"));
    if (!out.sgemm || !out.implementation) {
      out.error = path + " lacks titan_onednn_sgemm / titan_onednn_implementation";
      out.sgemm = nullptr, out.implementation = nullptr;
    }
    return out;
  }();
  return p;
}

std::string describe(const Matrix& a, const Matrix& b, int64_t ldc) {
  auto m = [](const Matrix& x) {
    return std::to_string(x.rows) + "x" + std::to_string(x.cols) + " (strides " + std::to_string(x.row_stride) +
           ", " + std::to_string(x.col_stride) + ")";
  };
  return m(a) + " by " + m(b) + " into a row stride of " + std::to_string(ldc);
}

void check(const Matrix& a, const Matrix& b, int64_t ldc) {
  TITAN_CHECK(available(), "oneDNN GEMM: not available (", unavailable_reason(), ")");
  TITAN_CHECK(a.cols == b.rows && ldc >= b.cols, "oneDNN GEMM: cannot multiply ", describe(a, b, ldc));
}

}  // namespace

bool available() { return plugin().sgemm != nullptr; }

std::string unavailable_reason() { return plugin().error; }

void sgemm(const Matrix& a, const Matrix& b, float* c, int64_t ldc) {
  check(a, b, ldc);
  const char* error = plugin().sgemm(&a, &b, c, ldc);
  TITAN_CHECK(error == nullptr, "oneDNN GEMM: ", error, " for ", describe(a, b, ldc));
}

std::string implementation(const Matrix& a, const Matrix& b, int64_t ldc) {
  check(a, b, ldc);
  const char* impl = nullptr;
  const char* error = plugin().implementation(&a, &b, ldc, &impl);
  TITAN_CHECK(error == nullptr, "oneDNN GEMM: ", error, " for ", describe(a, b, ldc));
  return impl;
}

}  // namespace titan::ops::onednn
