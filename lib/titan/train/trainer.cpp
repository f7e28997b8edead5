#include "titan/train/trainer.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>
#include <torch/optim/optimizer.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cmath>
#include <iostream>
#include <sstream>

#include "titan/checkpoint/manager.hpp"
#include "titan/config/supported.hpp"
#include "titan/util/files.hpp"
#include "titan/dist/device_mesh.hpp"
#include "titan/dist/flight_recorder.hpp"
#include "titan/dist/launch_env.hpp"
#include "titan/dist/process_group.hpp"
#include "titan/dist/world.hpp"
#include "titan/metrics/cpu_peak.hpp"
#include "titan/metrics/format.hpp"
#include "titan/metrics/memory.hpp"
#include "titan/metrics/mfu.hpp"
#include "titan/metrics/peak_flops.hpp"
#include "titan/metrics/tensor_memory.hpp"
#include "titan/metrics/tensorboard.hpp"
#include "titan/models/llama3/flops.hpp"
#include "titan/models/llama3/tp_plan.hpp"
#include "titan/models/materialize.hpp"
#include "titan/optim/optimizer.hpp"
#include "titan/parallel/activation_checkpoint/checkpoint.hpp"
#include "titan/parallel/context_parallel/context.hpp"
#include "titan/ops/cross_entropy.hpp"
#include "titan/parallel/pipeline/runtime.hpp"
#include "titan/profiling/memory_snapshot.hpp"
#include "titan/util/range.hpp"
#include "titan/profiling/trace_profiler.hpp"
#include "titan/train/autocast.hpp"
#include "titan/train/determinism.hpp"
#include "titan/train/device.hpp"
#include "titan/train/stop_signal.hpp"
#include "titan/train/train_step.hpp"
#include "titan/train/validator.hpp"
#include "titan/util/error.hpp"
#include "titan/util/strprintf.hpp"

namespace titan::train {

using metrics::human_bytes;
using titan::strprintf;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

optim::OptimizerOptions optimizer_options(const config::OptimizerSection& o) {
  optim::OptimizerOptions r;
  r.name = o.name, r.lr = o.lr, r.beta1 = o.beta1, r.beta2 = o.beta2, r.eps = o.eps;
  r.weight_decay = o.weight_decay;
  // torchtitan's default implementation: one fused kernel per parameter
  // instead of a dozen elementwise ones (~5% of a debugmodel step on CPU).
  r.fused = true;
  return r;
}

optim::LRScheduleOptions schedule_options(const config::JobConfig& cfg) {
  optim::LRScheduleOptions r;
  r.steps = std::max<int64_t>(1, cfg.training.steps);  // an init-only run (steps = 0) never steps it
  r.warmup_steps = cfg.lr_scheduler.warmup_steps;
  if (cfg.lr_scheduler.decay_ratio >= 0) r.decay_ratio = cfg.lr_scheduler.decay_ratio;
  // "wsd" names the warmup-stable-decay shape (a stable phase set by
  // decay_ratio) whose decay is linear; the curve itself is then "linear".
  r.decay_type = cfg.lr_scheduler.decay_type == "wsd" ? "linear" : cfg.lr_scheduler.decay_type;
  r.min_lr_factor = cfg.lr_scheduler.min_lr_factor;
  return r;
}

// Under context parallelism: this rank's shard of every sequence of `b`.
// Document starts are sharded like the tokens and keep their values:
// window positions, which the ring's blocks compare keys with.
void keep_cp_shard(data::Batch& b, const cp::ContextParallel& context) {
  const cp::SequenceLayout& layout = context.attention.layout;
  b.inputs = cp::shard_sequence(b.inputs, 1, layout, context.rank()).contiguous();
  b.labels = cp::shard_sequence(b.labels, 1, layout, context.rank()).contiguous();
  if (b.doc_start.defined()) b.doc_start = cp::shard_sequence(b.doc_start, 1, layout, context.rank()).contiguous();
}

std::string nonfinite_name(double v) { return std::isnan(v) ? "NaN" : (v > 0 ? "inf" : "-inf"); }

}  // namespace

