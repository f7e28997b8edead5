#pragma once
/// @file
/// @brief Refusing a CPU job that cannot fit the host's memory, before it
/// starts: the kernel's OOM killer ends such a job without a word (or it
/// swaps for hours), so the trainer asks `titan estimate` first.

#include <cstdint>
#include <string>

#include "titan/models/llama3/job_layout.hpp"

namespace titan::train {

/// @brief The error line for a job whose ranks on this host need
/// `per_rank_bytes` each (the estimate's peak) when the host has
/// `available_bytes` free; "" when they fit. `peak_phase` says where the
/// estimate peaks ("start of backward").
std::string host_memory_shortfall(int64_t per_rank_bytes, int64_t local_ranks, int64_t available_bytes,
                                  const std::string& peak_phase);

/// @brief Throws titan::Error with host_memory_shortfall's line when the
/// estimate of the job's `layout`, times the `local_ranks` on this host,
/// exceeds the host's MemAvailable. TITAN_SKIP_MEMORY_CHECK=1 skips it,
/// and so does a layout the estimate cannot model (the trainer then runs
/// as it would have).
void check_host_memory(const models::llama3::JobLayout& layout, int64_t local_ranks);

}  // namespace titan::train
