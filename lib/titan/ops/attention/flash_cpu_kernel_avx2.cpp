// The flash kernel with AVX2 + FMA (flags set in lib/titan/CMakeLists.txt);
// flash_cpu.cpp calls it only where the CPU reports both.
#include "titan/ops/attention/flash_cpu_kernel.hpp"