Trainer::Trainer(config::JobConfig cfg, TrainerOptions options)
    : cfg_(std::move(cfg)), options_(std::move(options)) {
  // Everything that can be wrong with the inputs is checked first, cheapest
  // first, so that a bad config fails in milliseconds with one line and
  // before any output.
  TITAN_CHECK(options_.emulate_dp_ranks >= 1, "emulate_dp_ranks must be >= 1, got ", options_.emulate_dp_ranks);
  // The emulating reference is one process whatever launched it (tests run
  // it on every rank of a parallel job to compare against).
  const bool single = options_.emulate_dp_ranks > 1 || options_.single_process;
  const dist::LaunchEnv env = single ? dist::LaunchEnv{} : dist::read_launch_env();
  rank_ = env.rank;
  config::check_supported(cfg_, env.world_size);
  dims_ = parallel::ParallelDims::from_config(cfg_, env.world_size);
  if (cfg_.checkpoint.create_seed_checkpoint) {
    TITAN_CHECK(cfg_.checkpoint.enable_checkpoint,
                "[checkpoint] create_seed_checkpoint needs [checkpoint] enable_checkpoint = true");
    TITAN_CHECK(env.world_size == 1, "[checkpoint] create_seed_checkpoint runs on one process (the seed holds whole, "
                "unsharded weights), not under WORLD_SIZE=", env.world_size);
  }
  const int64_t dp_ranks_read = std::max<int64_t>(dims_.dp_degree(), options_.emulate_dp_ranks);
  plan_ = config::plan_batches(cfg_, dp_ranks_read);
  device_ = resolve_device(cfg_.training.device, env.local_rank);
  // Mixed precision without FSDP: torchtitan's AMP for one device and DDP.
  autocast_ = autocast_dtype(dims_, cfg_.training.mixed_precision_param, device_, options_.autocast_on_cpu);

  args_ = options_.model_args ? *options_.model_args
                              : models::llama3::flavor_args(cfg_.model.flavor, cfg_.model.n_layers);
  args_.max_seq_len = cfg_.training.seq_len;
  args_.attn_type = cfg_.model.attn_type;
  args_.fused_kernels = cfg_.model.fused_kernels;
  // block_causal from the config, or from a flavor that is block-causal by
  // itself (torchtitan's debugmodel_flex_attn, 8B_varlen, ...).
  if (cfg_.model.attn_mask_type == "block_causal") args_.attn_mask_type = "block_causal";
  // Said before any model is built: titan's flash kernels exist for the CPU
  // and, in CUDA builds, for CUDA GPUs.
#ifndef TITAN_HAS_CUDA
  TITAN_CHECK(args_.attn_type != "flash" || device_.is_cpu(), "[model] attn_type = \"flash\" runs on the CPU in ",
              "this build (built without CUDA), but training.device is ", device_.str());
#endif
  TITAN_CHECK(args_.attn_type != "flash" || device_.is_cpu() || device_.is_cuda(),
              "[model] attn_type = \"flash\" runs on the CPU or a CUDA GPU, not on ", device_.str());
  args_.validate();
  if (dims_.tp_enabled())
    models::llama3::check_tp_job(args_, dims_.tp, cfg_.training.seq_len, models::llama3::tp_options(cfg_));
  models::llama3::check_pipeline_job(cfg_, dims_, args_.n_layers, plan_.local_batch);
  models::llama3::check_context_parallel_job(cfg_, dims_);
  ac::blocks_to_checkpoint(cfg_.activation_checkpoint.mode, cfg_.activation_checkpoint.selective_ac_option,
                           args_.n_layers);  // a bad option fails here, before the job starts

  const data::TokenizerChoice choice =
      data::choose_tokenizer_path(cfg_.model.tokenizer_path, cfg_.model.hf_assets_path, args_.vocab_size);
  tokenizer_ = data::load_tokenizer(choice.path);
  tokenizer_note_ = choice.note;
  data::check_vocab_fits(*tokenizer_, args_.vocab_size);

  // Join the job once the inputs are known to be good (so a bad config fails
  // alike on every rank without a rendezvous), then lay the ranks out.
  if (env.world_size > 1) {
    dist::InitOptions init;
    init.device = device_.is_cuda() ? "cuda" : "cpu";
    init.timeout = std::chrono::seconds(cfg_.comm.timeout_seconds);
    init.rendezvous_timeout = std::chrono::seconds(cfg_.comm.init_timeout_seconds);
    init.flight_recorder_entries = cfg_.comm.trace_buf_size;
    init.flight_recorder_folder = files::join(cfg_.job.dump_folder, cfg_.comm.save_traces_folder);
    init.flight_recorder_prefix = cfg_.comm.save_traces_file_prefix;
    const dist::World& world = dist::init_distributed(init);
    mesh_ = std::make_unique<dist::DeviceMesh>(dims_.build_mesh(world));
    const std::string dp_name = dims_.dp_mesh_name();
    if (!dp_name.empty() && dims_.dp_degree() > 1) dp_group_ = mesh_->group(dp_name);
    loss_group_ = dp_group_;
    if (dims_.cp_enabled()) loss_group_ = mesh_->group(dims_.dp_degree() > 1 ? "dp_cp" : "cp");
  }

  // The CPU peak is calibrated here: every rank has joined (the rendezvous
  // above is a barrier), and none has started loading data or building the
  // model, so nothing of this job computes while it is measured.
  if (!options_.peak_flops && !device_.is_cuda()) calibrate_cpu_peak(env);

  // Data: this rank's shard of the documents, or (the reference) the shards
  // of every emulated rank.
  const int64_t dp_rank = dp_group_ ? dp_group_->rank() : 0;
  for (int64_t k = 0; k < options_.emulate_dp_ranks; ++k) {
    data::DataLoaderOptions dopts;
    dopts.dataset = cfg_.training.dataset;
    dopts.dataset_path = cfg_.training.dataset_path;
    dopts.batch_size = plan_.local_batch;
    dopts.seq_len = cfg_.training.seq_len;
    dopts.dp_rank = options_.emulate_dp_ranks > 1 ? k : dp_rank;
    dopts.dp_world = plan_.dp_degree;
    dopts.document_masking = args_.attn_mask_type == "block_causal";
    loaders_.push_back(std::make_unique<data::DataLoader>(tokenizer_, dopts));
    // A dataset too small for one window (an empty file) would only fail at
    // step 1, after the model was built and the banner printed: draw one
    // batch now and rewind, which the loader restores exactly.
    const auto start = loaders_.back()->state_dict();
    loaders_.back()->next();
    loaders_.back()->load_state_dict(start);
  }

  // [validation]: the held-out split of the same data-parallel ranks. Its
  // batches go through the same stages, shards and cp ring as training's,
  // so under PP they must have training's shapes, and under CP or
  // sequence parallelism its sequences training's length (the cuts those
  // layouts make were checked for that length).
  if (cfg_.validation.enable) {
    const config::ValidationSection& v = cfg_.validation;
    const bool same_len = dims_.pp > 1 || dims_.cp_enabled() ||
                          (dims_.tp_enabled() && models::llama3::tp_options(cfg_).sequence_parallel);
    TITAN_CHECK(!same_len || v.seq_len == cfg_.training.seq_len, "[validation] seq_len = ", v.seq_len,
                " must equal [training] seq_len = ", cfg_.training.seq_len,
                " under pipeline, context or sequence parallelism (their cuts are made for that length)");
    TITAN_CHECK(dims_.pp == 1 || v.local_batch_size == plan_.local_batch, "[validation] local_batch_size = ",
                v.local_batch_size, " must equal the training's local batch ", plan_.local_batch,
                " under pipeline parallelism (the stages' micro-batches have that shape)");
    std::vector<int64_t> ranks;
    for (int64_t k = 0; k < options_.emulate_dp_ranks; ++k) ranks.push_back(options_.emulate_dp_ranks > 1 ? k : dp_rank);
    validator_ = std::make_unique<Validator>(v, tokenizer_, ranks, plan_.dp_degree, args_.attn_mask_type == "block_causal",
                                             mesh_ ? dist::world().group().get() : nullptr, device_);
  }

  // Memory snapshots count tensors from here on, so that the model,
  // gradients and optimizer state are all seen.
  if (cfg_.profiling.enable_memory_snapshot)
    memory_ = std::make_unique<profiling::MemoryRecorder>(
        cfg_.profiling.profile_freq, files::join(cfg_.job.dump_folder, cfg_.profiling.save_memory_snapshot_folder), rank_,
        device_, [this](const std::string& line) { print(line); });
  set_determinism(cfg_.training.seed, cfg_.training.deterministic, device_);
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
  model_ = models::llama3::Transformer(args_, at::TensorOptions().device(at::kMeta).dtype(at::kFloat));
  model_->train();
  if (!mesh_) models::to_empty(*model_, device_);
  parallelized_ = models::llama3::parallelize_llama(model_, dims_, mesh_.get(), cfg_, plan_.local_batch);
  {
    std::vector<torch::nn::Module*> parts;
    if (parallelized_.pipeline_parts.empty()) parts.push_back(model_.ptr().get());
    for (auto& part : parallelized_.pipeline_parts) parts.push_back(part.ptr().get());
    init_report_ = init_sharded_weights(parts, mesh_.get(), args_, static_cast<uint64_t>(cfg_.training.seed));
  }
  init_peak_bytes_ = metrics::tensor_memory(device_).peak_bytes - bytes_before_model;
  params_ = parallelized_.params;
  optimizer_ = optim::build_optimizer(params_, optimizer_options(cfg_.optimizer));
  scheduler_ = std::make_unique<optim::LRScheduler>(*optimizer_, optim::LRSchedule(schedule_options(cfg_)));

  // MFU: model FLOPs per token over the rank's peak. The GPU peak comes
  // from the datasheet table; a CPU has none that LibTorch can reach, so it
  // is a timed GEMM (cached per machine and thread count).
  flops_per_token_ = models::llama3::flops_per_token(args_, cfg_.training.seq_len);
  if (options_.peak_flops) {
    peak_flops_ = *options_.peak_flops;
    peak_source_ = "given";
  } else if (device_.is_cuda()) {
    // The peak of the dtype the matmuls run in (bf16 under FSDP's mixed
    // precision or autocast), not always fp32's: that made bf16 MFU ~15x too high.
    const at::ScalarType compute = metrics::compute_dtype_for_peak(dims_.fsdp_enabled() || autocast_.has_value(),
                                                                   cfg_.training.mixed_precision_param);
    metrics::PeakFlops p = metrics::peak_flops_for_device(metrics::device_name(device_), compute,
                                                          at::globalContext().allowTF32CuBLAS());
    peak_flops_ = p.flops;
    peak_source_ = p.matched + " " + p.precision;
    if (!p.known) peak_source_ += "; " + p.warning;
  } else if (cpu_peak_flops_ > 0) {
    peak_flops_ = cpu_peak_flops_;
    // Emulated ranks share the machine's cores: with more threads on the
    // node than cores, a rank gets only its share of the measured peak, or
    // MFU would be overstated by the oversubscription. The peak was measured
    // with the rank's own thread count, alone on the machine, so
    // peak(t) · cores / (ranks · t) is an upper bound of what one of the
    // ranks sharing the cores can do (one core runs one thread at a time).
    const long cores = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
    const double wanted = static_cast<double>(env.local_world_size) * cpu_peak_threads_;
    if (wanted > static_cast<double>(cores)) {
      peak_flops_ *= static_cast<double>(cores) / wanted;
      peak_source_ += strprintf("; x%.2f: %d ranks x %d threads share %ld cores", static_cast<double>(cores) / wanted,
                                env.local_world_size, cpu_peak_threads_, cores);
    }
  }

  // Outputs go under [job] dump_folder; a new run starts a new metrics file.
  TITAN_CHECK(files::make_directories(cfg_.job.dump_folder), "cannot create [job] dump_folder '",
              cfg_.job.dump_folder, "'");
  jsonl_path_ = cfg_.job.dump_folder + "/metrics.jsonl";
  if (rank_ == 0) ::unlink(jsonl_path_.c_str());
  metrics::MetricsOptions mopts;
  mopts.log_freq = cfg_.metrics.log_freq;
  mopts.total_steps = cfg_.training.steps;
  mopts.flops_per_token = flops_per_token_;
  mopts.peak_flops = peak_flops_;
  mopts.num_ranks = static_cast<int>(dims_.world_size);
  mopts.device = device_;
  // One log for the job: rank 0 prints and writes the metrics files, the
  // others only compute (their values are the same job-wide ones; N ranks
  // appending to one metrics.jsonl would repeat every step N times).
  if (rank_ == 0) {
    mopts.jsonl_path = jsonl_path_;
    if (cfg_.metrics.enable_tensorboard)
      mopts.tensorboard_dir = metrics::tensorboard_run_dir(cfg_.job.dump_folder, cfg_.metrics.save_tb_folder);
  } else {
    options_.console = false;
  }
  mopts.console = options_.console;
  mopts.progress = options_.progress;
  mopts.out = options_.out;
  metrics_ = std::make_unique<metrics::MetricsProcessor>(mopts);

  // Checkpoints: resume from the latest one in the folder (a fresh start
  // when there is none), resharded to this job's layout.
  if (cfg_.checkpoint.enable_checkpoint) {
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
    st.dp_world = plan_.dp_degree;
    st.step = &step_;
    st.parallel = {{"world_size", dims_.world_size}, {"dp_replicate", dims_.dp_replicate}, {"dp_shard", dims_.dp_shard},
                   {"cp", dims_.cp}, {"tp", dims_.tp}, {"pp", dims_.pp}};
    st.config_toml = cfg_.to_toml();
    st.model_args = &args_;
    checkpoint_ = std::make_unique<checkpoint::CheckpointManager>(
        cfg_.checkpoint, files::join(cfg_.job.dump_folder, cfg_.checkpoint.folder), std::move(st),
        [this](const std::string& line) {
          if (banner_printed_) print(line);
          else early_lines_.push_back(line);
        });
    if (!cfg_.checkpoint.create_seed_checkpoint) {
      // Loading reads only the rows of this rank's boxes (checkpoint/dcp.hpp):
      // what it holds beyond the model is measured, as init's is.
      const int64_t before = metrics::tensor_memory(device_).current_bytes;
      metrics::reset_tensor_memory_peak(device_);
      if (checkpoint_->load()) load_peak_bytes_ = metrics::tensor_memory(device_).peak_bytes - before;
    }
  }

  // Traces on torchtitan's schedule; every rank writes its own.
  if (cfg_.profiling.enable_profiling) {
    profiling::ProfileSchedule ps{cfg_.profiling.profile_freq, cfg_.profiling.profiler_warmup,
                                  cfg_.profiling.profiler_active};
    profiler_ = std::make_unique<profiling::TraceProfiler>(
        ps, files::join(cfg_.job.dump_folder, cfg_.profiling.save_traces_folder), rank_, device_.is_cuda(),
        [this](const std::string& line) { print(line); });
  }
}

