#pragma once
/// @file
/// @brief Keeps the host allocator from handing a training step's freed
/// activation memory back to the kernel, only to fault it in again, page by
/// page, on the next step.
///
/// glibc's malloc serves a block above its mmap threshold (128 KiB at first,
/// raised on the fly up to 32 MiB) with a fresh mmap and unmaps it on free,
/// and returns the heap's free top to the kernel once it exceeds the trim
/// threshold. A CPU training step allocates and frees the same megabyte-sized
/// activations and gradients every step, so with the defaults each step
/// starts from pages the kernel must zero and map again: about 3,000 minor
/// page faults per step of the debug model and 20,000 per step of a
/// dim-1024 one (measured with /usr/bin/time; docs/train.md). PyTorch's CPU
/// performance guide suggests swapping in jemalloc or tcmalloc for the same
/// reason; titan sets glibc's own two thresholds instead.

namespace titan {

/// @brief Raises glibc's mmap threshold to its maximum (32 MiB on 64-bit)
/// and its trim threshold to 1 GiB, so that freed blocks below 32 MiB stay
/// in the process for reuse. Leaves the allocator alone where the user chose
/// its settings (GLIBC_TUNABLES naming glibc.malloc, MALLOC_MMAP_THRESHOLD_
/// or MALLOC_TRIM_THRESHOLD_ in the environment) and on a C library other
/// than glibc. Call once, early in main(). Returns whether it changed them.
bool keep_freed_host_memory();

/// @brief Whether the environment sets glibc's malloc thresholds itself
/// (GLIBC_TUNABLES naming glibc.malloc, MALLOC_MMAP_THRESHOLD_ or
/// MALLOC_TRIM_THRESHOLD_), in which case keep_freed_host_memory() leaves
/// them alone.
bool host_allocator_set_by_user();

}  // namespace titan
