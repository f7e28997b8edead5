// The table of every option. Each line names the JobConfig member once; the
// macro derives the TOML section/key from it and the value type from the
// member's C++ type, so the table cannot disagree with the struct.
#include "titan/config/schema.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <type_traits>

#include "titan/config/torchtitan.hpp"
#include "titan/util/error.hpp"

namespace titan::config {
namespace {

template <typename T>
constexpr FieldType type_of() {
  if constexpr (std::is_same_v<T, bool>) return FieldType::Bool;
  else if constexpr (std::is_same_v<T, int64_t>) return FieldType::Int;
  else if constexpr (std::is_same_v<T, double>) return FieldType::Float;
  else if constexpr (std::is_same_v<T, StringList>) return FieldType::StringList;
  else if constexpr (std::is_same_v<T, StringLists>) return FieldType::StringLists;
  else {
    static_assert(std::is_same_v<T, std::string>,
                  "config members are bool, int64_t, double, std::string, StringList or StringLists");
    return FieldType::String;
  }
}

#define TITAN_FIELD(S, K, HELP, ...)                                              \
  Field{#S, #K, type_of<decltype(JobConfig{}.S.K)>(),                             \
        [](JobConfig& c) -> void* { return &c.S.K; }, HELP, std::vector<std::string>{__VA_ARGS__}}

std::vector<Field> make_fields() {
  return {
      TITAN_FIELD(job, config_file, "TOML file the config was loaded from (set with --job.config_file)"),
      TITAN_FIELD(job, dump_folder, "root folder for checkpoints, traces and logs"),
      TITAN_FIELD(job, description, "free text printed at start"),
      TITAN_FIELD(job, save_config_file,
                  "rank 0 writes the effective config as JSON here, under dump_folder (\"\" = not written)"),

      TITAN_FIELD(profiling, enable_profiling, "capture a trace every profile_freq steps"),
      TITAN_FIELD(profiling, save_traces_folder, "trace folder, under dump_folder"),
      TITAN_FIELD(profiling, profile_freq, "steps between traces (> 0)"),
      TITAN_FIELD(profiling, profiler_warmup, "steps the profiler warms up before it records (>= 0)"),
      TITAN_FIELD(profiling, profiler_active, "steps recorded per trace (>= 1; warmup + active <= profile_freq)"),
      TITAN_FIELD(profiling, enable_memory_snapshot,
                  "write memory timelines (and CUDA allocator snapshots) every profile_freq steps"),
      TITAN_FIELD(profiling, save_memory_snapshot_folder, "snapshot folder, under dump_folder"),

      TITAN_FIELD(metrics, log_freq, "steps between metric lines (> 0)"),
      TITAN_FIELD(metrics, enable_tensorboard, "write TensorBoard event files"),
      TITAN_FIELD(metrics, save_tb_folder, "TensorBoard folder, under dump_folder"),
      TITAN_FIELD(metrics, save_for_all_ranks,
                  "every rank writes TensorBoard files (its own rates and memory), in rank_N of the run's folder"),

      TITAN_FIELD(model, name, "model family", "llama3"),
      TITAN_FIELD(model, flavor, "model size: debugmodel, 1B, 3B, 8B, 70B, 405B (checked by the model registry)"),
      TITAN_FIELD(model, n_layers,
                  "titan's: transformer blocks instead of the flavor's (0 = the flavor's), e.g. an 8B-shaped model "
                  "that fits one GPU"),
      TITAN_FIELD(model, dim, "titan's: model width instead of the flavor's (0 = the flavor's)"),
      TITAN_FIELD(model, n_heads, "titan's: query heads instead of the flavor's (0 = the flavor's)"),
      TITAN_FIELD(model, n_kv_heads, "titan's: key/value heads instead of the flavor's (0 = the flavor's)"),
      TITAN_FIELD(model, ffn_hidden_size,
                  "titan's: SwiGLU's hidden width instead of the flavor's (0 = the flavor's), e.g. a published "
                  "model's intermediate_size"),
      TITAN_FIELD(model, vocab_size, "titan's: the vocabulary instead of the flavor's (0 = the flavor's)"),
      TITAN_FIELD(model, norm_type, "normalisation layer", "rmsnorm", "layernorm", "np_layernorm", "fused_rmsnorm"),
      TITAN_FIELD(model, attn_type,
                  "attention backend: sdpa (ATen's dispatch), flash (titan's flash kernels: CPU, and CUDA GPUs "
                  "in CUDA builds), math (explicit softmax, the reference)",
                  "sdpa", "flash", "math"),
      TITAN_FIELD(model, attn_mask_type,
                  "attention mask: causal over the packed window, or block_causal (within each document; RoPE "
                  "positions restart per document; no target across a boundary)",
                  "causal", "block_causal"),
      TITAN_FIELD(model, fused_kernels,
                  "titan's: RMSNorm, SwiGLU and RoPE as one kernel each (CPU) and the chunked cross-entropy; "
                  "false = op by op, as eager PyTorch"),
      TITAN_FIELD(model, cpu_matmul,
                  "titan's: the GEMM of fp32 Linear layers on the CPU: auto = onednn where titan's oneDNN plugin "
                  "loads, passes its check against float64 at start, runs AVX-512 kernels and the CPU is not "
                  "Intel's (MKL's own kernels there), else aten (the banner says why); onednn (oneDNN's matmul, which picks by "
                  "instruction set where MKL runs a generic AVX2 path on AMD CPUs; ~1.8x the debug model's step "
                  "on a 2-core AMD EPYC) or aten (aten::mm, as eager PyTorch)",
                  "auto", "onednn", "aten"),
      TITAN_FIELD(model, tokenizer_path,
                  "tokenizer: a tiktoken file, a Hugging Face tokenizer.json or assets folder; wins over "
                  "hf_assets_path; \"\" = hf_assets_path, else the built-in tokenizer"),
      TITAN_FIELD(model, hf_assets_path,
                  "Hugging Face assets folder (torchtitan's): its tokenizer.json + tokenizer_config.json, else "
                  "original/tokenizer.model; \"\" = none"),
      TITAN_FIELD(model, converters,
                  "model conversions: `float8` (or `quantize.linear.float8`) turns on [float8] enable_float8_linear"),

      TITAN_FIELD(optimizer, name, "optimizer", "AdamW", "Adam"),
      TITAN_FIELD(optimizer, lr, "peak learning rate (> 0)"),
      TITAN_FIELD(optimizer, eps, "Adam epsilon (> 0)"),
      TITAN_FIELD(optimizer, weight_decay, "decoupled weight decay (>= 0)"),
      TITAN_FIELD(optimizer, beta1, "first-moment decay, in [0, 1)"),
      TITAN_FIELD(optimizer, beta2, "second-moment decay, in [0, 1)"),
      TITAN_FIELD(optimizer, early_step_in_backward,
                  "step each parameter inside backward once its gradient is final, and free the gradient (no "
                  "gradient clipping then; not with PP or DDP)"),

      TITAN_FIELD(lr_scheduler, warmup_steps, "linear warm-up steps (>= 0)"),
      TITAN_FIELD(lr_scheduler, decay_type, "shape of the decay after warm-up", "linear", "sqrt", "cosine", "wsd"),
      TITAN_FIELD(lr_scheduler, decay_ratio,
                  "fraction of steps spent decaying (0..1; before it the lr stays at its peak); -1 = every step after warm-up"),
      TITAN_FIELD(lr_scheduler, min_lr_factor, "the lr ends at lr * min_lr_factor, in [0, 1]"),
      TITAN_FIELD(lr_scheduler, total_steps, "steps the schedule spans (>= 1); -1 = [training] steps"),

      TITAN_FIELD(training, batch_size, "per-rank micro-batch size (> 0)"),
      TITAN_FIELD(training, global_batch_size,
                  "samples per optimizer step over all ranks; -1 = batch_size x data-parallel degree"),
      TITAN_FIELD(training, gradient_accumulation_steps,
                  "micro-batches per step; -1 = global_batch_size / (batch_size x data-parallel degree)"),
      TITAN_FIELD(training, seq_len, "tokens per sample (> 0)"),
      TITAN_FIELD(training, max_norm, "clip gradients to this global norm; <= 0 = no clipping"),
      TITAN_FIELD(training, steps, "optimizer steps (>= 0; 0 = an init-only run: initialise, save step 0 with checkpointing on, stop)"),
      TITAN_FIELD(training, dataset,
                  "text / JSONL / .json file (or .gz) or folder of them, or c4 / c4_test / c4_validation (files "
                  "at dataset_path); \"\" = the built-in corpus"),
      TITAN_FIELD(training, dataset_path, "the dataset's files (file or folder); \"\" = dataset is the path"),
      TITAN_FIELD(training, seed, "seed for initialisation and data order (>= 0)"),
      TITAN_FIELD(training, deterministic, "use deterministic kernels"),
      TITAN_FIELD(training, deterministic_warn_only,
                  "with deterministic: an op with no deterministic kernel warns instead of stopping the job"),
      TITAN_FIELD(training, device, "where to train", "auto", "cpu", "cuda"),
      TITAN_FIELD(training, dtype,
                  "the parameters' dtype: bfloat16 keeps weights, gradients and optimizer state in bf16 (no fp32 "
                  "copy; RoPE and the loss stay fp32)", "float32", "bfloat16"),
      TITAN_FIELD(training, mixed_precision_param, "compute dtype: FSDP's parameter dtype; without FSDP, TP or PP, what forward autocasts to on GPUs", "bfloat16", "float32"),
      TITAN_FIELD(training, mixed_precision_reduce, "gradient-reduction dtype under FSDP", "float32", "bfloat16"),
      TITAN_FIELD(training, enable_cpu_offload, "FSDP: keep shards, gradients and optimizer state in CPU memory"),
      TITAN_FIELD(training, fsdp_reshard_after_forward,
                  "FSDP: free gathered weights after forward (always), keep them for backward (never), or default",
                  "default", "always", "never"),
      TITAN_FIELD(training, fsdp_reduce_scatter_per_microbatch,
                  "titan's: under PP, FSDP reduce-scatters every micro-batch's gradients instead of summing a whole "
                  "stage's unsharded (reduce dtype) until the step's last backward; less memory, more reduce-scatters "
                  "(without PP FSDP always does)"),
      TITAN_FIELD(training, data_parallel_replicate_degree, "DDP replicas (>= 1)"),
      TITAN_FIELD(training, data_parallel_shard_degree, "FSDP shard group size (>= 1); -1 = the remaining ranks"),
      TITAN_FIELD(training, tensor_parallel_degree, "tensor-parallel ranks (>= 1)"),
      TITAN_FIELD(training, context_parallel_degree, "context-parallel ranks (>= 1)"),
      TITAN_FIELD(training, context_parallel_rotate_method,
                  "CP: K/V gathered at once (allgather) or passed round the ring under the compute (alltoall)",
                  "allgather", "alltoall"),
      TITAN_FIELD(training, context_parallel_load_balancer,
                  "CP: 2 x cp chunks, rank i holding i and 2 x cp-1-i (headtail), or one contiguous cp-th per rank "
                  "(contiguous, or torchtitan's None)",
                  "headtail", "contiguous", "None"),
      TITAN_FIELD(training, enable_loss_parallel, "compute the loss on vocabulary-sharded logits (TP)"),
      TITAN_FIELD(training, enable_sequence_parallel,
                  "TP: keep activations sharded on the sequence between blocks (all-gather/reduce-scatter)"),
      TITAN_FIELD(training, enable_async_tensor_parallel, "overlap TP collectives with compute"),

      TITAN_FIELD(experimental, pipeline_parallel_degree, "pipeline stages (>= 1)"),
      TITAN_FIELD(experimental, pipeline_parallel_schedule, "pipeline schedule (any letter case)", "1F1B", "GPipe",
                  "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble"),
      TITAN_FIELD(experimental, pipeline_parallel_microbatch_size,
                  "sequences per pipeline micro-batch (> 0; the local batch must divide by it)"),
      TITAN_FIELD(experimental, pipeline_parallel_layers_per_stage,
                  "layers per pipeline stage; -1 = pp stages (2 per rank for multi-stage schedules)"),
      TITAN_FIELD(experimental, pipeline_parallel_first_stage_less_layers,
                  "layers the first pipeline stage holds fewer (its embeddings count as that many; >= 0)"),
      TITAN_FIELD(experimental, pipeline_parallel_last_stage_less_layers,
                  "layers the last pipeline stage holds fewer (its norm and output count as that many; >= 0)"),
      TITAN_FIELD(experimental, pipeline_parallel_schedule_csv,
                  "CSV of each pipeline rank's compute actions (torch's spelling: 0F0,0B0,...; one row per rank) to "
                  "run instead of the schedule's own order; the schedule still places the stages; \"\" = none"),
      TITAN_FIELD(experimental, module_fqns_per_model_part,
                  "the modules of each pipeline stage (tok_embeddings, layers.N, norm, output; consecutive layers, "
                  "embeddings first, norm and output last); [] = split by layers_per_stage and the less_layers keys"),

      TITAN_FIELD(checkpoint, enable_checkpoint, "save and resume checkpoints"),
      TITAN_FIELD(checkpoint, folder, "checkpoint folder, under dump_folder"),
      TITAN_FIELD(checkpoint, interval_type, "unit of interval", "steps", "seconds"),
      TITAN_FIELD(checkpoint, interval, "save every interval steps or seconds (> 0)"),
      TITAN_FIELD(checkpoint, model_weights_only, "the last save holds model weights only"),
      TITAN_FIELD(checkpoint, export_dtype, "dtype of a weights-only save", "float32", "bfloat16", "float16"),
      TITAN_FIELD(checkpoint, last_save_in_hf,
                  "the last save is a Hugging Face folder (config.json + safetensors; needs model_weights_only), "
                  "each rank writing its rows"),
      TITAN_FIELD(checkpoint, async_mode, "save in the background", "disabled", "async", "async_with_pinned_mem"),
      TITAN_FIELD(checkpoint, keep_latest_k, "checkpoints kept (>= 0; 0 = all)"),
      TITAN_FIELD(checkpoint, load_step, "step to resume from; -1 = the latest"),
      TITAN_FIELD(checkpoint, create_seed_checkpoint,
                  "on one process: save the initial weights as step-0 and stop (the seed larger jobs start from)"),
      TITAN_FIELD(checkpoint, initial_load_path,
                  "a checkpoint to start from when the folder has none to resume: a step-N folder, or a Hugging "
                  "Face folder with initial_load_in_hf; each rank reads only its rows (\"\" = initialise)"),
      TITAN_FIELD(checkpoint, initial_load_model_only,
                  "from initial_load_path, load the weights only (training starts at step 1)"),
      TITAN_FIELD(checkpoint, initial_load_in_hf,
                  "initial_load_path is a Hugging Face LlamaForCausalLM folder (config.json + safetensors)"),

      TITAN_FIELD(checkpoint, exclude_from_loading,
                  "parts a resume leaves out: model, optimizer, lr_scheduler, dataloader, train_state, rng"),
      TITAN_FIELD(checkpoint, enable_first_step_checkpoint, "also save after step 1"),
      TITAN_FIELD(checkpoint, load_only, "load checkpoints but never save one"),
      TITAN_FIELD(activation_checkpoint, mode, "recompute activations in backward", "none", "selective", "full",
                  "memory_budget"),
      TITAN_FIELD(activation_checkpoint, selective_ac_option,
                  "selective mode: \"op\" (per operator) or N (every N-th layer, N > 0)"),
      TITAN_FIELD(activation_checkpoint, per_op_sac_force_recompute_mm_shapes_by_fqns,
                  "op mode: matmuls with the weight shape of a Linear whose name contains one of these are "
                  "recomputed, not kept"),

      TITAN_FIELD(float8, enable_float8_linear, "train linear layers in float8"),
      TITAN_FIELD(float8, filter_fqns, "linear layers kept in high precision (a name, or its last dotted parts)"),
      TITAN_FIELD(float8, enable_fsdp_float8_all_gather,
                  "FSDP all-gathers the float8 layers' weights as float8 e4m3 (1 byte per element)"),
      TITAN_FIELD(float8, precompute_float8_dynamic_scale_for_fsdp,
                  "with the float8 all-gather: the weights' scales from one all-reduce after each optimizer step"),
      TITAN_FIELD(float8, recipe_name,
                  "float8 scaling: one scale per tensor, or per row along each GEMM's inner dimension (torchao's "
                  "recipes)",
                  "tensorwise", "rowwise"),
      TITAN_FIELD(float8, emulate,
                  "on GPUs, compute the float8 GEMMs as the CPU does (operands upcast, an fp32 matmul) instead of "
                  "with float8 tensor cores: for GPUs below compute capability 8.9"),

      TITAN_FIELD(validation, enable, "after step 1 and every freq steps, the loss on a held-out split"),
      TITAN_FIELD(validation, dataset, "as [training] dataset: a file, folder or name (c4_validation, ...)"),
      TITAN_FIELD(validation, dataset_path, "as [training] dataset_path"),
      TITAN_FIELD(validation, local_batch_size, "sequences per rank and validation batch (> 0)"),
      TITAN_FIELD(validation, seq_len, "tokens per validation sequence (> 0, <= [training] seq_len)"),
      TITAN_FIELD(validation, freq, "validate after step 1 and every freq steps (> 0)"),
      TITAN_FIELD(validation, steps, "batches per validation (> 0), or -1: one pass over the split"),

      TITAN_FIELD(comm, init_timeout_seconds, "timeout of rendezvous and the first collective (> 0)"),
      TITAN_FIELD(comm, timeout_seconds, "timeout of every later collective (> 0)"),
      TITAN_FIELD(comm, trace_buf_size,
                  "flight recorder: the last N collectives and P2P ops each rank keeps (>= 0; 0 = off), "
                  "dumped when a collective fails or times out, on a fatal signal and on SIGUSR1"),
      TITAN_FIELD(comm, save_traces_folder, "flight-recorder dumps, under dump_folder (read with titan flight-recorder)"),
      TITAN_FIELD(comm, save_traces_file_prefix, "a rank's dump is PREFIX<rank>.json"),
      TITAN_FIELD(comm, mode,
                  "default: the ranks communicate; fake_backend: this one process builds and trains rank "
                  "fake_rank of a fake_world_size-rank job at full size, collectives do not communicate "
                  "(memory and step time are that rank's; the loss is not a result)",
                  "default", "fake_backend"),
      TITAN_FIELD(comm, fake_world_size, "the world size the fake_backend rank plays in (>= 1)"),
      TITAN_FIELD(comm, fake_rank, "the rank the fake_backend process plays, in [0, fake_world_size)"),
      TITAN_FIELD(comm, backend,
                  "the collectives' engine: auto (Gloo for CPU tensors, NCCL for CUDA tensors), gloo (CUDA "
                  "tensors too: what Gloo cannot take, P2P, is staged through pinned host memory) or nccl",
                  "auto", "gloo", "nccl"),
      TITAN_FIELD(comm, ranks_per_device,
                  "local ranks sharing one GPU (>= 1; 1 = a GPU per rank); NCCL needs 2.30+ for more than one"),

      TITAN_FIELD(cluster, preset, "titan predict's machines: an accelerator and its network; the keys below replace "
                  "its values (0 = the preset's); cpu: this machine, as titan predict --calibrate measured it", "h100_sxm",
                  "h100_hbm2e_500w", "h200", "a100_80g", "b200", "cpu"),
      TITAN_FIELD(cluster, peak_bf16_tflops, "dense bf16 tensor-core peak per GPU, TFLOP/s (>= 0)"),
      TITAN_FIELD(cluster, peak_fp8_tflops, "dense float8 tensor-core peak per GPU, TFLOP/s (>= 0)"),
      TITAN_FIELD(cluster, peak_fp32_tflops, "fp32 peak per GPU without tensor cores, TFLOP/s (>= 0)"),
      TITAN_FIELD(cluster, hbm_bandwidth_gbps, "memory bandwidth per GPU, GB/s (>= 0)"),
      TITAN_FIELD(cluster, hbm_capacity_gib, "memory per GPU, GiB (>= 0)"),
      TITAN_FIELD(cluster, gpus_per_node, "GPUs per node, joined by the intra-node links (>= 0)"),
      TITAN_FIELD(cluster, intra_node_bandwidth_gbps, "intra-node (NVLink) bandwidth per GPU, each way, GB/s (>= 0)"),
      TITAN_FIELD(cluster, intra_node_all_reduce_bandwidth_gbps,
                  "an all-reduce's bandwidth inside a node where the switches reduce (NVLink SHARP), GB/s (>= 0)"),
      TITAN_FIELD(cluster, intra_node_latency_us, "latency of one step of a ring inside a node, microseconds (>= 0)"),
      TITAN_FIELD(cluster, inter_node_bandwidth_gbps, "inter-node bandwidth per GPU (its NIC), each way, GB/s (>= 0)"),
      TITAN_FIELD(cluster, inter_node_latency_us, "latency of one step of a ring across nodes, microseconds (>= 0)"),
      TITAN_FIELD(cluster, matmul_efficiency, "fraction of the peak a large GEMM reaches, in [0, 1]"),
      TITAN_FIELD(cluster, attention_efficiency,
                  "fraction of the peak flash attention reaches on the FLOPs it executes, in [0, 1]"),
      TITAN_FIELD(cluster, memory_efficiency, "fraction of the memory bandwidth elementwise kernels reach, in [0, 1]"),
  };
}
#undef TITAN_FIELD

std::string escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", ch);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out;
}

// The shortest decimal that reads back as the same double, so 3e-4 prints
// as 0.0003 and not 0.00029999999999999997.
std::string format_double(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[40];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*g", prec, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

const char* type_phrase(FieldType t) {
  switch (t) {
    case FieldType::Bool: return "a boolean";
    case FieldType::Int: return "an integer";
    case FieldType::Float: return "a float";
    case FieldType::String: return "a string";
    case FieldType::StringList: return "a list of strings";
    case FieldType::StringLists: return "a list of lists of strings";
  }
  return "?";
}

Value Field::get(const JobConfig& c) const {
  if (!member) {
    // A torchtitan-only key: what was given, else torchtitan's default
    // (an empty value of the type when that is None).
    auto it = c.torchtitan_only.find(name());
    if (it != c.torchtitan_only.end()) return it->second;
    if (torchtitan->default_value) return *torchtitan->default_value;
    switch (type) {
      case FieldType::Bool: return false;
      case FieldType::Int: return int64_t{0};
      case FieldType::Float: return 0.0;
      case FieldType::String: return std::string();
      case FieldType::StringList: return StringList{};
      case FieldType::StringLists: return StringLists{};
    }
  }
  void* p = member(const_cast<JobConfig&>(c));  // read only
  switch (type) {
    case FieldType::Bool: return *static_cast<bool*>(p);
    case FieldType::Int: return *static_cast<int64_t*>(p);
    case FieldType::Float: return *static_cast<double*>(p);
    case FieldType::String: return *static_cast<std::string*>(p);
    case FieldType::StringList: return *static_cast<StringList*>(p);
    case FieldType::StringLists: return *static_cast<StringLists*>(p);
  }
  return {};
}

void Field::set(JobConfig& c, const Value& v) const {
  if (!member) {
    c.torchtitan_only[name()] = v;
    return;
  }
  void* p = member(c);
  switch (type) {
    case FieldType::Bool: *static_cast<bool*>(p) = std::get<bool>(v); break;
    case FieldType::Int: *static_cast<int64_t*>(p) = std::get<int64_t>(v); break;
    case FieldType::Float: *static_cast<double*>(p) = std::get<double>(v); break;
    case FieldType::String: *static_cast<std::string*>(p) = std::get<std::string>(v); break;
    case FieldType::StringList: *static_cast<StringList*>(p) = std::get<StringList>(v); break;
    case FieldType::StringLists: *static_cast<StringLists*>(p) = std::get<StringLists>(v); break;
  }
}

const std::vector<Field>& fields() {
  static const std::vector<Field> table = make_fields();
  return table;
}

const std::vector<Field>& torchtitan_only_fields() {
  static const std::vector<Field> table = [] {
    std::vector<Field> out;
    for (const TorchtitanKey& k : torchtitan_keys())
      if (k.own_status != TorchtitanStatus::Honoured)
        out.push_back(Field{k.section, k.key, k.type, nullptr, k.note, {}, &k});
    return out;
  }();
  return table;
}

const Field& field(const std::string& name) {
  for (const Field& f : fields())
    if (f.name() == name) return f;
  throw Error("internal: no config option " + name);
}

Resolved resolve(const std::string& section, const std::string& key) {
  Resolved r;
  for (const Field& f : fields())
    if (f.section == section && f.key == key) {
      r.field = &f;
      return r;
    }
  for (const Alias& a : aliases())
    if (a.section == section && a.key == key) {
      r.field = &field(a.target);
      r.invert = a.invert;
      r.alias = &a;
      return r;
    }
  for (const Field& f : torchtitan_only_fields())
    if (f.section == section && f.key == key) {
      r.field = &f;
      return r;
    }
  return r;
}

std::vector<std::string> section_names() {
  std::vector<std::string> out;
  std::set<std::string> seen;
  auto add = [&](const std::string& s) {
    if (seen.insert(s).second) out.push_back(s);
  };
  for (const Field& f : fields()) add(f.section);
  for (const Alias& a : aliases()) add(a.section);
  for (const Field& f : torchtitan_only_fields()) add(f.section);
  return out;
}

bool is_section(const std::string& section) {
  for (const std::string& s : section_names())
    if (s == section) return true;
  return false;
}

std::vector<std::string> keys_of(const std::string& section) {
  std::vector<std::string> out;
  for (const Field& f : fields())
    if (f.section == section) out.push_back(f.key);
  for (const Alias& a : aliases())
    if (a.section == section) out.push_back(a.key);
  for (const Field& f : torchtitan_only_fields())
    if (f.section == section) out.push_back(f.key);
  return out;
}

std::string to_toml_value(const Value& v) {
  if (const bool* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (const int64_t* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (const double* d = std::get_if<double>(&v)) return format_double(*d);
  if (const StringList* l = std::get_if<StringList>(&v)) {
    std::string out = "[";
    for (size_t i = 0; i < l->size(); ++i) out += (i ? ", " : "") + to_toml_value(Value{(*l)[i]});
    return out + "]";
  }
  if (const StringLists* ls = std::get_if<StringLists>(&v)) {
    std::string out = "[";
    for (size_t i = 0; i < ls->size(); ++i) out += (i ? ", " : "") + to_toml_value(Value{(*ls)[i]});
    return out + "]";
  }
  return "\"" + escape(std::get<std::string>(v)) + "\"";
}

std::string JobConfig::to_toml() const {
  // Sections in first-use order; torchtitan-only keys only when given, so
  // the printout stays titan's config plus what the file asked for.
  std::vector<std::pair<std::string, std::string>> sections;
  auto add = [&](const Field& f) {
    const std::string line = f.key + " = " + to_toml_value(f.get(*this)) + "\n";
    for (auto& [name, body] : sections)
      if (name == f.section) {
        body += line;
        return;
      }
    sections.emplace_back(f.section, line);
  };
  for (const Field& f : fields()) add(f);
  for (const Field& f : torchtitan_only_fields())
    if (torchtitan_only.count(f.name())) add(f);
  std::ostringstream os;
  for (size_t i = 0; i < sections.size(); ++i)
    os << (i ? "\n" : "") << "[" << sections[i].first << "]\n" << sections[i].second;
  return os.str();
}

std::string JobConfig::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  auto add = [&](const Field& f) {
    nlohmann::json& slot = out[f.section][f.key];
    std::visit([&](const auto& v) { slot = v; }, f.get(*this));
  };
  for (const Field& f : fields()) add(f);
  for (const Field& f : torchtitan_only_fields())
    if (torchtitan_only.count(f.name())) add(f);
  return out.dump(2) + "\n";
}

std::string markdown_reference() {
  const JobConfig defaults;
  std::ostringstream os;
  std::string section;
  auto type_name = [](FieldType t) {
    switch (t) {
      case FieldType::Bool: return "bool";
      case FieldType::Int: return "int";
      case FieldType::Float: return "float";
      case FieldType::String: return "string";
      case FieldType::StringList: return "string list";
      case FieldType::StringLists: return "list of string lists";
    }
    return "?";
  };
  for (const Field& f : fields()) {
    if (f.section != section) {
      os << (section.empty() ? "" : "\n") << "### [" << f.section << "]\n\n"
         << "| key | type | default | meaning |\n| --- | --- | --- | --- |\n";
      section = f.section;
    }
    std::string meaning = f.help;
    if (!f.choices.empty()) {
      meaning += "; one of";
      for (size_t i = 0; i < f.choices.size(); ++i) meaning += (i ? ", " : " ") + std::string("`") + f.choices[i] + "`";
    }
    os << "| `" << f.key << "` | " << type_name(f.type) << " | `" << to_toml_value(f.get(defaults)) << "` | "
       << meaning << " |\n";
  }
  os << "\n### Aliases\n\n| alias | means | note |\n| --- | --- | --- |\n";
  for (const Alias& a : aliases()) {
    const Field& t = field(a.target);
    os << "| `[" << a.section << "] " << a.key << "` | " << (a.invert ? "not " : "") << "`" << t.display() << "` | "
       << a.note << " |\n";
  }
  os << "\n" << torchtitan_markdown();
  return os.str();
}

}  // namespace titan::config
