#pragma once
/// @file
/// @brief What a finished (or stopped) run reports: the numbers a person
/// checks first — did the loss fall, how fast was it, how close to peak.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace titan::train {

/// @brief The end-of-run numbers.
struct TrainSummary {
  int64_t steps_done = 0;       ///< optimizer steps completed
  int64_t steps_planned = 0;    ///< [training] steps
  /// The checkpoint step this run resumed from (0: it started at step 1);
  /// `losses` then begins with step resumed_from + 1.
  int64_t resumed_from = 0;
  bool interrupted = false;     ///< stopped early by Ctrl-C / SIGTERM
  /// A fake rank's run ([comm] mode = "fake_backend"): its losses are not
  /// results, and the summary says so.
  bool fake_rank = false;
  std::vector<double> losses;   ///< the loss of every step this run ran, in order
  /// [validation]: (step, loss) of every validation, in order.
  std::vector<std::pair<int64_t, double>> validation_losses;
  double wall_seconds = 0;      ///< the loop's wall time, first step to last
  /// Tokens per second per rank, over the steps after the first (the first
  /// pays for one-time allocations and kernel selection); over all steps
  /// when only one ran.
  double mean_tps = 0;
  double mean_tflops = 0;       ///< achieved model TFLOP/s per rank, same steps
  double mfu_pct = 0;           ///< MFU in percent, same steps (0: unknown peak)
  double peak_flops = 0;        ///< the MFU denominator (FLOP/s per rank)
  std::string peak_source;      ///< where the peak came from, for the summary
  std::string jsonl_path;       ///< the JSON Lines metrics file ("" = none)
  std::string tensorboard_dir;  ///< the TensorBoard event folder ("" = none)

  /// @brief Loss of the first step this run ran (NaN when none ran).
  double first_loss() const;
  /// @brief The first step this run ran: 1, or the step after the
  /// checkpoint it resumed from.
  int64_t first_step() const { return resumed_from + 1; }
  /// @brief Loss of the last step (NaN when no step ran).
  double last_loss() const;
};

/// @brief The summary as a few aligned lines:
/// @code
/// training done: 100/100 steps in 0:41
///   loss      7.6541 (step 1) -> 4.9012 (step 100)
///   tokens/s  1,250 per rank (mean of steps 2-100)
///   compute   0.25 TFLOP/s, MFU 21.40% of 1.17 TFLOP/s (measured CPU GEMM peak)
///   metrics   ./outputs/metrics.jsonl
///   tensorboard ./outputs/tb/20260101-1200 (when [metrics] enable_tensorboard)
/// @endcode
/// A resumed run says so and numbers the steps it ran ("loss 5.1 (step 501)
/// -> 4.9 (step 1000)", "mean of steps 502-1000"); one resumed at or past
/// [training] steps says that nothing was left to run.
std::string format_summary(const TrainSummary& s);

}  // namespace titan::train
