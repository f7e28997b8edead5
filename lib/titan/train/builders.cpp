#include "titan/train/builders.hpp"

#include <torch/optim/optimizer.h>
#include <unistd.h>

#include <algorithm>

#include "titan/metrics/tensorboard.hpp"
#include "titan/optim/optimizer.hpp"
#include "titan/profiling/memory_snapshot.hpp"
#include "titan/profiling/trace_profiler.hpp"
#include "titan/util/error.hpp"
#include "titan/util/files.hpp"

namespace titan::train {

std::unique_ptr<torch::optim::Optimizer> build_optimizer(const std::vector<at::Tensor>& params,
                                                         const config::OptimizerSection& section) {
  optim::OptimizerOptions o;
  o.name = section.name, o.lr = section.lr, o.beta1 = section.beta1, o.beta2 = section.beta2, o.eps = section.eps;
  o.weight_decay = section.weight_decay;
  // torchtitan's default implementation: one fused kernel per parameter
  // instead of a dozen elementwise ones (~5% of a debugmodel step on CPU).
  o.fused = true;
  return optim::build_optimizer(params, o);
}

std::unique_ptr<optim::LRScheduler> build_lr_scheduler(torch::optim::Optimizer& optimizer, const config::JobConfig& cfg) {
  optim::LRScheduleOptions o;
  // torchtitan's total_steps, else the run's (an init-only run, steps = 0,
  // never steps it).
  o.steps = cfg.lr_scheduler.total_steps > 0 ? cfg.lr_scheduler.total_steps : std::max<int64_t>(1, cfg.training.steps);
  o.warmup_steps = cfg.lr_scheduler.warmup_steps;
  if (cfg.lr_scheduler.decay_ratio >= 0) o.decay_ratio = cfg.lr_scheduler.decay_ratio;
  // "wsd" names the warmup-stable-decay shape (a stable phase set by
  // decay_ratio) whose decay is linear; the curve itself is then "linear".
  o.decay_type = cfg.lr_scheduler.decay_type == "wsd" ? "linear" : cfg.lr_scheduler.decay_type;
  o.min_lr_factor = cfg.lr_scheduler.min_lr_factor;
  return std::make_unique<optim::LRScheduler>(optimizer, optim::LRSchedule(o));
}

std::unique_ptr<data::DataLoader> build_data_loader(const config::JobConfig& cfg, const config::BatchPlan& plan,
                                                    std::shared_ptr<const data::Tokenizer> tokenizer, int64_t dp_rank,
                                                    bool document_masking) {
  data::DataLoaderOptions o;
  o.dataset = cfg.training.dataset;
  o.dataset_path = cfg.training.dataset_path;
  o.batch_size = plan.local_batch;
  o.seq_len = cfg.training.seq_len;
  o.dp_rank = dp_rank;
  o.dp_world = plan.dp_degree;
  o.document_masking = document_masking;
  auto loader = std::make_unique<data::DataLoader>(std::move(tokenizer), o);
  // The loader restores its position exactly from its state.
  const auto start = loader->state_dict();
  loader->next();
  loader->load_state_dict(start);
  return loader;
}

std::string metrics_jsonl_path(const config::JobConfig& cfg) { return files::join(cfg.job.dump_folder, "metrics.jsonl"); }

std::unique_ptr<metrics::MetricsProcessor> build_metrics_processor(const config::JobConfig& cfg, const MetricsBuild& b) {
  TITAN_CHECK(files::make_directories(cfg.job.dump_folder), "cannot create [job] dump_folder '", cfg.job.dump_folder,
              "'");
  metrics::MetricsOptions o;
  o.log_freq = cfg.metrics.log_freq;
  o.total_steps = cfg.training.steps;
  o.flops_per_token = b.flops_per_token;
  o.peak_flops = b.peak_flops;
  o.num_ranks = b.num_ranks;
  o.device = b.device;
  if (b.writes) {
    o.jsonl_path = metrics_jsonl_path(cfg);
    ::unlink(o.jsonl_path.c_str());  // a new run starts a new metrics file
  }
  if (cfg.metrics.enable_tensorboard && (b.writes || cfg.metrics.save_for_all_ranks)) {
    o.tensorboard_dir = b.tensorboard_run.empty()
                            ? metrics::tensorboard_run_dir(cfg.job.dump_folder, cfg.metrics.save_tb_folder)
                            : b.tensorboard_run;
    // torchtitan's layout: <run>/rank_<N>, one folder (and event file) per rank.
    if (cfg.metrics.save_for_all_ranks) o.tensorboard_dir += "/rank_" + std::to_string(b.rank);
  }
  o.console = b.console;
  o.progress = b.progress;
  o.out = b.out;
  return std::make_unique<metrics::MetricsProcessor>(o);
}

std::unique_ptr<profiling::TraceProfiler> build_trace_profiler(const config::JobConfig& cfg, int rank,
                                                               c10::Device device,
                                                               std::function<void(const std::string&)> print) {
  if (!cfg.profiling.enable_profiling) return nullptr;
  profiling::ProfileSchedule schedule{cfg.profiling.profile_freq, cfg.profiling.profiler_warmup,
                                      cfg.profiling.profiler_active};
  return std::make_unique<profiling::TraceProfiler>(schedule,
                                                    files::join(cfg.job.dump_folder, cfg.profiling.save_traces_folder),
                                                    rank, device.is_cuda(), std::move(print));
}

std::unique_ptr<profiling::MemoryRecorder> build_memory_recorder(const config::JobConfig& cfg, int rank,
                                                                 c10::Device device,
                                                                 std::function<void(const std::string&)> print) {
  if (!cfg.profiling.enable_memory_snapshot) return nullptr;
  return std::make_unique<profiling::MemoryRecorder>(
      cfg.profiling.profile_freq, files::join(cfg.job.dump_folder, cfg.profiling.save_memory_snapshot_folder), rank,
      device, std::move(print));
}

}  // namespace titan::train
