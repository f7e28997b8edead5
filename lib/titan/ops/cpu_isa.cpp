#include "titan/ops/cpu_isa.hpp"

namespace titan::ops {

CpuIsa best_cpu_isa() {
  static const CpuIsa best = [] {
#if defined(__x86_64__) || defined(__i386__)
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
      return CpuIsa::avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CpuIsa::avx2;
#endif
    return CpuIsa::portable;
  }();
  return best;
}

}  // namespace titan::ops
