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
    // RTLD_DEEPBIND: the plugin and libdnnl resolve their symbols in their
    // own libraries first. libtorch_cpu (loaded first, into the global scope)
    // defines some of the same weak symbols as Debian's libdnnl 2.6 for its
    // own oneDNN 3: std::call_once's trampolines for the lambdas of
    // dnnl::impl::cpu::x64::gemm_info_t<...>::jit_init among them. Bound to
    // LibTorch's copies, libdnnl's jit GEMM ("gemm:jit", what oneDNN runs
    // below AVX-512, e.g. ONEDNN_MAX_CPU_ISA=AVX2) never made its kernels
    // and failed from its second call on ("could not execute a primitive",
    // status unimplemented). AddressSanitizer refuses RTLD_DEEPBIND; under
    // it the plugin loads without it and the check in cpu_matmul.cpp
    // (verified_onednn) decides whether its GEMM is used.
    int flags = RTLD_NOW | RTLD_LOCAL;
    if (dlsym(RTLD_DEFAULT, "__asan_init") == nullptr) flags |= RTLD_DEEPBIND;
    void* handle = dlopen(path.c_str(), flags);
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
