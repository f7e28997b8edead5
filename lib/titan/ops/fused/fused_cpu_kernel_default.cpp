// The fused CPU kernels for any CPU: portable at::vec, no instruction-set
// flags beyond the build's own.
#include "titan/ops/fused/fused_cpu_kernel.hpp"
