#pragma once
/// @file
/// @brief The best instruction set this CPU offers to titan's own kernels
/// (the flash-attention and fused elementwise kernels are each compiled three
/// times: AVX-512, AVX2 + FMA, and portable), chosen at run time like ATen's
/// DispatchStub.

#include <string>

namespace titan::ops {

/// @brief Which compiled copy of a CPU kernel runs.
enum class CpuIsa {
  avx512,    ///< AVX-512 F/BW/VL/DQ
  avx2,      ///< AVX2 + FMA
  portable,  ///< the build's default flags
};

/// The best CpuIsa this CPU supports (asked once, then cached), capped by
/// ATEN_CPU_CAPABILITY ("avx2", "default") as ATen's own kernels are.
CpuIsa best_cpu_isa();

/// @brief The CPU's vendor string from CPUID ("GenuineIntel",
/// "AuthenticAMD", ...; "" off x86): MKL picks its kernels by it.
std::string cpu_vendor();

}  // namespace titan::ops