Trainer::~Trainer() = default;

void Trainer::calibrate_cpu_peak(const dist::LaunchEnv& env) {
  // One process per node measures (local rank 0, between two barriers: the
  // others wait there without computing) and every rank receives its
  // figure through the world group, so ranks never calibrate at the same
  // time and never depend on the cache file being writable. Across jobs the
  // cache's file lock queues concurrent calibrations.
  const bool joined = env.world_size > 1 && dist::is_initialized();
  const bool measures = !joined || env.local_rank == 0;
  const auto group = joined ? dist::world().group() : nullptr;
  if (group) group->barrier();
  metrics::CpuPeak p;
  if (measures) p = metrics::cpu_peak_flops();
  if (group) {
    // The job-wide maximum of the nodes' figures (one per node; the
    // others contribute 0): identical CPUs give the same figure, and a
    // mixed job is judged against its fastest node, which keeps MFU low
    // rather than high.
    at::Tensor t = at::tensor({measures ? p.flops : 0.0, measures ? static_cast<double>(p.threads) : 0.0},
                              at::TensorOptions().dtype(at::kDouble));
    group->all_reduce(t, dist::ReduceOp::Max);
    if (!measures) {
      p.flops = t[0].item<double>();
      p.threads = at::get_num_threads();
      p.from_cache = true;  // what this rank reports: it did not measure
    }
  }
  cpu_peak_flops_ = p.flops;
  cpu_peak_threads_ = p.threads;
  if (measures) {
    cpu_peak_cache_path_ = p.cache_path;
    cpu_peak_key_ = p.key;
  }
  peak_source_ = strprintf("measured CPU GEMM peak, %d threads%s", p.threads,
                           p.from_cache ? ", cached" : (p.clean ? ", measured now" : ""));
  if (measures && !p.clean)
    peak_source_ += strprintf("; the machine was busy while measuring (CPU share %.0f%%): corrected for it and not "
                              "cached, MFU may be off",
                              100 * p.cpu_share);
}

