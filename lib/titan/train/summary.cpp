#include "titan/train/summary.hpp"

#include <limits>

#include "titan/metrics/format.hpp"
#include "titan/util/strprintf.hpp"

namespace titan::train {

using titan::strprintf;

double TrainSummary::first_loss() const {
  return losses.empty() ? std::numeric_limits<double>::quiet_NaN() : losses.front();
}

double TrainSummary::last_loss() const {
  return losses.empty() ? std::numeric_limits<double>::quiet_NaN() : losses.back();
}

std::string format_summary(const TrainSummary& s) {
  const auto n = static_cast<long long>(s.steps_done);
  std::string out = strprintf("training %s: %lld/%lld steps in %s\n", s.interrupted ? "stopped" : "done", n,
                              static_cast<long long>(s.steps_planned), metrics::duration(s.wall_seconds).c_str());
  if (s.steps_done == 0) return out;
  out += strprintf("  loss      %.4f (step 1) -> %.4f (step %lld)\n", s.first_loss(), s.last_loss(), n);
  if (!s.validation_losses.empty())
    out += strprintf("  val loss  %.4f (step %lld) -> %.4f (step %lld)\n", s.validation_losses.front().second,
                     static_cast<long long>(s.validation_losses.front().first), s.validation_losses.back().second,
                     static_cast<long long>(s.validation_losses.back().first));
  out += "  tokens/s  " + metrics::with_thousands(s.mean_tps) + " per rank";
  out += s.steps_done > 1 ? strprintf(" (mean of steps 2-%lld)\n", n) : std::string(" (step 1 only)\n");
  if (s.mean_tflops > 0) {
    out += strprintf("  compute   %.3f TFLOP/s", s.mean_tflops);
    if (s.mfu_pct > 0) {
      out += strprintf(", MFU %.2f%% of %.3f TFLOP/s (%s)", s.mfu_pct, s.peak_flops / 1e12, s.peak_source.c_str());
    }
    out += "\n";
  }
  if (!s.jsonl_path.empty()) out += "  metrics   " + s.jsonl_path + "\n";
  if (!s.tensorboard_dir.empty()) out += "  tensorboard " + s.tensorboard_dir + "\n";
  return out;
}

}  // namespace titan::train
