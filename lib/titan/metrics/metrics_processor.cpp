#include "titan/metrics/metrics_processor.hpp"

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>

#include "titan/metrics/format.hpp"
#include "titan/metrics/mfu.hpp"
#include "titan/metrics/tensorboard.hpp"
#include "titan/util/error.hpp"
#include "titan/util/strprintf.hpp"

namespace titan::metrics {

using nlohmann::json;

namespace {

// JSON has no NaN/inf: a diverged loss must still leave a parseable line.
json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// torchtitan's `{tflops:,.2f}`: two decimals, thousands separators.
std::string thousands_2f(double v) {
  if (!std::isfinite(v) || std::fabs(v) < 1000) return strprintf("%.2f", v);
  const double whole = std::trunc(v);
  return with_thousands(whole) + strprintf("%.2f", std::fabs(v - whole)).substr(1);
}

}  // namespace

std::string format_log_line(const LogRecord& r) {
  // Field widths as torchtitan's MetricsProcessor.log (step:2, loss:7.4f,
  // grad_norm:7.4f, memory:5.2f) so that lines of both line up alike.
  std::string s = strprintf("step: %2lld  loss: %7.4f  grad_norm: %7.4f  lr: %.4e",
                            static_cast<long long>(r.step), r.loss, r.grad_norm, r.lr);
  if (r.memory) {
    s += strprintf("  memory: %5.2fGiB(%.2f%%)",
                   static_cast<double>(r.memory->peak_bytes) / (1024.0 * 1024.0 * 1024.0),
                   r.memory->peak_pct);
  }
  s += "  tps: " + with_thousands(r.tps);
  if (r.tflops > 0) s += "  tflops: " + thousands_2f(r.tflops);
  if (r.mfu_pct > 0) s += strprintf("  mfu: %.2f%%", r.mfu_pct);
  if (r.eta_seconds >= 0) s += "  eta: " + duration(r.eta_seconds);
  return s;
}

std::string format_progress_line(const LogRecord& r) {
  std::string s = r.total_steps > 0
                      ? strprintf("step %lld/%lld", static_cast<long long>(r.step),
                                  static_cast<long long>(r.total_steps))
                      : strprintf("step %lld", static_cast<long long>(r.step));
  s += strprintf("  loss %.4f  tps ", r.loss) + with_thousands(r.tps);
  if (r.mfu_pct > 0) s += strprintf("  mfu %.2f%%", r.mfu_pct);
  if (r.eta_seconds >= 0) s += "  eta " + duration(r.eta_seconds);
  return s;
}

json to_json(const LogRecord& r) {
  json j = {
      {"step", r.step},
      {"loss", number(r.loss)},
      {"max_loss", number(r.max_loss)},
      {"grad_norm", number(r.grad_norm)},
      {"lr", number(r.lr)},
      {"tps", number(r.tps)},
      {"tflops", number(r.tflops)},
      {"mfu_pct", number(r.mfu_pct)},
      {"interval_steps", r.interval_steps},
      {"step_time_s", number(r.step_seconds)},
      {"data_time_s", number(r.data_seconds)},
      {"elapsed_s", number(r.elapsed_seconds)},
      {"tokens_seen", r.tokens_seen},
  };
  if (r.eta_seconds >= 0) j["eta_s"] = number(r.eta_seconds);
  if (r.memory) {
    const MemoryStats& m = *r.memory;
    j["memory"] = {
        {"kind", m.kind},
        {"peak_bytes", m.peak_bytes},
        {"peak_pct", number(m.peak_pct)},
        {"max_allocated_bytes", m.max_allocated_bytes},
        {"max_reserved_bytes", m.max_reserved_bytes},
        {"current_bytes", m.current_bytes},
        {"capacity_bytes", m.capacity_bytes},
        {"num_alloc_retries", m.num_alloc_retries},
        {"num_ooms", m.num_ooms},
    };
  }
  return j;
}

void write_tensorboard(EventWriter& w, const LogRecord& r) {
  const int64_t step = r.step;
  w.add_scalar("loss_metrics/global_avg_loss", r.loss, step);
  if (!std::isnan(r.max_loss)) w.add_scalar("loss_metrics/global_max_loss", r.max_loss, step);
  w.add_scalar("grad_norm", r.grad_norm, step);
  w.add_scalar("lr", r.lr, step);
  w.add_scalar("throughput(tps)", r.tps, step);
  if (r.tflops > 0) w.add_scalar("tflops", r.tflops, step);
  if (r.mfu_pct > 0) w.add_scalar("mfu(%)", r.mfu_pct, step);
  w.add_scalar("time_metrics/end_to_end(s)", r.step_seconds, step);
  w.add_scalar("time_metrics/data_loading(s)", r.data_seconds, step);
  w.add_scalar("time_metrics/data_loading(%)", r.step_seconds > 0 ? 100.0 * r.data_seconds / r.step_seconds : 0.0,
               step);
  if (r.memory) {
    const MemoryStats& m = *r.memory;
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    const double cap = static_cast<double>(m.capacity_bytes);
    w.add_scalar("memory/max_active(GiB)", static_cast<double>(m.max_allocated_bytes) / kGiB, step);
    w.add_scalar("memory/max_reserved(GiB)", static_cast<double>(m.max_reserved_bytes) / kGiB, step);
    if (cap > 0) {
      w.add_scalar("memory/max_active(%)", 100.0 * static_cast<double>(m.max_allocated_bytes) / cap, step);
      w.add_scalar("memory/max_reserved(%)", 100.0 * static_cast<double>(m.max_reserved_bytes) / cap, step);
    }
    w.add_scalar("memory/num_alloc_retries", static_cast<double>(m.num_alloc_retries), step);
    w.add_scalar("memory/num_ooms", static_cast<double>(m.num_ooms), step);
  }
  // One flush per log line: TensorBoard shows it while the run goes on,
  // and a crash loses at most the line in flight.
  w.flush();
}

MetricsProcessor::MetricsProcessor(MetricsOptions options) : options_(std::move(options)) {
  TITAN_CHECK(options_.log_freq > 0, "metrics.log_freq must be > 0, got ", options_.log_freq);
  TITAN_CHECK(options_.num_ranks > 0, "MetricsProcessor: num_ranks must be > 0");
  if (options_.console) {
    if (options_.progress < 0) {
      // Only a real terminal understands `\r` redraws; a log file or pipe
      // would collect every intermediate line.
      progress_enabled_ = options_.out == nullptr && ::isatty(::fileno(stdout)) == 1;
    } else {
      progress_enabled_ = options_.progress > 0;
    }
  }
  if (!options_.jsonl_path.empty()) {
    jsonl_ = std::make_unique<std::ofstream>(options_.jsonl_path, std::ios::app);
    TITAN_CHECK(jsonl_->good(), "cannot open metrics file '", options_.jsonl_path, "' for writing");
  }
  if (!options_.tensorboard_dir.empty()) tensorboard_ = std::make_unique<EventWriter>(options_.tensorboard_dir);
}

MetricsProcessor::~MetricsProcessor() {
  try {
    finish();
  } catch (...) {
  }
}

std::ostream& MetricsProcessor::out() const { return options_.out ? *options_.out : std::cout; }

bool MetricsProcessor::should_log(int64_t step) const {
  return step == 1 || step % options_.log_freq == 0 ||
         (options_.total_steps > 0 && step == options_.total_steps);
}

LogRecord MetricsProcessor::make_record(const StepInput& in, int64_t steps, double seconds,
                                        double data_seconds, int64_t tokens) const {
  LogRecord r;
  r.step = in.step;
  r.total_steps = options_.total_steps;
  r.loss = in.loss;
  r.max_loss = in.max_loss;
  r.grad_norm = in.grad_norm;
  r.lr = in.lr;
  r.interval_steps = steps;
  r.interval_seconds = seconds;
  r.tps = tokens_per_second_per_rank(static_cast<double>(tokens), seconds, options_.num_ranks);
  r.tflops = achieved_flops_per_rank(options_.flops_per_token, r.tps) / 1e12;
  r.mfu_pct = mfu_percent(options_.flops_per_token, r.tps, options_.peak_flops);
  r.step_seconds = steps > 0 ? seconds / steps : 0;
  r.data_seconds = steps > 0 ? data_seconds / steps : 0;
  r.elapsed_seconds = elapsed_seconds_;
  r.tokens_seen = tokens_seen_;
  if (options_.total_steps > 0 && steps > 0)
    r.eta_seconds = std::max<int64_t>(0, options_.total_steps - in.step) * r.step_seconds;
  return r;
}

void MetricsProcessor::write_jsonl(const LogRecord& r) {
  if (!jsonl_) return;
  // One flushed line per record: a crash loses at most the line in flight.
  *jsonl_ << to_json(r).dump() << '\n';
  jsonl_->flush();
}

std::optional<LogRecord> MetricsProcessor::record(const StepInput& in) {
  interval_steps_ += 1;
  interval_seconds_ += in.step_seconds;
  interval_data_seconds_ += in.data_seconds;
  interval_tokens_ += in.tokens;
  elapsed_seconds_ += in.step_seconds;
  tokens_seen_ += in.tokens;

  const bool log = should_log(in.step);
  if (options_.jsonl_every_step && !log) {
    write_jsonl(make_record(in, 1, in.step_seconds, in.data_seconds, in.tokens));
  }
  if (!log) {
    if (progress_enabled_) {
      LogRecord p = make_record(in, interval_steps_, interval_seconds_, interval_data_seconds_,
                                interval_tokens_);
      out() << '\r' << format_progress_line(p) << "\x1b[K" << std::flush;
      progress_pending_ = true;
    }
    return std::nullopt;
  }

  LogRecord r = make_record(in, interval_steps_, interval_seconds_, interval_data_seconds_,
                            interval_tokens_);
  r.memory = memory_stats(options_.device);
  if (options_.jsonl_every_step) {
    // The per-step record of a log step carries the memory reading too.
    LogRecord one = make_record(in, 1, in.step_seconds, in.data_seconds, in.tokens);
    one.memory = r.memory;
    write_jsonl(one);
  } else {
    write_jsonl(r);
  }
  // The interval's values, as the console line: torchtitan's TensorBoard
  // curves are its log lines.
  if (tensorboard_) write_tensorboard(*tensorboard_, r);
  if (options_.console) {
    if (progress_pending_) out() << "\r\x1b[K";
    out() << format_log_line(r) << std::endl;
    progress_pending_ = false;
  }
  // Each line shows the peak of its own interval, as torchtitan's does.
  reset_peak_memory(options_.device);
  interval_steps_ = 0;
  interval_seconds_ = 0;
  interval_data_seconds_ = 0;
  interval_tokens_ = 0;
  return r;
}

std::string format_validation_line(const ValidationRecord& r) {
  return strprintf("validate step: %2lld  loss: %7.4f  targets: %s  batches: %lld  time: %.2fs",
                   static_cast<long long>(r.step), r.loss, with_thousands(static_cast<double>(r.targets)).c_str(),
                   static_cast<long long>(r.batches), r.seconds);
}

void MetricsProcessor::record_validation(const ValidationRecord& r) {
  if (jsonl_) {
    const nlohmann::json loss = std::isfinite(r.loss) ? nlohmann::json(r.loss) : nlohmann::json(nullptr);
    const nlohmann::json j = {{"step", r.step},
                              {"validation_loss", loss},
                              {"validation_targets", r.targets},
                              {"validation_batches", r.batches}};
    *jsonl_ << j.dump() << '\n';
    jsonl_->flush();
  }
  if (tensorboard_) {
    tensorboard_->add_scalar("validation/loss", r.loss, r.step);
    tensorboard_->flush();
  }
  if (options_.console) print(format_validation_line(r));
}

void MetricsProcessor::print(const std::string& line) {
  if (!options_.console) return;
  if (progress_pending_) out() << "\r\x1b[K";
  progress_pending_ = false;
  out() << line << std::endl;
}

void MetricsProcessor::finish() {
  if (progress_pending_) {
    out() << '\n' << std::flush;
    progress_pending_ = false;
  }
}

}  // namespace titan::metrics
