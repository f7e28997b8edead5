#include "titan/util/host_allocator.hpp"

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace titan {

bool host_allocator_set_by_user() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) return true;
  return std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr || std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr;
}

bool keep_freed_host_memory() {
#if defined(__GLIBC__)
  if (host_allocator_set_by_user()) return false;  // the user's own settings win over ours
  // 32 MiB is glibc's ceiling for the mmap threshold on 64-bit (a larger
  // value is refused); blocks above it (a large model's logits, say) keep
  // their own mappings. Setting either threshold also stops glibc's dynamic
  // adjustment of both.
  constexpr int kMmapThreshold = 32 << 20;
  constexpr int kTrimThreshold = 1 << 30;
  return mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 && mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
#else
  return false;
#endif
}

}  // namespace titan