void Trainer::check_mfu(const metrics::LogRecord& r) {
  // MFU above 100 % means the run achieved more than the peak: the peak is
  // wrong (a calibration the cache validation did not catch, a faster
  // machine state than at calibration). The figure is logged as measured,
  // not clamped (a clamped 100 % would hide a wrong denominator), the
  // user is told once, and the cache entry is invalidated so that the next
  // run re-measures.
  if (mfu_over_100_warned_ || r.mfu_pct <= 100.0) return;
  mfu_over_100_warned_ = true;
  bool invalidated = false;
  if (!cpu_peak_key_.empty())
    invalidated = metrics::invalidate_cpu_peak(
        cpu_peak_cache_path_, cpu_peak_key_,
        strprintf("a run achieved %.3g FLOP/s per rank, MFU %.1f%%", r.tflops * 1e12, r.mfu_pct));
  print(strprintf("warning: MFU %.1f%% > 100%%: the peak (%s) is lower than what this run achieves%s", r.mfu_pct,
                  peak_source_.c_str(),
                  invalidated ? "; the cached calibration is invalidated and will be re-measured next run" : ""));
}

void Trainer::print(const std::string& line) {
  if (options_.console) metrics_->print(line);
}

std::string Trainer::banner() const {
  const int64_t n_params = models::llama3::count_parameters(args_);
  std::string s = strprintf("titan train: %s\n", cfg_.job.description.c_str());
  s += strprintf("  model     llama3 %s: %s parameters (dim %lld, %lld layers, %lld heads, vocab %lld)\n",
                 options_.model_args ? "(custom args)" : cfg_.model.flavor.c_str(),
                 metrics::with_thousands(static_cast<double>(n_params)).c_str(), static_cast<long long>(args_.dim),
                 static_cast<long long>(args_.n_layers), static_cast<long long>(args_.n_heads),
                 static_cast<long long>(args_.vocab_size));
  s += "  device    " + device_.str() + " (" + metrics::device_name(device_) + ")";
  if (device_.is_cpu()) s += strprintf(", %d threads", at::get_num_threads());
  s += "\n  tokenizer " + tokenizer_->describe() + "\n";
  if (!tokenizer_note_.empty()) s += "            " + tokenizer_note_ + "\n";
  s += "  data      " + loaders_.front()->dataset_path() + "\n";
  if (validator_) {
    const config::ValidationSection& v = cfg_.validation;
    s += strprintf("  validate  after step 1 and every %lld: %lld batch(es) of %lld x %lld tokens per data-parallel rank%s\n",
                   static_cast<long long>(v.freq), static_cast<long long>(validator_->batches()),
                   static_cast<long long>(v.local_batch_size), static_cast<long long>(v.seq_len),
                   v.steps == -1 ? " (one pass)" : "");
  }
  s += "  parallel  " + dims_.describe() + (parallelized_.description.empty() ? "" : ": " + parallelized_.description);
  if (options_.emulate_dp_ranks > 1)
    s += strprintf("single-process reference of %lld data-parallel ranks", static_cast<long long>(options_.emulate_dp_ranks));
  if (autocast_) s += std::string("; forward and loss autocast to ") + c10::toString(*autocast_) + " (no FSDP)";
  s += "\n";
  s += strprintf("  batch     %lld x %lld tokens, %lld micro-batch(es) per step on %lld data-parallel rank(s) = %s tokens per step\n",
                 static_cast<long long>(plan_.local_batch), static_cast<long long>(cfg_.training.seq_len),
                 static_cast<long long>(plan_.accumulation_steps), static_cast<long long>(plan_.dp_degree),
                 metrics::with_thousands(static_cast<double>(plan_.global_batch * cfg_.training.seq_len)).c_str());
  if (parallelized_.pipeline)
    s += strprintf("            each cut into %d pipeline micro-batches of %lld sequence(s)\n",
                   parallelized_.pipeline->spec().microbatches,
                   static_cast<long long>(cfg_.experimental.pipeline_parallel_microbatch_size));
  s += strprintf("  optimizer %s lr %g, %lld warm-up steps, %s decay; %lld steps, seed %lld\n",
                 cfg_.optimizer.name.c_str(), cfg_.optimizer.lr, static_cast<long long>(scheduler_->schedule().warmup_steps()),
                 cfg_.lr_scheduler.decay_type.c_str(), static_cast<long long>(cfg_.training.steps),
                 static_cast<long long>(cfg_.training.seed));
  s += strprintf("  flops     %.3g per token; peak %.3f TFLOP/s (%s)\n", flops_per_token_, peak_flops_ / 1e12,
                 peak_source_.c_str());
  const ShardedInitReport& i = init_report_;
  s += strprintf("  init      sharded, rank %d: %s of the model's %s of parameters (%.1f%%, largest piece %s), "
                 "tensor peak %s, %.2f s",
                 rank_, human_bytes(static_cast<double>(i.local_bytes)).c_str(),
                 human_bytes(static_cast<double>(i.model_bytes)).c_str(),
                 i.model_bytes > 0 ? 100.0 * static_cast<double>(i.local_bytes) / static_cast<double>(i.model_bytes) : 0.0,
                 human_bytes(static_cast<double>(i.largest_piece_bytes)).c_str(),
                 human_bytes(static_cast<double>(init_peak_bytes_)).c_str(), i.seconds);
  return s;
}

