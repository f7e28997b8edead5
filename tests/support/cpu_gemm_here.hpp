#pragma once
// What the tests expect `[model] cpu_matmul = "auto"` to choose on the
// machine they run on (ops/gemm/cpu_matmul.hpp's rule, stated once for the
// tests that check it): oneDNN's GEMM where its plugin loads, off Intel
// CPUs (MKL's own kernels there) and with its AVX-512 kernels (not under
// ONEDNN_MAX_CPU_ISA=AVX2, not on a CPU without AVX-512).

#include <cstdlib>
#include <string>

#include "titan/ops/cpu_isa.hpp"

namespace titan::testing {

struct CpuGemmHere {
  bool intel = false;   ///< a GenuineIntel CPU
  bool avx512 = false;  ///< AVX-512 present and not capped by ONEDNN_MAX_CPU_ISA=AVX2
  /// "auto" would take oneDNN here, if its plugin loads.
  bool auto_takes_onednn() const { return !intel && avx512; }
};

inline CpuGemmHere cpu_gemm_here() {
  CpuGemmHere h;
  h.intel = titan::ops::cpu_vendor() == "GenuineIntel";
  const char* isa_cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  h.avx512 = __builtin_cpu_supports("avx512f") && !(isa_cap != nullptr && std::string(isa_cap) == "AVX2");
  return h;
}

}  // namespace titan::testing
