#include "titan/train/trainer.hpp"

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <fstream>
#include <iostream>

#include "titan/checkpoint/dcp.hpp"
#include "titan/checkpoint/manager.hpp"
#include "titan/config/supported.hpp"
#include "titan/util/files.hpp"
#include "titan/dist/device_mesh.hpp"
#include "titan/dist/flight_recorder.hpp"
#include "titan/dist/launch_env.hpp"
#include "titan/dist/process_group.hpp"
#include "titan/dist/world.hpp"
#include "titan/metrics/format.hpp"
#include "titan/metrics/memory.hpp"
#include "titan/metrics/mfu.hpp"
#include "titan/metrics/peak_flops.hpp"
#include "titan/metrics/rank_peak.hpp"
#include "titan/ops/gemm/cpu_matmul.hpp"
#include "titan/metrics/tensor_memory.hpp"
#include "titan/metrics/tensorboard.hpp"
#include "titan/models/llama3/flops.hpp"
#include "titan/models/materialize.hpp"
#include "titan/parallel/context_parallel/batch_shard.hpp"
#include "titan/parallel/float8/float8_linear.hpp"
#include "titan/ops/cross_entropy.hpp"
#include "titan/parallel/pipeline/runtime.hpp"
#include "titan/profiling/memory_snapshot.hpp"
#include "titan/util/range.hpp"
#include "titan/profiling/trace_profiler.hpp"
#include "titan/train/autocast.hpp"
#include "titan/train/builders.hpp"
#include "titan/train/determinism.hpp"
#include "titan/train/device.hpp"
#include "titan/train/host_memory_check.hpp"
#include "titan/train/job_layout.hpp"
#include "titan/estimate/memory_estimate.hpp"
#include "titan/optim/adam_state.hpp"
#include "titan/dist/comm_log.hpp"
#include "titan/train/stop_signal.hpp"
#include "titan/train/train_step.hpp"
#include "titan/train/validator.hpp"
#include "titan/util/error.hpp"
#include "titan/util/measure.hpp"
#include "titan/util/strprintf.hpp"

