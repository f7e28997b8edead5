#pragma once
/// @file
/// @brief The single-rank trainer: builds everything a JobConfig describes
/// (device, seed, model, tokenizer, data, optimizer, LR schedule, metrics)
/// and runs the training loop.
///
/// The parts stay separate so that parallelism wraps them: the step's
/// micro-batch loop and clipping live in train_step.hpp, the loss in
/// ops/cross_entropy.hpp, the schedule and optimizer in optim/, the log in metrics/, and
/// what the parallel degrees do to the model in
/// models/llama3/parallelize.hpp. Under a launcher (WORLD_SIZE > 1) every
/// rank builds a Trainer; the data-parallel ranks read disjoint shards of the
/// data and the logged loss and gradient norm are the job-wide ones.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "titan/config/job_config.hpp"
#include "titan/config/validate.hpp"
#include "titan/data/dataloader.hpp"
#include "titan/dist/launch_env.hpp"
#include "titan/metrics/metrics_processor.hpp"
#include "titan/metrics/rank_peak.hpp"
#include "titan/train/fake_rank_report.hpp"
#include "titan/models/llama3/transformer.hpp"
#include "titan/models/llama3/parallelize.hpp"
#include "titan/optim/lr_schedule.hpp"
#include "titan/optim/step_in_backward.hpp"
#include "titan/parallel/parallel_dims.hpp"
#include "titan/train/job_layout.hpp"
#include "titan/train/sharded_init.hpp"
#include "titan/train/summary.hpp"
#include "titan/train/train_step.hpp"

namespace torch::optim {
class Optimizer;
}
namespace titan::checkpoint {
class CheckpointManager;
}
namespace titan::train {
class Validator;
}
namespace titan::profiling {
class MemoryRecorder;
class TraceProfiler;
}
namespace titan::dist {
class DeviceMesh;
class ProcessGroup;
}  // namespace titan::dist

