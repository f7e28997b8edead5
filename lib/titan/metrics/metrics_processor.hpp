#pragma once
/// @file
/// @brief MetricsProcessor: turns what each training step measured (loss,
/// grad norm, lr, tokens, time) into torchtitan's log line (tps, TFLOPs,
/// MFU, memory, ETA), a live progress line on a terminal, and a JSON Lines
/// file for later parsing.

#include <c10/core/Device.h>
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <fstream>
#include <iosfwd>
#include <memory>
#include <limits>
#include <optional>
#include <string>

#include "titan/metrics/memory.hpp"

namespace titan::metrics {

class EventWriter;

/// @brief Fixed facts of the run.
struct MetricsOptions {
  /// A log line at step 1, every log_freq steps and at the last step (torchtitan's rule, plus the last step).
  int64_t log_freq = 10;
  /// training.steps, for the ETA and "step 7/100" (0: unknown, no ETA).
  int64_t total_steps = 0;
  /// Model training FLOPs per token (models/llama3's flops_per_token:
  /// 6N + 12·L·H·Q·T). 0: no TFLOPs / MFU.
  double flops_per_token = 0;
  /// Peak FLOP/s of one rank (peak_flops_for_device, or cpu_peak_flops).
  /// 0: no MFU.
  double peak_flops = 0;
  /// Ranks the job's tokens are divided among for per-rank tps (the world size).
  int num_ranks = 1;
  /// Whose memory to report.
  c10::Device device = c10::Device(c10::kCPU);
  /// JSON Lines output; empty = none. Appended to (a resumed run continues it).
  std::string jsonl_path;
  /// One JSONL record per step (true) or only per log line (false).
  bool jsonl_every_step = true;
  /// TensorBoard folder (tensorboard_run_dir); empty = none. Each log line's
  /// values are also written there as scalars under torchtitan's tags (see
  /// write_tensorboard).
  std::string tensorboard_dir;
  /// Print to the console (set false on all but one rank).
  bool console = true;
  /// Live `\r` progress line between log lines: -1 = when stdout is a
  /// terminal, 0 = never, 1 = always.
  int progress = -1;
  /// Where console output goes; nullptr = std::cout.
  std::ostream* out = nullptr;
};

/// @brief What one step measured. The loss and grad norm are the job-wide
/// values (already reduced over data-parallel ranks by the trainer).
struct StepInput {
  int64_t step = 0;  ///< 1-based training step
  double loss = 0;
  /// The largest of the data-parallel ranks' losses (torchtitan's
  /// global_max_loss); NaN = not known (then not logged).
  double max_loss = std::numeric_limits<double>::quiet_NaN();
  double grad_norm = 0;
  double lr = 0;
  int64_t tokens = 0;         ///< tokens the whole job trained on this step
  double step_seconds = 0;    ///< wall time of the whole step (data included)
  double data_seconds = 0;    ///< part of it spent waiting for data
};

/// @brief The metrics of one interval (since the previous log line, or one
/// step for per-step JSONL records), as logged.
struct LogRecord {
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0, grad_norm = 0, lr = 0;
  double max_loss = std::numeric_limits<double>::quiet_NaN();  ///< NaN = not known
  int64_t interval_steps = 0;   ///< steps the rates below average over
  double interval_seconds = 0;
  double tps = 0;               ///< tokens/s per rank
  double tflops = 0;            ///< achieved model TFLOP/s per rank
  double mfu_pct = 0;           ///< 0 when no peak / flops were given
  double step_seconds = 0;      ///< mean step time over the interval
  double data_seconds = 0;      ///< mean data-loading time over the interval
  double elapsed_seconds = 0;   ///< sum of all step times so far
  double eta_seconds = -1;      ///< remaining steps × mean step time; -1 unknown
  int64_t tokens_seen = 0;      ///< job-wide tokens so far
  std::optional<MemoryStats> memory;
};

/// @brief What one validation measured, job-wide ([validation]).
struct ValidationRecord {
  int64_t step = 0;     ///< the training step after which it ran
  double loss = 0;      ///< summed loss of every counted target over their number (all ranks' batches)
  int64_t targets = 0;  ///< targets counted (labels other than -100), job-wide
  int64_t batches = 0;  ///< batches each data-parallel rank ran
  double seconds = 0;   ///< wall time of the validation
};

/// @brief `validate step: 10  loss:  7.1234  targets: 4,096  batches: 2  time: 0.12s`.
std::string format_validation_line(const ValidationRecord& r);

/// @brief The console line, torchtitan's format plus lr and ETA:
/// `step: 10  loss:  7.2345  grad_norm:  1.2300  lr: 3.0000e-04  memory: 1.20GiB(3.75%)  tps: 12,345  tflops: 1.23  mfu: 12.34%  eta: 1:23`
/// (memory, tflops, mfu and eta are left out when unknown).
std::string format_log_line(const LogRecord& r);

/// @brief The short live line: `step 7/100  loss 7.2345  tps 12,345  mfu 1.23%  eta 1:23`.
std::string format_progress_line(const LogRecord& r);

/// @brief The JSONL object of a record (non-finite numbers become null, as
/// JSON has no NaN).
nlohmann::json to_json(const LogRecord& r);

/// @brief Writes a log line's values to TensorBoard under torchtitan's tags:
/// loss_metrics/global_avg_loss, grad_norm, lr, throughput(tps), tflops and
/// mfu(%) (when known), time_metrics/end_to_end(s) (mean step time),
/// time_metrics/data_loading(s) and (%), and with a memory reading
/// memory/max_active(GiB) (CUDA max allocated; CPU peak RSS), (%),
/// memory/max_reserved(GiB), (%), memory/num_alloc_retries, memory/num_ooms.
void write_tensorboard(EventWriter& w, const LogRecord& r);

/// @brief Feed it every step; it logs, draws progress and writes JSONL
/// (and TensorBoard scalars at each log line).
class MetricsProcessor {
 public:
  /// Opens the JSONL file (throws titan::Error naming it if it cannot).
  explicit MetricsProcessor(MetricsOptions options);
  /// Ends a pending progress line with a newline.
  ~MetricsProcessor();
  MetricsProcessor(const MetricsProcessor&) = delete;
  MetricsProcessor& operator=(const MetricsProcessor&) = delete;

