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
  const auto done = static_cast<long long>(s.steps_done);
  const auto planned = static_cast<long long>(s.steps_planned);
  const auto resumed = static_cast<long long>(s.resumed_from);
  if (s.losses.empty() && s.resumed_from > 0) {
    return strprintf("training done: nothing to run, the checkpoint of step %lld is at [training] steps = %lld%s\n",
                     resumed, planned, resumed > planned ? " or past it" : "");
  }
  std::string out = strprintf("training %s: %lld/%lld steps in %s", s.interrupted ? "stopped" : "done", done, planned,
                              metrics::duration(s.wall_seconds).c_str());
  if (s.resumed_from > 0)
    out += strprintf(" (%zu in this run, resumed from the checkpoint of step %lld)", s.losses.size(), resumed);
  out += "\n";
  if (s.losses.empty()) return out;
  const auto first = static_cast<long long>(s.first_step());
  out += strprintf("  loss      %.4f (step %lld) -> %.4f (step %lld)%s\n", s.first_loss(), first, s.last_loss(), done,
                   s.fake_rank ? " (not a result: a fake rank computes on data no peer sent)" : "");
  if (!s.validation_losses.empty())
    out += strprintf("  val loss  %.4f (step %lld) -> %.4f (step %lld)\n", s.validation_losses.front().second,
                     static_cast<long long>(s.validation_losses.front().first), s.validation_losses.back().second,
                     static_cast<long long>(s.validation_losses.back().first));
  out += "  tokens/s  " + metrics::with_thousands(s.mean_tps) + " per rank";
  if (s.losses.size() > 2)
    out += strprintf(" (mean of steps %lld-%lld)\n", first + 1, done);
  else
    out += strprintf(s.losses.size() == 2 ? " (step %lld)\n" : " (step %lld only)\n", done);
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