namespace titan::train {

/// @brief What one optimizer step measured (job-wide values).
struct StepResult {
  int64_t step = 0;         ///< 1-based
  double loss = 0;          ///< mean loss over the step's global batch
  double max_loss = 0;      ///< the largest data-parallel rank's loss (= loss on one rank)
  double grad_norm = 0;     ///< global gradient norm before clipping
  double lr = 0;            ///< the learning rate this step applied
  int64_t tokens = 0;       ///< tokens trained on in this step, all ranks
  double step_seconds = 0;  ///< wall time of the step, data included
  double data_seconds = 0;  ///< of which waiting for batches
};

/// @brief The data-parallel ranks whose batches one process reads (see
/// TrainerOptions::single_process).
struct DataParallelReads {
  int64_t degree = 1;                ///< the data-parallel degree the data is cut for
  std::vector<int64_t> ranks = {0};  ///< the ranks read (each in [0, degree)), one loader each
  /// Sequences per micro-batch: each batch read is cut along the batch into
  /// micro-batches of this many, run one after the other (0 = whole). The
  /// reference of a pipeline layout cuts as the pipeline does, so that what
  /// depends on a micro-batch's extent (float8's tensorwise scale of an
  /// activation) is computed over the same sequences on both sides.
  int64_t microbatch_size = 0;
};

/// @brief Knobs that are not part of a job's config: for tests, benches and
/// embedding the trainer in another program.
struct TrainerOptions {
  /// Model shape to use instead of [model] flavor's (tests use tiny ones).
  /// max_seq_len is set to [training] seq_len either way.
  std::optional<models::llama3::ModelArgs> model_args;
  /// Called after every step (after its log line), e.g. to collect losses.
  std::function<void(const StepResult&)> on_step;
  /// Called on every rank after each step's backward, before the loss is
  /// reduced and the gradients clipped, with the tensors the optimizer
  /// steps (their gradients complete: shards under FSDP). An adapter for
  /// tests and `titan verify`'s fault injection (verify/gradient_fault.hpp).
  std::function<void(const std::vector<at::Tensor>& trained)> after_backward;
  /// Console output: true prints the banner, log lines and summary.
  bool console = true;
  /// Where console output goes; nullptr = std::cout.
  std::ostream* out = nullptr;
  /// Live progress line: -1 when stdout is a terminal, 0 never, 1 always.
  int progress = -1;
  /// Catch Ctrl-C / SIGTERM during train() and stop after the current step.
  bool handle_signals = true;
  /// MFU denominator in FLOP/s; unset = measured (CPU, cached) or looked up
  /// by GPU name; 0 = no MFU (skips the CPU calibration).
  std::optional<double> peak_flops;
  /// Run as one process even under a launcher (the launch environment is
  /// not read and no job is joined), reading the batches of `ranks` out of
  /// `degree` data-parallel ranks and accumulating all of them into each
  /// step. The config's parallel degrees must resolve on one rank. The
  /// single-process references set it (verify::single_process_reference);
  /// unset, the trainer joins the launched job, if any, and reads its own
  /// data-parallel rank's batches.
  std::optional<DataParallelReads> single_process;
  /// Mixed precision without FSDP (autocast.hpp) on the CPU too: it is
  /// applied on GPUs only by default; tests use this to run that path.
  bool autocast_on_cpu = false;
  /// With [checkpoint] enable_checkpoint: false builds the checkpoint
  /// manager (it saves when asked) but loads nothing at construction, so
  /// the run starts fresh whatever the folder holds (titan verify's run
  /// that is interrupted and resumed).
  bool load_checkpoint = true;
};

/// @brief A training run on one rank.
///
/// @code
///   Trainer trainer(config::parse_job_config(argc, argv, 2));
///   TrainSummary s = trainer.train();
/// @endcode
/// Construction validates everything that can be wrong with the inputs
/// (unsupported features, batch arithmetic, flavor, tokenizer file, vocab
/// size, dataset) before allocating the model, and throws a one-line
/// titan::Error for the first problem.
class Trainer {
 public:
  explicit Trainer(config::JobConfig cfg, TrainerOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// @brief Runs steps until [training] steps or a stop signal, logging as
  /// configured, then prints and returns the summary. A NaN or infinite
  /// loss (or gradient norm) throws titan::Error naming the step, before
  /// the optimizer could write NaN into the weights.
  TrainSummary train();

  /// @brief One optimizer step: zero gradients, forward_backward_step,
  /// the job-wide loss, check it, clip, update, advance the LR schedule.
  /// Does not log (train() feeds the result to the MetricsProcessor).
  StepResult train_step();

  /// @brief Runs [validation] when it is on and due after the steps done so
  /// far (step 1 and every freq-th), logs it and returns it; nullopt
  /// otherwise. Collective. train() calls it after each step, before a save.
  std::optional<metrics::ValidationRecord> validate_if_due();

  /// @brief Steps completed so far.
  int64_t step() const { return step_; }
  const config::JobConfig& config() const { return cfg_; }
  const config::BatchPlan& batch_plan() const { return layout_.batches; }
  const c10::Device& device() const { return device_; }
  /// @brief The resolved parallel degrees of this job.
  const parallel::ParallelDims& parallel_dims() const { return layout_.dims; }
  /// @brief The job's layout as this rank read it (what `titan estimate`
  /// and `titan verify`'s communication count take).
  const JobLayout& layout() const { return layout_; }
  /// @brief This rank's global rank (0 without a launcher; [comm] fake_rank
  /// when it plays one rank of a larger job).
  int rank() const { return rank_; }
  /// @brief The parameters the optimizer steps: this rank's shards under FSDP.
  const std::vector<at::Tensor>& trained_parameters() const { return params_; }
  models::llama3::Transformer& model() { return model_; }
  /// @brief The model's args as the job resolved them (flavor, overrides, the tokenizer's vocabulary).
  const models::llama3::ModelArgs& model_args() const { return layout_.args; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  /// @brief The optimizer's step in backward ([optimizer]
  /// early_step_in_backward), or null without it.
  const optim::StepInBackward* step_in_backward() const { return step_in_backward_.get(); }
  data::DataLoader& data_loader() { return *loaders_.front(); }
  /// @brief The full, unsharded weights under torchtitan's names, gathered
  /// from the shards under FSDP (collective: call it on every rank).
  std::map<std::string, at::Tensor> full_state_dict() { return parallelized_.state_dict->gather(); }
  /// @brief The checkpoint manager ([checkpoint] enable_checkpoint), or null.
  checkpoint::CheckpointManager* checkpointer() { return checkpoint_.get(); }
  /// @brief Training FLOPs per token of the model at [training] seq_len.
  double flops_per_token() const { return flops_per_token_; }

 private:
  // The constructor's steps that need the trainer's own state (the
  // components built from one config section each are in builders.hpp).
  /// The tokenizer of [model] tokenizer_path / hf_assets_path, checked
  /// against the model's vocabulary.
  void load_tokenizer();
  /// Joins the job (rendezvous, flight recorder) and lays the ranks out:
  /// the mesh, the data-parallel and loss groups.
  void join_job();
  /// MFU's peak for this rank (given, a GPU's datasheet, or a CPU GEMM
  /// calibrated once per node: collective on a CPU job of several ranks).
  void resolve_peak(const dist::LaunchEnv& env);
  /// The optimizer over the trained tensors, its LR schedule and, with
  /// [optimizer] early_step_in_backward, the hooks that step in backward.
  void build_optimizer_and_schedule();
  /// Whether this process prints and writes the job's log: rank 0, or the
  /// one process of a fake rank.
  bool logs() const { return rank_ == 0 || fake_run_.has_value(); }
  /// A fake rank's step, measured after it: its tensor peak and time
  /// (`steps_before`: the steps this run ran before it; the first is kept
  /// only until a second comes).
  void note_fake_step(const StepResult& r, size_t steps_before);
  /// A fake rank's closing report (fake_rank_report.hpp); the last step
  /// began at `last_step_start_us` on the CommLog's clock.
  std::string fake_report(double last_step_start_us);
  /// The MetricsProcessor: rank 0 logs and writes; under TensorBoard for
  /// all ranks the run folder is agreed through the job's store.
  void build_metrics();
  /// [validation]'s loader over the same data-parallel ranks (collective
  /// at run time).
  void build_validator();
  /// The model on the meta device, parallelised, then each rank's pieces
  /// allocated and initialised (train/sharded_init.hpp).
  void build_model();
  /// The CheckpointManager over the trainer's state, and the resume.
  void build_checkpointer();
  void save_config_file();
  void print(const std::string& line);
  /// Warns once, and invalidates the calibration, when a logged MFU > 100 %.
  void check_mfu(const metrics::LogRecord& r);
  /// The run's opening lines (banner.cpp).
  std::string banner() const;
  /// Every rank's parameter bytes and initialisation peak, one line per
  /// rank, on rank 0 (collective: every rank calls it).
  std::string init_memory_table();
  /// Runs [validation] after `step` and logs it (collective).
  metrics::ValidationRecord validate(int64_t step);
  /// What one step's forward and backward leave for the rest of it.
  struct ForwardBackward {
    AccumulationResult acc;     ///< this rank's loss sum, tokens, data time
    int64_t local_targets = 0;  ///< this rank's counted targets
    at::Tensor global_targets;  ///< the global batch's (float64, on the device)
  };
  /// The step's forward and backward (torchtitan's forward_backward_step,
  /// apart from train_step): reads the global batch, normalises the loss
  /// over its counted targets and accumulates every micro-batch's
  /// gradients (the pipeline's schedule under PP); the gradients are
  /// complete on return.
  ForwardBackward forward_backward_step();

  config::JobConfig cfg_;
  TrainerOptions options_;
  /// The layout, the batches, the model's shape and every parallelism's
  /// options, read from cfg_ once and checked (train/job_layout.hpp).
  JobLayout layout_;
  c10::Device device_{c10::kCPU};
  std::shared_ptr<const data::Tokenizer> tokenizer_;
  std::string tokenizer_note_;  ///< which of tokenizer_path / hf_assets_path won, when both were set
  /// The data-parallel ranks this process reads for: its own, or
  /// TrainerOptions::single_process's.
  std::vector<int64_t> read_ranks_;
  /// One loader per entry of read_ranks_.
  std::vector<std::unique_ptr<data::DataLoader>> loaders_;
  std::unique_ptr<dist::DeviceMesh> mesh_;
  /// The group the loss is averaged over (the data-parallel ranks); null on one rank.
  std::shared_ptr<dist::ProcessGroup> dp_group_;
  /// The group the loss and token count are reduced over: dp_group_, or
  /// under context parallelism the dp × cp ranks (each cp rank holds a
  /// shard of every sequence); null on one rank.
  std::shared_ptr<dist::ProcessGroup> loss_group_;
  int rank_ = 0;
  /// What this process measures when it plays one rank of a larger job
  /// ([comm] mode = "fake_backend"); empty otherwise.
  std::optional<FakeRankRun> fake_run_;
  models::llama3::Transformer model_{nullptr};
  models::llama3::ParallelizedModel parallelized_;
  /// What this rank's sharded initialisation held and took.
  ShardedInitReport init_report_;
  /// The most bytes live tensors held on this rank from the model's
  /// construction to the end of its initialisation (counting allocator).
  int64_t init_peak_bytes_ = 0;
  /// The most bytes live tensors held on this rank beyond the model while
  /// a checkpoint was loaded (resume or a seed checkpoint); -1: none loaded.
  int64_t load_peak_bytes_ = -1;
  std::vector<at::Tensor> params_;
  /// The dtype forward and loss autocast to (single device, DDP), or none.
  std::optional<at::ScalarType> autocast_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  /// [optimizer] early_step_in_backward: the hooks that step each
  /// parameter inside backward; null without it.
  std::unique_ptr<optim::StepInBackward> step_in_backward_;
  std::unique_ptr<optim::LRScheduler> scheduler_;
  std::unique_ptr<metrics::MetricsProcessor> metrics_;
  double flops_per_token_ = 0;
  /// MFU's denominator and where it came from (metrics/rank_peak.hpp).
  metrics::RankPeak peak_;
  /// Warned (and invalidated) once that an interval's MFU exceeded 100 %.
  bool mfu_over_100_warned_ = false;
  std::string jsonl_path_;
  int64_t step_ = 0;
  /// Saves and resumes ([checkpoint]); null when checkpointing is off.
  std::unique_ptr<checkpoint::CheckpointManager> checkpoint_;
  std::unique_ptr<Validator> validator_;  ///< [validation] enable, else null
  /// Kineto traces on [profiling]'s schedule; null when profiling is off.
  std::unique_ptr<profiling::TraceProfiler> profiler_;
  /// Memory timelines (and CUDA snapshots) every profile_freq steps; null when off.
  std::unique_ptr<profiling::MemoryRecorder> memory_;
  /// Lines logged before the banner (the resume message): printed after it.
  std::vector<std::string> early_lines_;
  bool banner_printed_ = false;
};

}  // namespace titan::train
