// The flash kernel with AVX-512 (F/BW/VL/DQ, flags set in
// lib/titan/CMakeLists.txt): 16 fp32 lanes for the softmax work between
// the tile products; flash_cpu.cpp calls it only where the CPU reports them.
#include "titan/ops/attention/flash_cpu_kernel.hpp"
