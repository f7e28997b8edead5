#pragma once
/// @file
/// @brief The trainer's components, each built from its own section of the
/// JobConfig (as torchtitan's build_optimizers, build_lr_schedulers,
/// build_dataloader, build_metrics_processor): the Trainer's constructor
/// calls these in order and keeps what they return.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "titan/config/job_config.hpp"
#include "titan/config/validate.hpp"
#include "titan/data/dataloader.hpp"
#include "titan/metrics/metrics_processor.hpp"
#include "titan/models/llama3/model_args.hpp"
#include "titan/optim/lr_schedule.hpp"

namespace torch::optim {
class Optimizer;
}
namespace titan::profiling {
class MemoryRecorder;
class TraceProfiler;
}  // namespace titan::profiling

namespace titan::train {

/// @brief [optimizer] over `params` (this rank's shards under FSDP), with
/// torchtitan's default implementation: AdamW's fused kernel.
std::unique_ptr<torch::optim::Optimizer> build_optimizer(const std::vector<at::Tensor>& params,
                                                         const config::OptimizerSection& section);

/// @brief [lr_scheduler] over [training] steps, driving `optimizer`.
std::unique_ptr<optim::LRScheduler> build_lr_scheduler(torch::optim::Optimizer& optimizer, const config::JobConfig& cfg);

/// @brief [training]'s dataset, the shard of data-parallel rank `dp_rank`
/// of `plan.dp_degree`, in batches of `plan.local_batch` sequences. Draws
/// one batch and rewinds, so that a dataset too small for one window (an
/// empty file) fails here with one line instead of at step 1, after the
/// model was built.
std::unique_ptr<data::DataLoader> build_data_loader(const config::JobConfig& cfg, const config::BatchPlan& plan,
                                                    std::shared_ptr<const data::Tokenizer> tokenizer, int64_t dp_rank,
                                                    bool document_masking);

/// @brief Who logs, and the job's MFU inputs.
struct MetricsBuild {
  /// Rank 0 prints and writes the metrics files; the others only compute
  /// (their values are the same job-wide ones; N ranks appending to one
  /// metrics.jsonl would repeat every step N times).
  bool writes = true;
  bool console = true;
  int progress = -1;
  std::ostream* out = nullptr;
  double flops_per_token = 0;
  double peak_flops = 0;
  int num_ranks = 1;
  int rank = 0;  ///< names the rank_N folder with [metrics] save_for_all_ranks
  /// The run's TensorBoard folder as the job agreed on it (every rank's
  /// clock may not read the same minute); "" = from this process's clock.
  std::string tensorboard_run;
  c10::Device device{c10::kCPU};
};

/// @brief `<[job] dump_folder>/metrics.jsonl`, the run's metrics file.
std::string metrics_jsonl_path(const config::JobConfig& cfg);

/// @brief [metrics] into metrics_jsonl_path(cfg) (a new run starts a
/// new file) and, when enabled, TensorBoard under save_tb_folder. Creates
/// the dump folder; throws titan::Error naming it when it cannot.
std::unique_ptr<metrics::MetricsProcessor> build_metrics_processor(const config::JobConfig& cfg, const MetricsBuild& b);

/// @brief [profiling] enable_profiling's Kineto traces on torchtitan's
/// schedule, one file per rank; null when off.
std::unique_ptr<profiling::TraceProfiler> build_trace_profiler(const config::JobConfig& cfg, int rank,
                                                               c10::Device device,
                                                               std::function<void(const std::string&)> print);

/// @brief [profiling] enable_memory_snapshot's timelines (and CUDA
/// snapshots) every profile_freq steps; null when off.
std::unique_ptr<profiling::MemoryRecorder> build_memory_recorder(const config::JobConfig& cfg, int rank,
                                                                 c10::Device device,
                                                                 std::function<void(const std::string&)> print);

}  // namespace titan::train