  /// Records one step. On a log step returns the interval's record (after
  /// printing it); otherwise updates the progress line and returns nullopt.
  std::optional<LogRecord> record(const StepInput& in);

  /// True at step 1, every log_freq steps and at the last step.
  bool should_log(int64_t step) const;

  /// Records a validation: its console line, a JSONL record {"step",
  /// "validation_loss", "validation_targets", "validation_batches"} (no
  /// "loss" key: readers of the training curve skip it) and the
  /// TensorBoard scalar validation/loss.
  void record_validation(const ValidationRecord& r);

  /// Prints a message line (a warning, a checkpoint note) without tearing
  /// the progress line: it is cleared first and redrawn by the next step.
  void print(const std::string& line);

  /// Ends a pending progress line (call before other output at the end).
  void finish();

  const MetricsOptions& options() const { return options_; }
  /// The TensorBoard event writer, or nullptr when tensorboard_dir is empty.
  EventWriter* tensorboard() const { return tensorboard_.get(); }

 private:
  LogRecord make_record(const StepInput& in, int64_t steps, double seconds, double data_seconds,
                        int64_t tokens) const;
  std::ostream& out() const;
  void write_jsonl(const LogRecord& r);

  MetricsOptions options_;
  bool progress_enabled_ = false;
  bool progress_pending_ = false;
  std::unique_ptr<std::ofstream> jsonl_;
  std::unique_ptr<EventWriter> tensorboard_;
  // Since the previous log line.
  int64_t interval_steps_ = 0;
  double interval_seconds_ = 0;
  double interval_data_seconds_ = 0;
  int64_t interval_tokens_ = 0;
  // Whole run.
  double elapsed_seconds_ = 0;
  int64_t tokens_seen_ = 0;
};

}  // namespace titan::metrics