std::string Trainer::init_memory_table() {
  // [local bytes, init peak, largest piece] of every rank, gathered.
  at::Tensor mine = at::tensor({static_cast<double>(init_report_.local_bytes), static_cast<double>(init_peak_bytes_),
                                static_cast<double>(init_report_.largest_piece_bytes),
                                static_cast<double>(load_peak_bytes_)},
                               at::TensorOptions().dtype(at::kDouble))
                        .reshape({1, 4});
  at::Tensor all = mine;
  if (mesh_) all = dist::world().group()->all_gather(mine.to(device_), 0).cpu();
  const double model = static_cast<double>(init_report_.model_bytes);
  // A loaded checkpoint (the weights came from it, not from the init):
  // what its reading held beyond the model, next to the init's.
  const bool loaded = load_peak_bytes_ >= 0;
  std::string out = strprintf("init-only run (training.steps = 0): the model's parameters are %s\n"
                              "  rank  parameters held   share   largest piece   tensor peak during init   peak / model%s\n",
                              human_bytes(model).c_str(), loaded ? "   tensor peak during load   load / model" : "");
  for (int64_t r = 0; r < all.size(0); ++r) {
    const double held = all[r][0].item<double>(), peak = all[r][1].item<double>(), piece = all[r][2].item<double>();
    out += strprintf("  %4lld  %15s  %6.2f%%  %14s  %24s  %12.4f", static_cast<long long>(r),
                     human_bytes(held).c_str(), 100.0 * held / model, human_bytes(piece).c_str(),
                     human_bytes(peak).c_str(), peak / model);
    if (loaded) {
      const double load = all[r][3].item<double>();
      out += strprintf("  %24s  %12.4f", human_bytes(load).c_str(), load / model);
    }
    out += "\n";
  }
  return out;
}

