// The fused CPU kernels with AVX2 + FMA (flags set in lib/titan/CMakeLists.txt);
// fused_cpu.cpp calls them only where the CPU reports both.
#include "titan/ops/fused/fused_cpu_kernel.hpp"
