#include "titan/train/host_memory_check.hpp"

#include <cstdlib>
#include <cstring>

#include "titan/estimate/memory_estimate.hpp"
#include "titan/metrics/memory.hpp"
#include "titan/util/error.hpp"
#include "titan/util/strprintf.hpp"

namespace titan::train {

std::string host_memory_shortfall(int64_t per_rank_bytes, int64_t local_ranks, int64_t available_bytes,
                                  const std::string& peak_phase) {
  const int64_t needed = per_rank_bytes * local_ranks;
  if (available_bytes <= 0 || needed <= available_bytes) return "";
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const std::string ranks =
      local_ranks == 1 ? "" : strprintf(", %.1f GiB for the %lld ranks on this host,",
                                        static_cast<double>(needed) / kGiB, static_cast<long long>(local_ranks));
  return strprintf("this job needs about %.1f GiB of memory per rank (titan estimate's peak, at the %s)%s and this "
                   "host has %.1f GiB available: lower [training] batch_size or seq_len, set "
                   "[activation_checkpoint] mode = \"full\", or spread it over more hosts "
                   "(TITAN_SKIP_MEMORY_CHECK=1 runs it anyway)",
                   static_cast<double>(per_rank_bytes) / kGiB, peak_phase.c_str(), ranks.c_str(),
                   static_cast<double>(available_bytes) / kGiB);
}

void check_host_memory(const models::llama3::JobLayout& layout, int64_t local_ranks) {
  if (const char* skip = std::getenv("TITAN_SKIP_MEMORY_CHECK"); skip && std::strcmp(skip, "1") == 0) return;
  const int64_t available = metrics::host_available_bytes();
  if (available <= 0) return;  // not Linux, or an old kernel: nothing to compare with
  estimate::JobEstimate e;
  try {
    e = estimate::estimate_job(layout);
  } catch (const Error&) {
    return;  // a layout the estimate does not model: run it, as before
  }
  const estimate::RankMemory& worst = e.worst();
  const std::string line = host_memory_shortfall(worst.peak, local_ranks, available, worst.peak_phase);
  TITAN_CHECK(line.empty(), line);
}

}  // namespace titan::train
