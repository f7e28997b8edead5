// The flash kernel for any x86-64 / other CPU: portable at::vec, no
// instruction-set flags beyond the build's own.
#include "titan/ops/attention/flash_cpu_kernel.hpp"
