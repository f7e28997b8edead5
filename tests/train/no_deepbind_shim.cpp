// LD_PRELOAD shim for TrainCli.AutoChecksOneDnnBeforeUsingIt: titan's
// dlopen of its oneDNN plugin without RTLD_DEEPBIND, which brings back the
// symbol clash that broke oneDNN's jit GEMM (ops/gemm/onednn_sgemm.cpp):
// with ONEDNN_MAX_CPU_ISA=AVX2 its GEMM then fails, and "auto" must notice.
#include <dlfcn.h>

#include <cstring>

extern "C" __attribute__((visibility("default"))) void* dlopen(const char* file, int flags) {
  using Dlopen = void* (*)(const char*, int);
  static Dlopen real = reinterpret_cast<Dlopen>(dlsym(RTLD_NEXT, "dlopen"));
  if (file != nullptr && std::strstr(file, "libtitan_onednn") != nullptr) flags &= ~RTLD_DEEPBIND;
  return real(file, flags);
}
