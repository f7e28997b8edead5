#include "titan/util/host_allocator.hpp"

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace titan {
namespace {

// The user's own allocator settings win over ours.
bool user_tuned_allocator() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) return true;
  return std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr || std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr;
}

}  // namespace

bool keep_freed_host_memory() {
#if defined(__GLIBC__)
  if (user_tuned_allocator()) return false;
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