namespace titan::train {

using titan::strprintf;

namespace {


std::string nonfinite_name(double v) { return std::isnan(v) ? "NaN" : (v > 0 ? "inf" : "-inf"); }

// Whether the job stops after this step. Every rank of a multi-rank job
// decides together (the largest flag over the world): a signal reaches each
// rank at its own moment (Ctrl-C the processes of a terminal, torchrun's
// SIGTERM each rank in turn), and a rank that left the loop on its own would
// wait in its shutdown collectives while its peers wait in the next step's
// — on different groups, until the collective timeout. One one-element
// all-reduce per step, only where signals are handled.
bool stop_agreed(const std::optional<StopSignal>& stop, int64_t world_size) {
  if (!stop) return false;
  const bool mine = stop->requested();
  if (world_size == 1) return mine;
  const dist::World& w = dist::world();
  at::Tensor flag = at::full({1}, mine ? 1.0f : 0.0f, at::TensorOptions().dtype(at::kFloat).device(w.device()));
  w.group()->all_reduce(flag, dist::ReduceOp::Max);
  return flag.item<float>() > 0.0f;
}

// TrainerOptions::single_process, checked before anything reads it.
void check_single_process_reads(const DataParallelReads& reads) {
  TITAN_CHECK(reads.degree >= 1 && !reads.ranks.empty(), "single_process: needs a data-parallel degree >= 1 "
              "and at least one rank to read, got degree ", reads.degree, " and ", reads.ranks.size(), " ranks");
  for (int64_t r : reads.ranks)
    TITAN_CHECK(r >= 0 && r < reads.degree, "single_process: data-parallel rank ", r, " is outside [0, ",
                reads.degree, ")");
  TITAN_CHECK(reads.microbatch_size >= 0, "single_process: microbatch_size must be >= 0, got ",
              reads.microbatch_size);
}

// Float8 GEMMs need float8 tensor cores (or emulation): refused before the
// job starts, in one line, rather than deep in cuBLAS at the first forward.
void check_float8_runs_on(const c10::Device& device, const config::Float8Section& float8) {
  if (!float8.enable_float8_linear || !device.is_cuda()) return;
  const auto [major, minor] = metrics::compute_capability(device);
  const std::string problem = float8::float8_gpu_error(metrics::device_name(device), major, minor, float8.emulate);
  TITAN_CHECK(problem.empty(), problem);
}

}  // namespace

Trainer::Trainer(config::JobConfig cfg, TrainerOptions options)
    : cfg_(std::move(cfg)), options_(std::move(options)) {
  // Everything that can be wrong with the inputs is checked first, cheapest
  // first, so that a bad config fails in milliseconds with one line and
  // before any output.
  if (options_.single_process) check_single_process_reads(*options_.single_process);
  // A single-process run (a reference) is one process whatever launched
  // it: tests run it on every rank of a parallel job to compare against.
  const bool single = options_.single_process.has_value();
  const dist::LaunchEnv env = single ? dist::LaunchEnv{} : job_launch_env(cfg_, dist::read_launch_env());
  rank_ = env.rank;
  if (!single && plays_fake_rank(cfg_) && env.world_size > 1)
    fake_run_ = FakeRankRun{.rank = env.rank, .world_size = env.world_size};
  device_ = resolve_device(cfg_.training.device, env, static_cast<int>(cfg_.comm.ranks_per_device));
  // The layout, the batches, the model's shape and every parallelism's
  // options, read and checked once (a bad layout fails here, before the job
  // starts; `titan train --nproc N` ran the same in its launcher).
  layout_ = plan_job_layout(cfg_, env.world_size, device_, options_.model_args,
                            single ? std::optional<int64_t>(options_.single_process->degree) : std::nullopt);
  check_float8_runs_on(device_, cfg_.float8);
  // The CPU GEMM of fp32 Linear layers, process-wide (as torch.backends'
  // flags are): the last trainer built decides.
  ops::set_cpu_matmul(ops::parse_cpu_matmul(cfg_.model.cpu_matmul));
  // Mixed precision without FSDP: torchtitan's AMP for one device and DDP.
  autocast_ = autocast_dtype(layout_.dims, cfg_.training.mixed_precision_param, device_, options_.autocast_on_cpu);
  // A CPU job over the host's memory would be killed by the kernel without
  // a word, or swap for hours: refuse it now (a reference run is a test's).
  // An init-only run (steps 0, a seed checkpoint) holds its parameter shards,
  // not a step's activations: the estimate would overstate it.
  const bool init_only = cfg_.training.steps == 0 || cfg_.checkpoint.create_seed_checkpoint;
  if (!single && !init_only && device_.is_cpu()) check_host_memory(layout_, env.local_world_size);
  load_tokenizer();

  // Join the job once the inputs are known to be good (so a bad config fails
  // alike on every rank without a rendezvous), then lay the ranks out.
  if (env.world_size > 1) join_job();
  // MFU's peak, calibrated (on a CPU) now that every rank has joined and
  // before anything of this job computes.
  resolve_peak(env);

  // Data: this rank's shard of the documents, or (single_process) the
  // shards of the ranks it reads for.
  read_ranks_ = single ? options_.single_process->ranks : std::vector<int64_t>{dp_group_ ? dp_group_->rank() : 0};
  for (int64_t dp_rank : read_ranks_)
    loaders_.push_back(
        build_data_loader(cfg_, layout_.batches, tokenizer_, dp_rank, layout_.args.attn_mask_type == "block_causal"));
  if (cfg_.validation.enable) build_validator();

  // Memory snapshots count tensors from here on, so that the model,
  // gradients and optimizer state are all seen.
  memory_ = build_memory_recorder(cfg_, rank_, device_, [this](const std::string& line) { print(line); });
  set_determinism(cfg_.training.seed, cfg_.training.deterministic, cfg_.training.deterministic_warn_only, device_);
  build_model();
  build_optimizer_and_schedule();

  // Outputs go under [job] dump_folder: the metrics, the effective config,
  // the checkpoints (resumed from the latest one in the folder, resharded
  // to this job's layout) and traces on torchtitan's schedule.
  build_metrics();
  if (!cfg_.job.save_config_file.empty()) save_config_file();
  // A fake rank's weights are not a result, and a save of its shards
  // would replace a real job's checkpoint in the same folder.
  if (cfg_.checkpoint.enable_checkpoint && fake_run_)
    early_lines_.push_back("checkpoint off: a fake rank ([comm] mode = \"fake_backend\") neither saves nor loads");
  else if (cfg_.checkpoint.enable_checkpoint)
    build_checkpointer();
  profiler_ = build_trace_profiler(cfg_, rank_, device_, [this](const std::string& line) { print(line); });
}

void Trainer::load_tokenizer() {
  const data::TokenizerChoice choice =
      data::choose_tokenizer_path(cfg_.model.tokenizer_path, cfg_.model.hf_assets_path, layout_.args.vocab_size);
  tokenizer_ = data::load_tokenizer(choice.path);
  tokenizer_note_ = choice.note;
  data::check_vocab_fits(*tokenizer_, layout_.args.vocab_size);
}

void Trainer::resolve_peak(const dist::LaunchEnv& env) {
  // metrics/rank_peak.hpp. A CPU peak is calibrated here: every rank has
  // joined (the rendezvous is a barrier), and none has started loading
  // data or building the model, so nothing of this job computes while it
  // is measured.
  metrics::RankPeakInputs in;
  in.given = options_.peak_flops;
  in.device = device_;
  // FSDP and autocast compute in mixed_precision_param; otherwise the
  // weights' own dtype ([training] dtype) is the compute dtype.
  const bool cast = layout_.dims.fsdp_enabled() || autocast_.has_value();
  in.compute_dtype = cast ? metrics::compute_dtype_for_peak(true, cfg_.training.mixed_precision_param)
                          : layout_.parallelize.param_storage_dtype;
  in.local_rank = env.local_rank;
  in.local_world_size = env.local_world_size;
  if (mesh_) in.group = dist::world().group();
  peak_ = metrics::resolve_rank_peak(in);
}

void Trainer::build_optimizer_and_schedule() {
  params_ = parallelized_.params;
  optimizer_ = build_optimizer(params_, cfg_.optimizer);
  scheduler_ = build_lr_scheduler(*optimizer_, cfg_);
  if (!layout_.step_in_backward) return;
  step_in_backward_ = std::make_unique<optim::StepInBackward>(*optimizer_, params_, parallelized_.grad_norm_params);
  if (cfg_.training.max_norm > 0)
    early_lines_.push_back(strprintf(
        "note: [training] max_norm = %g clips nothing with [optimizer] early_step_in_backward: each parameter "
        "steps as its gradient arrives, before the norm of them all is known (torchtitan's neither); the log's "
        "grad_norm is the unclipped norm",
        cfg_.training.max_norm));
}

void Trainer::build_metrics() {
  // MFU: model FLOPs per token over the rank's peak (resolved above).
  flops_per_token_ = models::llama3::flops_per_token(layout_.args, cfg_.training.seq_len);
  // One log for the job: rank 0 prints and writes the metrics files, the
  // others only compute.
  jsonl_path_ = metrics_jsonl_path(cfg_);
  if (!logs()) options_.console = false;
  MetricsBuild mb;
  mb.writes = logs();
  mb.console = options_.console, mb.progress = options_.progress, mb.out = options_.out;
  mb.flops_per_token = flops_per_token_;
  mb.peak_flops = peak_.flops;
  mb.num_ranks = static_cast<int>(layout_.dims.world_size);
  mb.device = device_;
  mb.rank = rank_;
  if (cfg_.metrics.enable_tensorboard && cfg_.metrics.save_for_all_ranks && mesh_) {
    // One run folder for the job: rank 0's clock names it, the others read
    // the name from the job's store (their clocks may be past the minute).
    const std::string key = "titan/tensorboard_run";
    if (logs()) {
      mb.tensorboard_run = metrics::tensorboard_run_dir(cfg_.job.dump_folder, cfg_.metrics.save_tb_folder);
      dist::world().store()->set(key, std::vector<uint8_t>(mb.tensorboard_run.begin(), mb.tensorboard_run.end()));
    } else {
      const std::vector<uint8_t> name = dist::world().store()->get(key);
      mb.tensorboard_run.assign(name.begin(), name.end());
    }
  }
  metrics_ = build_metrics_processor(cfg_, mb);
}

Trainer::~Trainer() = default;

void Trainer::join_job() {
  dist::InitOptions init;
  init.device = device_.is_cuda() ? "cuda" : "cpu";
  init.timeout = std::chrono::seconds(cfg_.comm.timeout_seconds);
  init.rendezvous_timeout = std::chrono::seconds(cfg_.comm.init_timeout_seconds);
  init.flight_recorder_entries = cfg_.comm.trace_buf_size;
  init.flight_recorder_folder = files::join(cfg_.job.dump_folder, cfg_.comm.save_traces_folder);
  init.flight_recorder_prefix = cfg_.comm.save_traces_file_prefix;
  init.backend = cfg_.comm.backend;
  init.ranks_per_device = static_cast<int>(cfg_.comm.ranks_per_device);
  if (fake_run_) {
    init.fake = true;
    init.fake_rank = fake_run_->rank;
    init.fake_world_size = fake_run_->world_size;
  }
  const dist::World& world = dist::init_distributed(init);
  mesh_ = std::make_unique<dist::DeviceMesh>(layout_.dims.build_mesh(world));
  const std::string dp_name = layout_.dims.dp_mesh_name();
  if (!dp_name.empty() && layout_.dims.dp_degree() > 1) dp_group_ = mesh_->group(dp_name);
  loss_group_ = dp_group_;
  if (layout_.dims.cp_enabled()) loss_group_ = mesh_->group(layout_.dims.dp_degree() > 1 ? "dp_cp" : "cp");
}

// [validation]: the held-out split of the same data-parallel ranks. Its
// batches go through the same stages, shards and cp ring as training's,
// so under PP they must have training's shapes, and under CP or
// sequence parallelism its sequences training's length (the cuts those
// layouts make were checked for that length).
void Trainer::build_validator() {
  const config::ValidationSection& v = cfg_.validation;
  const bool same_len = layout_.dims.pp > 1 || layout_.dims.cp_enabled() ||
                        (layout_.dims.tp_enabled() && layout_.parallelize.tp.sequence_parallel);
  TITAN_CHECK(!same_len || v.seq_len == cfg_.training.seq_len, "[validation] seq_len = ", v.seq_len,
              " must equal [training] seq_len = ", cfg_.training.seq_len,
              " under pipeline, context or sequence parallelism (their cuts are made for that length)");
  TITAN_CHECK(layout_.dims.pp == 1 || v.local_batch_size == layout_.batches.local_batch, "[validation] local_batch_size = ",
              v.local_batch_size, " must equal the training's local batch ", layout_.batches.local_batch,
              " under pipeline parallelism (the stages' micro-batches have that shape)");
  validator_ = std::make_unique<Validator>(v, tokenizer_, read_ranks_, layout_.batches.dp_degree, layout_.args.attn_mask_type == "block_causal",
                                           mesh_ ? dist::world().group().get() : nullptr, device_);
}

void Trainer::build_model() {
  // The model is built on the meta device (shapes, no memory) and every
  // parallelism is applied to it, so that each rank then allocates only
  // what it holds (FSDP its rows, TP its slices, PP its stages) and
  // initialises those pieces in place: no rank ever holds a whole
  // parameter that the layout shards (train/sharded_init.hpp). The values
  // are the single-process init's for the seed, bit for bit, whatever the
  // layout. One process holds the whole model, so it is allocated at once.
  metrics::track_cpu_tensor_memory();
  metrics::reset_tensor_memory_peak(device_);
  const int64_t bytes_before_model = metrics::tensor_memory(device_).current_bytes;
  model_ = models::llama3::Transformer(
      layout_.args, at::TensorOptions().device(at::kMeta).dtype(layout_.parallelize.param_storage_dtype));
  model_->train();
  if (!mesh_) models::to_empty(*model_, device_);
  parallelized_ = models::llama3::parallelize_llama(model_, layout_.dims, mesh_.get(), layout_.parallelize);
  {
    std::vector<torch::nn::Module*> parts;
    if (parallelized_.pipeline_parts.empty()) parts.push_back(model_.ptr().get());
    for (auto& part : parallelized_.pipeline_parts) parts.push_back(part.ptr().get());
    init_report_ = init_sharded_weights(parts, mesh_.get(), layout_.args, static_cast<uint64_t>(cfg_.training.seed));
  }
  init_peak_bytes_ = metrics::tensor_memory(device_).peak_bytes - bytes_before_model;
}

void Trainer::save_config_file() {
  // torchtitan's [job] save_config_file: rank 0 writes the effective config
  // as JSON; a path it cannot write stops every rank with its one line.
  const std::string path = files::join(cfg_.job.dump_folder, cfg_.job.save_config_file);
  std::string error;
  if (logs()) {
    try {
      TITAN_CHECK(files::make_directories(files::dir_name(path)), "[job] save_config_file: cannot create the folder of ",
                  path);
      std::ofstream out(path, std::ios::trunc);
      TITAN_CHECK(out.is_open(), "[job] save_config_file: cannot open ", path, " for writing (", std::strerror(errno),
                  ")");
      out << cfg_.to_json();
      out.flush();
      TITAN_CHECK(out.good(), "[job] save_config_file: cannot write ", path);
      early_lines_.push_back("config    written to " + path + " (save_config_file)");
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  checkpoint::agree_on_errors(mesh_ ? dist::world().group().get() : nullptr, error, "[job] save_config_file");
}

void Trainer::build_checkpointer() {
  checkpoint::TrainingState st;
  if (parallelized_.pipeline_parts.empty()) {
    st.model_parts = {model_.ptr().get()};
  } else {
    for (auto& part : parallelized_.pipeline_parts) st.model_parts.push_back(part.ptr().get());
  }
  st.mesh = mesh_.get();
  st.group = mesh_ ? dist::world().group().get() : nullptr;  // mesh_: this process joined the job
  st.device = device_;
  st.optimizer = optimizer_.get();
  st.scheduler = scheduler_.get();
  for (auto& loader : loaders_) st.loaders.emplace_back(loader->options().dp_rank, loader.get());
  st.dp_world = layout_.batches.dp_degree;
  st.step = &step_;
  st.parallel = {{"world_size", layout_.dims.world_size}, {"dp_replicate", layout_.dims.dp_replicate}, {"dp_shard", layout_.dims.dp_shard},
                 {"cp", layout_.dims.cp}, {"tp", layout_.dims.tp}, {"pp", layout_.dims.pp}};
  st.config_toml = cfg_.to_toml();
  st.model_args = &layout_.args;
  checkpoint_ = std::make_unique<checkpoint::CheckpointManager>(
      cfg_.checkpoint, files::join(cfg_.job.dump_folder, cfg_.checkpoint.folder), std::move(st),
      [this](const std::string& line) {
        if (banner_printed_) print(line);
        else early_lines_.push_back(line);
      });
  if (!cfg_.checkpoint.create_seed_checkpoint && options_.load_checkpoint) {
    // Loading reads only the rows of this rank's boxes (checkpoint/dcp.hpp):
    // what it holds beyond the model is measured, as init's is.
    const int64_t before = metrics::tensor_memory(device_).current_bytes;
    metrics::reset_tensor_memory_peak(device_);
    if (checkpoint_->load()) load_peak_bytes_ = metrics::tensor_memory(device_).peak_bytes - before;
  }
}

void Trainer::check_mfu(const metrics::LogRecord& r) {
  // MFU above 100 % means the peak is wrong: said once, with the cached
  // calibration invalidated (metrics/rank_peak.hpp).
  if (mfu_over_100_warned_ || r.mfu_pct <= 100.0) return;
  mfu_over_100_warned_ = true;
  print(metrics::mfu_over_peak_warning(peak_, r.mfu_pct, r.tflops * 1e12));
}

void Trainer::print(const std::string& line) {
  if (options_.console) metrics_->print(line);
}

std::optional<metrics::ValidationRecord> Trainer::validate_if_due() {
  if (!validator_ || !validator_->due(step_)) return std::nullopt;
  return validate(step_);
}

metrics::ValidationRecord Trainer::validate(int64_t step) {
  const std::shared_ptr<const cp::ContextParallel>& context = model_->context_parallel();
  auto loss_of = [&](data::Batch b) -> LossSum {
    if (context) cp::keep_sequence_shard(b, *context);  // as in training
    const auto f64 = at::TensorOptions().dtype(at::kDouble).device(device_);
    // The training loss sums over the counted targets: added up over every
    // batch of every rank and divided by their count once, at the end.
    LossSum total{at::zeros({}, f64),
                  at::scalar_tensor(static_cast<double>(ops::counted_targets(b.labels)), f64)};
    const at::Tensor labels = b.labels.to(device_);
    const at::Tensor doc_start = b.doc_start.defined() ? b.doc_start.to(device_) : at::Tensor();
    if (parallelized_.pipeline) {
      // Every micro-batch's summed loss from the last stage.
      for (double sum : parallelized_.pipeline->eval(pp::BatchInputs{b.inputs.to(device_), labels, doc_start}))
        total.sum += sum;
      return total;
    }
    const AutocastGuard amp(device_, autocast_);  // as in training
    const at::Tensor logits = model_->forward(b.inputs.to(device_), doc_start);
    total.sum += parallelized_.loss_fn(logits, labels).detach().to(at::kDouble);
    return total;
  };
  const ValidationResult v = validator_->run(loss_of, loss_group_.get());
  metrics::ValidationRecord r;
  r.step = step, r.loss = v.loss, r.targets = v.targets, r.batches = v.batches, r.seconds = v.seconds;
  metrics_->record_validation(r);
  return r;
}

Trainer::ForwardBackward Trainer::forward_backward_step() {
  // The step's batches are read first: its loss is normalised by the
  // number of counted targets in the whole global batch, which the first
  // backward already needs (torchtitan's train_step reads them first too).
  //
  // The reference of N emulated ranks takes rank 0's micro-batch, then rank
  // 1's, ..., N times as many micro-batches as one rank: the global batch
  // of the N ranks, in one process.
  //
  // Under context parallelism the cp ranks read the same batch (the data
  // rank is the dp rank) and each keeps its shard of every sequence: the
  // tokens and targets of the positions it holds. Each counts its shard's
  // targets; the count over the loss group is the global batch's.
  const auto read_t0 = std::chrono::steady_clock::now();
  const int64_t readers = static_cast<int64_t>(loaders_.size());
  const std::shared_ptr<const cp::ContextParallel>& context = model_->context_parallel();
  std::vector<data::Batch> batches;
  ForwardBackward fb;
  {
    TITAN_PROFILE_RANGE("titan::data_loading");
    for (int64_t i = 0; i < layout_.batches.accumulation_steps * readers; ++i) {
      data::Batch b = loaders_[static_cast<size_t>(i % readers)]->next();
      if (context) cp::keep_sequence_shard(b, *context);
      fb.local_targets += ops::counted_targets(b.labels);
      batches.push_back(std::move(b));
    }
    if (options_.single_process && options_.single_process->microbatch_size > 0)
      batches = cut_into_microbatches(std::move(batches), options_.single_process->microbatch_size);
  }
  const double read_seconds = seconds_since(read_t0);
  const LossNormalizer normalizer = normalize_over_global_batch(fb.local_targets, loss_group_.get(), device_);
  fb.global_targets = normalizer.global_targets;
  // The pipeline's runtime takes the scale as a number: one host read of
  // the count (a PP step syncs with the host for its loss anyway).
  fb.acc = parallelized_.pipeline
               ? accumulate_pipeline_gradients(*parallelized_.pipeline, batches,
                                               normalizer.loss_scale.item<double>(), device_)
               : accumulate_gradients(
                     model_, batches, normalizer.loss_scale, device_,
                     [this](bool last) {
                       parallelized_.step_hooks.before_micro_batch_backward(last);
                       if (step_in_backward_) step_in_backward_->arm(last);
                     },
                     parallelized_.loss_fn, autocast_);
  fb.acc.data_seconds += read_seconds;
  parallelized_.step_hooks.after_last_backward();
  return fb;
}

StepResult Trainer::train_step() {
  const auto t0 = std::chrono::steady_clock::now();
  StepResult r;
  r.step = step_ + 1;
  r.lr = scheduler_->current_lr();

  optimizer_->zero_grad(/*set_to_none=*/true);
  if (memory_) memory_->mark(r.step, "step start", params_, optimizer_.get());
  dist::FlightRecorder::instance().set_step(r.step);
  const ForwardBackward fb = forward_backward_step();
  const AccumulationResult& acc = fb.acc;
  if (options_.after_backward) options_.after_backward(params_);
  if (memory_) memory_->mark(r.step, "forward + backward", params_, optimizer_.get());
  // Job-wide numbers: the loss is the ranks' summed losses over the global
  // batch's count of targets, the tokens are their sum, and the max loss is
  // torchtitan's global_max_loss: the largest of the ranks' own means. All
  // ranks get the same values, so a NaN stops every rank at the same step.
  //
  // One host-device sync per step (two under PP, which reads the loss
  // scale): the loss's two all-reduces (a SUM of [loss sum, tokens] and a
  // MAX of [own mean]: two reduce ops, so two collectives, which on NCCL do
  // not block the host) and the clipped gradient norm all stay on the
  // device, and their values come to the host in one copy. That copy still
  // comes before the optimizer step, so a NaN loss or norm stops the run
  // before it reaches the weights (what was trained, and checkpointed, up to
  // the previous step stays usable). With [optimizer] early_step_in_backward
  // most parameters took their step during backward already: the run still
  // stops here, saving nothing, and the checkpoints of earlier steps (an
  // async save stages its copy when it starts) hold the last good weights.
  const auto f64 = acc.loss_sum.options().dtype(at::kDouble);
  at::Tensor loss_and_tokens =
      at::stack({acc.loss_sum.to(at::kDouble), at::scalar_tensor(static_cast<double>(acc.tokens), f64)});
  // A rank none of whose targets counts has no mean of its own: 0 here.
  at::Tensor max_loss =
      (acc.loss_sum.to(at::kDouble) / static_cast<double>(std::max<int64_t>(fb.local_targets, 1))).reshape({1});
  if (loss_group_) {
    loss_group_->all_reduce(loss_and_tokens);
    loss_group_->all_reduce(max_loss, dist::ReduceOp::Max);
  }
  // With the step in backward most parameters are updated already (and
  // their gradients gone): the norm is what the hooks measured, unclipped.
  const at::Tensor norm = step_in_backward_ ? step_in_backward_->finish(parallelized_.grad_shard_groups)
                                            : clip_gradients(params_, cfg_.training.max_norm,
                                                             parallelized_.grad_shard_groups,
                                                             parallelized_.grad_norm_params);
  const at::Tensor host = at::cat({loss_and_tokens, max_loss, norm.to(loss_and_tokens.device(), at::kDouble).reshape({1}),
                                   fb.global_targets.to(loss_and_tokens.device()).reshape({1})})
                              .cpu();
  const double* h = host.data_ptr<double>();
  r.loss = h[0] / h[4];
  r.max_loss = h[2];
  r.tokens = static_cast<int64_t>(h[1]);
  r.data_seconds = acc.data_seconds;
  TITAN_CHECK(std::isfinite(r.loss), "step ", r.step, ": loss is ", nonfinite_name(r.loss),
              "; stopping (lower [optimizer] lr or [training] max_norm, or check the data)");
  r.grad_norm = h[3];
  TITAN_CHECK(std::isfinite(r.grad_norm), "step ", r.step, ": gradient norm is ", nonfinite_name(r.grad_norm),
              " (loss ", r.loss, "); stopping (lower [optimizer] lr or [training] max_norm)");
  if (memory_) memory_->mark(r.step, "clip", params_, optimizer_.get());
  {
    TITAN_PROFILE_RANGE("titan::optimizer");
    optimizer_->step();
    scheduler_->step();
    parallelized_.step_hooks.after_optimizer_step();
  }
  if (memory_) memory_->mark(r.step, "optimizer", params_, optimizer_.get());
  step_ = r.step;
  r.step_seconds = seconds_since(t0);
  return r;
}

TrainSummary Trainer::train() {
  TrainSummary s;
  s.steps_planned = cfg_.training.steps;
  s.peak_flops = peak_.flops;
  s.peak_source = peak_.source;
  s.jsonl_path = jsonl_path_;
  if (metrics_->tensorboard()) s.tensorboard_dir = metrics_->tensorboard()->log_dir();
  if (options_.console) print(banner());
  banner_printed_ = true;
  for (const std::string& line : early_lines_) print(line);
  early_lines_.clear();
  if (cfg_.training.steps == 0) {
    // An init-only run: the job's layout built, parallelised and
    // initialised; each rank's memory; and, with checkpointing on, a
    // sharded step-0 checkpoint of the weights that every rank writes (a
    // seed checkpoint of any layout, which jobs of any other layout load).
    const std::string table = init_memory_table();
    if (options_.console) {
      std::ostream& out = options_.out ? *options_.out : std::cout;
      out << table << std::flush;
    }
    if (checkpoint_) checkpoint_->save(0, /*model_only=*/true, at::kFloat);
    s.steps_done = 0;
    return s;
  }
  if (checkpoint_ && cfg_.checkpoint.create_seed_checkpoint) {
    // torchtitan's create_seed_checkpoint: the initial weights, whole, as
    // step-0, which jobs of any layout then load instead of initialising.
    checkpoint_->save(0, /*model_only=*/true, at::kFloat);
    s.steps_done = 0;
    return s;
  }

  s.resumed_from = step_;  // > 0 when a checkpoint was loaded
  std::optional<StopSignal> stop;
  if (options_.handle_signals) stop.emplace();
  double timed_seconds = 0;  // steps after the first: the steady-state rate
  int64_t timed_tokens = 0;
  double first_tps = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double agree_seconds = 0;  // the last stop agreement's
  double comm_start_us = 0;  // the CommLog's clock at the last step's start (a fake rank's report)
  s.fake_rank = fake_run_.has_value();
  try {
    while (step_ < cfg_.training.steps) {
      if (profiler_) profiler_->step_begin(step_ + 1);
      if (fake_run_) {
        metrics::reset_tensor_memory_peak(device_);
        comm_start_us = dist::CommLog::instance().now_us();
      }
      StepResult r;
      try {
        r = train_step();
      } catch (...) {
        if (memory_) memory_->on_failure(step_ + 1);  // e.g. out of memory: what the step held, for memory_viz
        throw;
      }
      // The last stop agreement's wait belongs to this step's period: on a
      // GPU its flag read is where the host waited for the previous step's
      // optimizer kernels (one rank's next step absorbs them the same way).
      r.step_seconds += agree_seconds;
      if (profiler_) profiler_->step_end(r.step);
      if (fake_run_) note_fake_step(r, s.losses.size());
      if (memory_) memory_->step_end(r.step);
      metrics::StepInput in;
      in.step = r.step, in.loss = r.loss, in.max_loss = r.max_loss, in.grad_norm = r.grad_norm, in.lr = r.lr;
      in.tokens = r.tokens, in.step_seconds = r.step_seconds, in.data_seconds = r.data_seconds;
      if (auto logged = metrics_->record(in)) check_mfu(*logged);
      s.losses.push_back(r.loss);
      if (s.losses.size() == 1) {
        first_tps = r.tokens / r.step_seconds;  // the rate reported if no second step runs
      } else {
        timed_seconds += r.step_seconds;
        timed_tokens += r.tokens;
      }
      // Validation, then the save (torchtitan's loop, v0.2.2 and main, saves
      // first). Neither changes the weights, so the order changes no number;
      // this way a step's validation loss is logged before a save that can
      // take long.
      if (const auto v = validate_if_due()) s.validation_losses.push_back({step_, v->loss});
      if (checkpoint_) checkpoint_->maybe_save(step_, step_ == cfg_.training.steps);
      if (options_.on_step) options_.on_step(r);
      const auto agree_t0 = std::chrono::steady_clock::now();
      const bool stopping = stop_agreed(stop, layout_.dims.world_size);
      agree_seconds = seconds_since(agree_t0);
      if (stopping) {
        s.interrupted = true;
        const int sig = stop->signal_number();
        print(strprintf("%s: stopped cleanly after step %lld of %lld",
                        sig == SIGTERM ? "SIGTERM received"
                                       : (sig == SIGINT ? "Ctrl-C (SIGINT) received" : "a peer rank was signalled"),
                        static_cast<long long>(step_), static_cast<long long>(cfg_.training.steps)));
        break;
      }
    }
  } catch (...) {
    metrics_->finish();  // the error line must not land on a progress line
    throw;
  }
  metrics_->finish();
  if (checkpoint_) checkpoint_->close();  // the background save, and any rank's failure of it
  s.wall_seconds = seconds_since(t0);
  s.steps_done = step_;
  const int ranks = static_cast<int>(layout_.dims.world_size);
  s.mean_tps = timed_seconds > 0 ? metrics::tokens_per_second_per_rank(timed_tokens, timed_seconds, ranks)
                                 : first_tps / ranks;
  s.mean_tflops = metrics::achieved_flops_per_rank(flops_per_token_, s.mean_tps) / 1e12;
  if (peak_.flops > 0) s.mfu_pct = metrics::mfu_percent(flops_per_token_, s.mean_tps, peak_.flops);
  if (options_.console) {
    std::ostream& out = options_.out ? *options_.out : std::cout;
    if (fake_run_) out << fake_report(comm_start_us);
    out << format_summary(s) << std::flush;
  }
  return s;
}

void Trainer::note_fake_step(const StepResult& r, size_t steps_before) {
  // The step's peak: the counter's since the step began, or, where the
  // memory timeline marked this step (its marks restart the counter's
  // window), the largest of its phases.
  int64_t peak = metrics::tensor_memory(device_).peak_bytes;
  if (memory_ && memory_->records(r.step))
    for (const profiling::MemoryMark& m : memory_->marks()) peak = std::max(peak, m.peak);
  FakeRankRun& f = *fake_run_;
  // Steady state from the run's second step on: the first one also makes
  // the optimizer's state (kept only while it is the only step).
  if (steps_before <= 1) {
    f.step_peak = 0;
    f.peak_steps.clear();
    f.step_seconds.clear();
  }
  f.step_peak = std::max(f.step_peak, peak);
  f.peak_steps.push_back(r.step);
  f.step_seconds.push_back(r.step_seconds);
}

std::string Trainer::fake_report(double last_step_start_us) {
  FakeRankRun& f = *fake_run_;
  f.pp_rank = layout_.dims.pp > 1 ? static_cast<int>(mesh_->local_rank("pp")) : 0;
  f.parameters = 0;
  for (const at::Tensor& p : params_) f.parameters += p.numel() * static_cast<int64_t>(p.element_size());
  f.optimizer_state = optim::optimizer_state_bytes(*optimizer_);
  const metrics::MemoryStats m = metrics::memory_stats(device_);
  f.process_peak = m.peak_bytes;
  f.process_peak_source = device_.is_cuda() ? "CUDA max reserved" : "process resident peak (VmHWM)";
  f.last_step_comm.clear();
  for (const dist::CommRecord& r : dist::CommLog::instance().records())
    if (r.start_us >= last_step_start_us) f.last_step_comm.push_back(r);
  return fake_rank_report(f, estimate::estimate_job(layout_));
}

}  // namespace titan::train
