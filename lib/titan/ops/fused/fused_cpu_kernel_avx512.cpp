// The fused CPU kernels with AVX-512 F/BW/VL/DQ (flags set in lib/titan/CMakeLists.txt);
// fused_cpu.cpp calls them only where the CPU reports all four.
#include "titan/ops/fused/fused_cpu_kernel.hpp"
