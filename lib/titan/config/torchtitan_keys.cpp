// The table of torchtitan v0.2's JobConfig, read off
// torchtitan/config/job_config.py (0.2.2): one row per dataclass field, its
// default as there. Rows titan has an option for say only "titan's"; what
// that option is comes from resolve() (schema.cpp, aliases.cpp).
#include "titan/config/torchtitan.hpp"

namespace titan::config {
namespace {

struct Default {
  FieldType type;
  std::optional<Value> value;
};
Default B(bool b) { return {FieldType::Bool, Value{b}}; }
Default I(int64_t i) { return {FieldType::Int, Value{i}}; }
Default F(double d) { return {FieldType::Float, Value{d}}; }
Default S(const char* s) { return {FieldType::String, Value{std::string(s)}}; }
Default L(StringList l) { return {FieldType::StringList, Value{std::move(l)}}; }
Default None(FieldType t) { return {t, std::nullopt}; }

constexpr auto kTitan = TorchtitanStatus::Honoured;  // titan has an option; resolve() says which
constexpr auto kDefault = TorchtitanStatus::DefaultOnly;
constexpr auto kCosmetic = TorchtitanStatus::Cosmetic;
constexpr auto kStr = FieldType::String;
constexpr auto kInt = FieldType::Int;
constexpr auto kLists = FieldType::StringLists;

constexpr const char* kFt = "torchtitan.components.ft.config";
constexpr const char* kAutoParallel = "torchtitan.experiments.autoparallel.job_config";
constexpr const char* kCompilerToolkit = "torchtitan.experiments.compiler_toolkit.job_config";
constexpr const char* kSimpleFsdp = "torchtitan.experiments.simple_fsdp.job_config";
constexpr const char* kHfBackend = "torchtitan.experiments.transformers_modeling_backend.job_config";
constexpr const char* kVlm = "torchtitan.experiments.vlm.job_config";
constexpr const char* kFlux = "torchtitan.models.flux.job_config";  // torchtitan.experiments.flux in v0.2.0
constexpr const char* kDiloco =
    "Streaming DiLoCo (torchtitan.components.ft.config); read only with semi_sync_method";
constexpr const char* kVlmNote = "vision-language data (torchtitan.experiments.vlm)";
constexpr const char* kFluxNote = "FLUX image generation (torchtitan.models.flux)";

TorchtitanKey row(const char* section, const char* key, Default d, TorchtitanStatus st, const char* note = "",
                  bool (*also)(const Value&) = nullptr) {
  return TorchtitanKey{section, key, d.type, std::move(d.value), st, note, also, ""};
}

// A key that one of torchtitan's own custom_config_modules adds.
TorchtitanKey module_row(const char* module, const char* section, const char* key, Default d, TorchtitanStatus st,
                         const char* note) {
  return TorchtitanKey{section, key, d.type, std::move(d.value), st, note, nullptr, module};
}

// torchtitan's own config extensions (its fault-tolerance module and the
// like) add no training titan would miss; a user's module would.
bool names_torchtitan_module(const Value& v) {
  const std::string* s = std::get_if<std::string>(&v);
  return s && (s->empty() || s->rfind("torchtitan.", 0) == 0);
}

std::vector<TorchtitanKey> make_table() {
  return {
      row("job", "config_file", None(kStr), kTitan),
      row("job", "dump_folder", S("./outputs"), kTitan),
      row("job", "description", S("default job"), kTitan),
      row("job", "print_config", B(false), kCosmetic, "`titan config` prints the config"),
      row("job", "save_config_file", None(kStr), kTitan),
      row("job", "custom_config_module", S(""), kDefault,
          "extends the config schema; \"\" or a torchtitan.* module is accepted", names_torchtitan_module),

      row("profiling", "enable_profiling", B(false), kTitan),
      row("profiling", "save_traces_folder", S("profile_traces"), kTitan),
      row("profiling", "profile_freq", I(10), kTitan),
      row("profiling", "profiler_active", I(1), kTitan),
      row("profiling", "profiler_warmup", I(3), kTitan),
      row("profiling", "enable_memory_snapshot", B(false), kTitan),
      row("profiling", "save_memory_snapshot_folder", S("memory_snapshot"), kTitan),

      row("metrics", "log_freq", I(10), kTitan),
      row("metrics", "enable_tensorboard", B(false), kTitan),
      row("metrics", "disable_color_printing", B(false), kCosmetic, "titan's log lines have no colour"),
      row("metrics", "save_tb_folder", S("tb"), kTitan),
      row("metrics", "save_for_all_ranks", B(false), kTitan),
      row("metrics", "enable_wandb", B(false), kDefault, "Weights & Biases logging"),

      row("model", "name", S("llama3"), kTitan),
      row("model", "flavor", S("debugmodel"), kTitan),
      row("model", "hf_assets_path", S("./tests/assets/tokenizer"), kTitan),
      row("model", "tokenizer_path", None(kStr), kTitan),
      row("model", "converters", L({}), kTitan),
      row("model", "print_after_conversion", B(false), kCosmetic, "titan logs the converted layers' count"),

      row("optimizer", "name", S("AdamW"), kTitan),
      row("optimizer", "lr", F(8e-4), kTitan),
      row("optimizer", "beta1", F(0.9), kTitan),
      row("optimizer", "beta2", F(0.95), kTitan),
      row("optimizer", "eps", F(1e-8), kTitan),
      row("optimizer", "weight_decay", F(0.1), kTitan),
      row("optimizer", "implementation", S("fused"), kCosmetic,
          "how PyTorch loops over parameters; same update"),
      row("optimizer", "early_step_in_backward", B(false), kTitan),

      row("lr_scheduler", "warmup_steps", I(200), kTitan),
      row("lr_scheduler", "total_steps", None(kInt), kTitan),
      row("lr_scheduler", "decay_ratio", None(FieldType::Float), kTitan),
      row("lr_scheduler", "decay_type", S("linear"), kTitan),
      row("lr_scheduler", "min_lr_factor", F(0.0), kTitan),

      row("training", "dataset", S("c4_test"), kTitan),
      row("training", "dataset_path", None(kStr), kTitan),
      row("training", "local_batch_size", I(8), kTitan),
      row("training", "global_batch_size", I(-1), kTitan),
      row("training", "seq_len", I(2048), kTitan),
      row("training", "max_norm", F(1.0), kTitan),
      row("training", "steps", I(10000), kTitan),
      row("training", "enable_cpu_offload", B(false), kTitan),
      row("training", "dtype", S("float32"), kTitan),
      row("training", "mixed_precision_param", S("bfloat16"), kTitan),
      row("training", "mixed_precision_reduce", S("float32"), kTitan),
      row("training", "gc_freq", I(50), kCosmetic, "Python garbage collection; titan has none"),
      row("training", "gc_debug", B(false), kCosmetic, "Python garbage collection; titan has none"),

      row("training.dataloader", "num_workers", I(0), kCosmetic, "titan's loader runs in the trainer; same batches"),
      row("training.dataloader", "persistent_workers", B(false), kCosmetic, "as num_workers"),
      row("training.dataloader", "pin_memory", B(false), kCosmetic, "as num_workers"),
      row("training.dataloader", "prefetch_factor", None(kInt), kCosmetic, "as num_workers"),

      row("parallelism", "data_parallel_replicate_degree", I(1), kTitan),
      row("parallelism", "data_parallel_shard_degree", I(-1), kTitan),
      row("parallelism", "fsdp_reshard_after_forward", S("default"), kTitan),
      row("parallelism", "tensor_parallel_degree", I(1), kTitan),
      row("parallelism", "disable_loss_parallel", B(false), kTitan),
      row("parallelism", "enable_async_tensor_parallel", B(false), kTitan),
      row("parallelism", "pipeline_parallel_degree", I(1), kTitan),
      row("parallelism", "module_fqns_per_model_part", None(kLists), kTitan),
      row("parallelism", "pipeline_parallel_first_stage_less_layers", I(1), kTitan),
      row("parallelism", "pipeline_parallel_last_stage_less_layers", I(1), kTitan),
      row("parallelism", "pipeline_parallel_layers_per_stage", None(kInt), kTitan),
      row("parallelism", "pipeline_parallel_schedule", S("1F1B"), kTitan),
      row("parallelism", "pipeline_parallel_schedule_csv", S(""), kTitan),
      row("parallelism", "pipeline_parallel_microbatch_size", I(1), kTitan),
      row("parallelism", "pipeline_parallel_expert_parallel_overlap", B(true), kDefault, "mixture of experts"),
      row("parallelism", "context_parallel_degree", I(1), kTitan),
      row("parallelism", "context_parallel_load_balancer", S("headtail"), kTitan),
      row("parallelism", "context_parallel_rotate_method", S("allgather"), kTitan),
      row("parallelism", "expert_parallel_degree", I(1), kDefault, "mixture of experts"),
      row("parallelism", "expert_tensor_parallel_degree", I(1), kDefault, "mixture of experts"),
      row("parallelism", "expert_parallel_comm_backend", S("standard"), kDefault, "mixture of experts"),

      row("checkpoint", "enable", B(false), kTitan),
      row("checkpoint", "enable_ft_dataloader_checkpoints", B(true), kDefault, "fault tolerance"),
      row("checkpoint", "folder", S("checkpoint"), kTitan),
      row("checkpoint", "interval", I(500), kTitan),
      row("checkpoint", "initial_load_path", None(kStr), kTitan),
      row("checkpoint", "initial_load_model_only", B(true), kTitan),
      row("checkpoint", "initial_load_in_hf", B(false), kTitan),
      row("checkpoint", "initial_load_in_hf_quantized", B(false), kDefault, "loading Hugging Face weights"),
      row("checkpoint", "last_save_model_only", B(true), kTitan),
      row("checkpoint", "last_save_in_hf", B(false), kTitan),
      row("checkpoint", "export_dtype", S("float32"), kTitan),
      row("checkpoint", "async_mode", S("disabled"), kTitan),
      row("checkpoint", "keep_latest_k", I(10), kTitan),
      row("checkpoint", "load_step", I(-1), kTitan),
      row("checkpoint", "exclude_from_loading", L({}), kTitan),
      row("checkpoint", "enable_first_step_checkpoint", B(false), kTitan),
      row("checkpoint", "create_seed_checkpoint", B(false), kTitan),
      row("checkpoint", "load_only", B(false), kTitan),

      row("activation_checkpoint", "mode", S("selective"), kTitan),
      row("activation_checkpoint", "selective_ac_option", S("2"), kTitan),
      row("activation_checkpoint", "per_op_sac_force_recompute_mm_shapes_by_fqns", L({"moe.router.gate"}), kTitan),
      row("activation_checkpoint", "early_stop", B(false), kCosmetic,
          "torch.utils.checkpoint's early stop of a recompute: speed only; titan recomputes each block whole"),
      row("activation_checkpoint", "memory_budget", F(0.5), kDefault, "memory_budget AC"),
      row("activation_checkpoint", "visualize_memory_budget_pareto", B(false), kDefault, "memory_budget AC"),
      row("activation_checkpoint", "preserve_rng_state", B(true), kCosmetic,
          "Llama 3 draws no random numbers in forward (no dropout): the recompute is the same either way"),
      row("activation_checkpoint", "determinism_check", S("default"), kCosmetic,
          "torch's check that a recompute saves tensors of the same shapes and dtypes; titan makes no such check"),
      row("activation_checkpoint", "debug", B(false), kCosmetic, "torch's AC debug trace; titan logs none"),

      row("compile", "enable", B(false), kDefault, "torch.compile"),
      row("compile", "components", L({"model", "loss"}), kDefault, "torch.compile"),
      row("compile", "backend", S("inductor"), kDefault, "torch.compile"),

      row("quantize.linear.float8", "enable_fsdp_float8_all_gather", B(false), kTitan),
      row("quantize.linear.float8", "precompute_float8_dynamic_scale_for_fsdp", B(false), kTitan),
      row("quantize.linear.float8", "recipe_name", None(kStr), kTitan),
      row("quantize.linear.float8", "filter_fqns", L({}), kTitan),
      row("quantize.linear.float8", "emulate", B(false), kTitan),
      row("quantize.linear.mx", "mxfp8_dim1_cast_kernel_choice", S("triton"), kDefault, "MX formats"),
      row("quantize.linear.mx", "recipe_name", S("mxfp8_cublas"), kDefault, "MX formats"),
      row("quantize.linear.mx", "filter_fqns", L({"output"}), kDefault, "MX formats"),
      row("quantize.grouped_mm.float8", "fqns", L({}), kDefault, "mixture of experts"),
      row("quantize.grouped_mm.mx", "recipe_name", S("mxfp8"), kDefault, "mixture of experts"),
      row("quantize.grouped_mm.mx", "fqns", L({}), kDefault, "mixture of experts"),

      row("comm", "init_timeout_seconds", I(300), kTitan),
      row("comm", "train_timeout_seconds", I(100), kTitan),
      row("comm", "trace_buf_size", I(20000), kTitan),
      row("comm", "save_traces_folder", S("comm_traces"), kTitan),
      row("comm", "save_traces_file_prefix", S("rank_"), kTitan),
      row("comm", "mode", S("default"), kTitan),

      // torchtitan's trainer never reads [memory_estimation]: only its
      // estimation script does (scripts/estimate/estimation.py), whose
      // counterpart here is `titan estimate`.
      row("memory_estimation", "enable", B(false), kCosmetic,
          "read only by torchtitan's estimation script, not its trainer; titan's is `titan estimate`"),
      row("memory_estimation", "disable_fake_mode", B(false), kCosmetic, "as [memory_estimation] enable"),

      row("fault_tolerance", "enable", B(false), kDefault, "torchft fault tolerance"),
      row("fault_tolerance", "process_group", S("gloo"), kDefault, "torchft fault tolerance"),
      row("fault_tolerance", "process_group_timeout_ms", I(10000), kDefault, "torchft fault tolerance"),
      row("fault_tolerance", "replica_id", I(0), kDefault, "torchft fault tolerance"),
      row("fault_tolerance", "group_size", I(0), kDefault, "torchft fault tolerance"),
      row("fault_tolerance", "min_replica_size", I(1), kDefault, "torchft fault tolerance"),
      row("fault_tolerance", "semi_sync_method", None(kStr), kDefault, "torchft fault tolerance"),

      row("experimental", "custom_import", S(""), kCosmetic, "a Python module to import"),
      row("experimental", "custom_args_module", S(""), kDefault,
          "extends the config schema (old name of custom_config_module)", names_torchtitan_module),

      row("validation", "enable", B(false), kTitan),
      row("validation", "dataset", S("c4_validation"), kTitan),
      row("validation", "dataset_path", None(kStr), kTitan),
      row("validation", "local_batch_size", I(8), kTitan),
      row("validation", "seq_len", I(2048), kTitan),
      row("validation", "freq", I(10), kTitan),
      row("validation", "steps", I(-1), kTitan),
      row("validation.dataloader", "num_workers", I(0), kCosmetic, "as [training.dataloader]"),
      row("validation.dataloader", "persistent_workers", B(false), kCosmetic, "as [training.dataloader]"),
      row("validation.dataloader", "pin_memory", B(false), kCosmetic, "as [training.dataloader]"),
      row("validation.dataloader", "prefetch_factor", None(kInt), kCosmetic, "as [training.dataloader]"),

      row("debug", "seed", None(kInt), kTitan),
      row("debug", "deterministic", B(false), kTitan),
      row("debug", "deterministic_warn_only", B(false), kTitan),
      row("debug", "moe_force_load_balance", B(false), kDefault, "mixture of experts"),

      // torchtitan's own custom_config_modules of v0.2.0-v0.2.2, read off
      // their job_config.py files. Streaming DiLoCo's knobs are only read
      // when [fault_tolerance] semi_sync_method is set, which titan refuses,
      // so they change nothing on their own.
      module_row(kFt, "fault_tolerance", "sync_steps", I(5), kCosmetic, kDiloco),
      module_row(kFt, "fault_tolerance", "should_quantize", B(false), kCosmetic, kDiloco),
      module_row(kFt, "fault_tolerance", "fragment_sync_delay", I(0), kCosmetic, kDiloco),
      module_row(kFt, "fault_tolerance", "fragment_update_alpha", F(0.0), kCosmetic, kDiloco),
      module_row(kFt, "fault_tolerance", "module_fqns_per_model_fragment", L({}), kCosmetic, kDiloco),
      module_row(kFt, "fault_tolerance", "num_fragments", I(1), kCosmetic, kDiloco),
      module_row(kAutoParallel, "experimental", "comms_bucket_reorder_strategy", S("aten"), kDefault,
                 "AutoParallel (torchtitan.experiments.autoparallel)"),
      module_row(kAutoParallel, "experimental", "autop_force_bf16", B(false), kDefault,
                 "AutoParallel (torchtitan.experiments.autoparallel)"),
      module_row(kCompilerToolkit, "compile", "joint_passes", L({}), kDefault,
                 "torch.compile graph passes (torchtitan.experiments.compiler_toolkit)"),
      module_row(kCompilerToolkit, "compile", "passes", L({}), kDefault,
                 "torch.compile graph passes (torchtitan.experiments.compiler_toolkit)"),
      module_row(kSimpleFsdp, "compile", "graph_passes", None(kStr), kDefault,
                 "torch.compile bucketing passes (torchtitan.experiments.simple_fsdp)"),
      module_row(kSimpleFsdp, "compile", "model_backend_override", None(kStr), kDefault,
                 "torch.compile backend (torchtitan.experiments.simple_fsdp, v0.2.0)"),
      module_row(kHfBackend, "hf_transformers", "model", S(""), kDefault,
                 "Hugging Face transformers models (torchtitan.experiments.transformers_modeling_backend)"),
      module_row(kVlm, "data", "max_images_per_batch", I(10), kDefault, kVlmNote),
      module_row(kVlm, "data", "max_patches_per_image", I(256), kDefault, kVlmNote),
      module_row(kVlm, "data", "patch_size", I(16), kDefault, kVlmNote),
      module_row(kVlm, "data", "spatial_merge_size", I(1), kDefault, kVlmNote),
      module_row(kVlm, "data", "packing_buffer_size", I(0), kDefault, kVlmNote),
      module_row(kFlux, "training", "classifier_free_guidance_prob", F(0.0), kDefault, kFluxNote),
      module_row(kFlux, "training", "img_size", I(256), kDefault, kFluxNote),
      module_row(kFlux, "training", "test_mode", B(false), kDefault, kFluxNote),
      module_row(kFlux, "encoder", "t5_encoder", S("google/t5-v1_1-small"), kDefault, kFluxNote),
      module_row(kFlux, "encoder", "clip_encoder", S("openai/clip-vit-large-patch14"), kDefault, kFluxNote),
      module_row(kFlux, "encoder", "autoencoder_path", S("torchtitan/experiments/flux/assets/autoencoder/ae.safetensors"),
                 kDefault, kFluxNote),
      module_row(kFlux, "encoder", "max_t5_encoding_len", I(256), kDefault, kFluxNote),
      module_row(kFlux, "validation", "enable_classifier_free_guidance", B(false), kDefault, kFluxNote),
      module_row(kFlux, "validation", "classifier_free_guidance_scale", F(5.0), kDefault, kFluxNote),
      module_row(kFlux, "validation", "denoising_steps", I(50), kDefault, kFluxNote),
      module_row(kFlux, "validation", "eval_freq", I(100), kDefault, kFluxNote),
      module_row(kFlux, "validation", "save_img_count", I(1), kDefault, kFluxNote),
      module_row(kFlux, "validation", "save_img_folder", S("img"), kDefault, kFluxNote),
      module_row(kFlux, "validation", "all_timesteps", B(false), kDefault, kFluxNote),
      module_row(kFlux, "inference", "save_img_folder", S("inference_results"), kDefault, kFluxNote),
      module_row(kFlux, "inference", "prompts_path", S("./torchtitan/experiments/flux/inference/prompts.txt"), kDefault,
                 kFluxNote),
      module_row(kFlux, "inference", "local_batch_size", I(2), kDefault, kFluxNote),
      module_row(kFlux, "inference", "img_size", I(256), kDefault, kFluxNote),
  };
}

}  // namespace

const std::vector<TorchtitanKey>& torchtitan_keys() {
  static const std::vector<TorchtitanKey> table = make_table();
  return table;
}

}  // namespace titan::config
