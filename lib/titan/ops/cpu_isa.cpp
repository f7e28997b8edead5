#include "titan/ops/cpu_isa.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <cstdlib>
#include <cstring>

namespace titan::ops {

CpuIsa best_cpu_isa() {
  static const CpuIsa best = [] {
    CpuIsa cpu = CpuIsa::portable;
#if defined(__x86_64__) || defined(__i386__)
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
      cpu = CpuIsa::avx512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      cpu = CpuIsa::avx2;
#endif
    // ATEN_CPU_CAPABILITY caps it as it caps ATen's DispatchStub ("avx2",
    // "default"; a value above the CPU's changes nothing): one variable runs
    // an AVX-512 machine's kernels as an AVX2-only CPU would, titan's too.
    const char* cap = std::getenv("ATEN_CPU_CAPABILITY");
    if (cap != nullptr && std::strcmp(cap, "default") == 0) return CpuIsa::portable;
    if (cap != nullptr && std::strcmp(cap, "avx2") == 0 && cpu == CpuIsa::avx512) return CpuIsa::avx2;
    return cpu;
  }();
  return best;
}

std::string cpu_vendor() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return "";
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  return vendor;
#else
  return "";
#endif
}

}  // namespace titan::ops
