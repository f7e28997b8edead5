#include "titan/metrics/mfu.hpp"

#include "titan/util/error.hpp"

namespace titan::metrics {

double tokens_per_second_per_rank(double tokens, double seconds, int num_ranks) {
  TITAN_CHECK(num_ranks > 0, "tokens_per_second_per_rank: num_ranks must be > 0, got ", num_ranks);
  // A zero interval (clock granularity on a tiny step) reports 0 rather
  // than inf, which would poison averages and the JSON (no inf in JSON).
  if (seconds <= 0) return 0.0;
  return tokens / seconds / num_ranks;
}

double achieved_flops_per_rank(double flops_per_token, double tps_per_rank) {
  return flops_per_token * tps_per_rank;
}

double mfu_percent(double flops_per_token, double tps_per_rank, double peak_flops_per_rank) {
  if (peak_flops_per_rank <= 0) return 0.0;
  return 100.0 * flops_per_token * tps_per_rank / peak_flops_per_rank;
}

double mfu_percent_from_step(double flops_per_step, double step_seconds, int num_devices,
                             double peak_flops_per_device) {
  if (step_seconds <= 0 || num_devices <= 0 || peak_flops_per_device <= 0) return 0.0;
  return 100.0 * flops_per_step / step_seconds / (num_devices * peak_flops_per_device);
}

}  // namespace titan::metrics