metrics::ValidationRecord Trainer::validate(int64_t step) {
  const std::shared_ptr<const cp::ContextParallel>& context = model_->context_parallel();
  auto loss_of = [&](data::Batch b) -> LossSum {
    if (context) keep_cp_shard(b, *context);  // as in training
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

StepResult Trainer::train_step() {
  const auto t0 = std::chrono::steady_clock::now();
  StepResult r;
  r.step = step_ + 1;
  r.lr = scheduler_->current_lr();

  optimizer_->zero_grad(/*set_to_none=*/true);
  if (memory_) memory_->mark(r.step, "step start", params_, optimizer_.get());
  dist::FlightRecorder::instance().set_step(r.step);
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
  int64_t local_targets = 0;
  {
    TITAN_PROFILE_RANGE("titan::data_loading");
    for (int64_t i = 0; i < plan_.accumulation_steps * readers; ++i) {
      data::Batch b = loaders_[static_cast<size_t>(i % readers)]->next();
      if (context) keep_cp_shard(b, *context);
      local_targets += ops::counted_targets(b.labels);
      batches.push_back(std::move(b));
    }
  }
  const double read_seconds = seconds_since(read_t0);
  const LossNormalizer normalizer = normalize_over_global_batch(local_targets, loss_group_.get(), device_);
  // The pipeline's schedule takes the scale as a number: one host read of
  // the count (a PP step syncs with the host for its loss anyway).
  AccumulationResult acc =
      parallelized_.pipeline
          ? accumulate_pipeline_gradients(*parallelized_.pipeline, batches,
                                          normalizer.loss_scale.item<double>(), device_)
          : accumulate_gradients(
                model_, batches, normalizer.loss_scale, device_,
                [this](bool last) { parallelized_.step_hooks.before_micro_batch_backward(last); },
                parallelized_.loss_fn, autocast_);
  acc.data_seconds += read_seconds;
  parallelized_.step_hooks.after_last_backward();
  // Fault injection for the tests of `titan verify`: "RANK:FACTOR" makes
  // that rank of a multi-rank job scale its gradients (its shards under
  // FSDP) by FACTOR, as a layout that mis-averaged (or mis-signed) them
  // would. Never set in real runs.
  if (const char* bad = std::getenv("TITAN_FAULT_SCALE_GRADS"); bad && *bad && mesh_) {
    const std::string spec(bad);
    const size_t colon = spec.find(':');
    if (colon != std::string::npos && std::atoi(spec.substr(0, colon).c_str()) == rank_)
      for (const at::Tensor& p : params_)
        if (p.grad().defined()) p.grad().mul_(std::atof(spec.substr(colon + 1).c_str()));
  }
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
  // the previous step stays usable).
  const auto f64 = acc.loss_sum.options().dtype(at::kDouble);
  at::Tensor loss_and_tokens =
      at::stack({acc.loss_sum.to(at::kDouble), at::scalar_tensor(static_cast<double>(acc.tokens), f64)});
  // A rank none of whose targets counts has no mean of its own: 0 here.
  at::Tensor max_loss =
      (acc.loss_sum.to(at::kDouble) / static_cast<double>(std::max<int64_t>(local_targets, 1))).reshape({1});
  if (loss_group_) {
    loss_group_->all_reduce(loss_and_tokens);
    loss_group_->all_reduce(max_loss, dist::ReduceOp::Max);
  }
  const at::Tensor norm = clip_gradients(params_, cfg_.training.max_norm, parallelized_.grad_shard_groups,
                                         parallelized_.grad_norm_params);
  const at::Tensor host = at::cat({loss_and_tokens, max_loss, norm.to(loss_and_tokens.device(), at::kDouble).reshape({1}),
                                   normalizer.global_targets.to(loss_and_tokens.device()).reshape({1})})
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
  s.peak_flops = peak_flops_;
  s.peak_source = peak_source_;
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

  std::optional<StopSignal> stop;
  if (options_.handle_signals) stop.emplace();
  double timed_seconds = 0;  // steps after the first: the steady-state rate
  int64_t timed_tokens = 0;
  double first_tps = 0;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    while (step_ < cfg_.training.steps) {
      if (profiler_) profiler_->step_begin(step_ + 1);
      StepResult r;
      try {
        r = train_step();
      } catch (...) {
        if (memory_) memory_->on_failure(step_ + 1);  // e.g. out of memory: what the step held, for memory_viz
        throw;
      }
      if (profiler_) profiler_->step_end(r.step);
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
      // Validation before the save, as torchtitan's loop orders them.
      if (validator_ && validator_->due(step_)) s.validation_losses.push_back({step_, validate(step_).loss});
      if (checkpoint_) checkpoint_->maybe_save(step_, step_ == cfg_.training.steps);
      if (options_.on_step) options_.on_step(r);
      if (stop && stop->requested()) {
        s.interrupted = true;
        print(strprintf("%s received: stopped cleanly after step %lld of %lld",
                        stop->signal_number() == SIGTERM ? "SIGTERM" : "Ctrl-C (SIGINT)",
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
  const int ranks = static_cast<int>(dims_.world_size);
  s.mean_tps = timed_seconds > 0 ? metrics::tokens_per_second_per_rank(timed_tokens, timed_seconds, ranks)
                                 : first_tps / ranks;
  s.mean_tflops = metrics::achieved_flops_per_rank(flops_per_token_, s.mean_tps) / 1e12;
  if (peak_flops_ > 0) s.mfu_pct = metrics::mfu_percent(flops_per_token_, s.mean_tps, peak_flops_);
  if (options_.console) {
    std::ostream& out = options_.out ? *options_.out : std::cout;
    out << format_summary(s) << std::flush;
  }
  return s;
}

}  // namespace titan::train
