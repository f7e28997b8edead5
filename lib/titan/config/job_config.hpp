#pragma once
/// @file
/// @brief JobConfig: every option of a training job, grouped by TOML section,
/// with torchtitan's defaults.
///
/// The struct is plain data so that any part of the trainer can read it
/// without knowing where a value came from. Loading (TOML file, command-line
/// overrides), validation and feature gating live beside it in this folder;
/// the list of sections and keys that drives all of them is in schema.hpp.
/// docs/config.md documents every key.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "titan/config/value.hpp"

namespace titan::config {

/// @brief [job]: naming and where outputs go.
struct JobSection {
  std::string config_file;                ///< the TOML file this config was loaded from ("" = none)
  std::string dump_folder = "./outputs";  ///< root folder for checkpoints, traces, logs
  std::string description = "default job";  ///< free text, printed at start
  /// Rank 0 writes the effective config as JSON to this path under
  /// dump_folder (torchtitan's save_config_file); "" = not written.
  std::string save_config_file;
};

/// @brief [profiling]: trace capture and memory snapshots.
struct ProfilingSection {
  bool enable_profiling = false;                    ///< capture traces every profile_freq steps
  std::string save_traces_folder = "profile_traces";  ///< under dump_folder
  int64_t profile_freq = 10;                        ///< steps between traces
  int64_t profiler_warmup = 3;                      ///< steps the profiler warms up before recording
  int64_t profiler_active = 1;                      ///< steps recorded per trace
  bool enable_memory_snapshot = false;              ///< record allocator snapshots
  std::string save_memory_snapshot_folder = "memory_snapshot";  ///< under dump_folder
};

/// @brief [metrics]: logging.
struct MetricsSection {
  int64_t log_freq = 10;               ///< steps between metric lines
  bool enable_tensorboard = false;     ///< write TensorBoard event files
  std::string save_tb_folder = "tb";   ///< under dump_folder
  /// Every rank writes TensorBoard files, under rank_<N> of the run's
  /// folder (its own throughput, times and memory); else rank 0 alone.
  bool save_for_all_ranks = false;
};

/// @brief [model]: which model and tokenizer.
struct ModelSection {
  std::string name = "llama3";         ///< model family (only "llama3")
  std::string flavor = "debugmodel";   ///< size: debugmodel, 1B, 3B, 8B, 70B, 405B
  /// titan's: the flavor with this many transformer blocks instead of its
  /// own (0 = the flavor's), e.g. an 8B-shaped model cut to fit one GPU.
  int64_t n_layers = 0;
  /// titan's: the flavor's width, query heads and key/value heads replaced
  /// (0 = the flavor's), e.g. the debug model widened for a benchmark.
  int64_t dim = 0;
  int64_t n_heads = 0;     ///< titan's: query heads instead of the flavor's (0 = the flavor's)
  int64_t n_kv_heads = 0;  ///< titan's: key/value heads instead of the flavor's (0 = the flavor's)
  int64_t ffn_hidden_size = 0;  ///< titan's: SwiGLU's hidden width instead of the flavor's (0 = the flavor's)
  int64_t vocab_size = 0;       ///< titan's: the vocabulary instead of the flavor's (0 = the flavor's)
  std::string norm_type = "rmsnorm";   ///< normalisation layer
  /// attention backend (torchtitan's attn_type): "sdpa" (ATen's dispatch),
  /// "flash" (titan's CPU flash kernel) or "math" (explicit softmax)
  std::string attn_type = "sdpa";
  /// torchtitan 0.3's attn_mask_type: "causal" over the whole packed window,
  /// or "block_causal" (each document attends only within itself, RoPE
  /// positions restart per document, no target across a boundary)
  std::string attn_mask_type = "causal";
  /// titan's: fused kernels for RMSNorm, SwiGLU and RoPE and the chunked
  /// cross-entropy (ModelArgs::fused_kernels); false = op by op
  bool fused_kernels = true;
  /// titan's: the GEMM of fp32 Linear layers on the CPU: "auto" (oneDNN
  /// where its plugin loads, passes its check and the CPU is not Intel's,
  /// else aten), "onednn" (oneDNN's matmul: AVX-512 on AMD CPUs too) or
  /// "aten" (aten::mm, MKL's sgemm in LibTorch's wheel, as eager PyTorch);
  /// ops/gemm/cpu_matmul.hpp
  std::string cpu_matmul = "auto";
  std::string tokenizer_path;          ///< tokenizer file or folder; "" = hf_assets_path, else the built-in tokenizer
  std::string hf_assets_path;          ///< torchtitan's Hugging Face assets folder (tokenizer.json); "" = none
  /// torchtitan's model converters: "float8" / "quantize.linear.float8"
  /// turn on [float8] enable_float8_linear (normalize()); others are gated.
  std::vector<std::string> converters;
};

/// @brief [optimizer]: AdamW and its hyper-parameters.
struct OptimizerSection {
  std::string name = "AdamW";   ///< "AdamW" or "Adam"
  double lr = 8e-4;             ///< peak learning rate
  double eps = 1e-8;            ///< Adam epsilon
  double weight_decay = 0.1;    ///< decoupled weight decay (AdamW)
  double beta1 = 0.9;           ///< first-moment decay
  double beta2 = 0.95;          ///< second-moment decay
  /// torchtitan's: each parameter steps inside backward as soon as its
  /// gradient is final, which frees it at once (no clipping then).
  bool early_step_in_backward = false;
};

/// @brief [lr_scheduler]: warm-up then decay to a floor.
struct LrSchedulerSection {
  int64_t warmup_steps = 200;        ///< linear warm-up length (seed: [training] warmup_steps)
  std::string decay_type = "linear";  ///< "linear", "cosine" or "wsd"
  double decay_ratio = -1;           ///< fraction of steps spent decaying; -1 = all steps after warm-up
  double min_lr_factor = 0.0;        ///< the schedule ends at lr * min_lr_factor
  /// Steps the schedule spans; -1 = [training] steps. Longer than the run
  /// keeps the LR curve of a longer job (a short debug run, an early stop).
  int64_t total_steps = -1;
};

/// @brief [training]: batch shape, length, data, parallel degrees, numerics.
struct TrainingSection {
  int64_t batch_size = 8;               ///< per-rank micro-batch (torchtitan v0.2: local_batch_size)
  int64_t global_batch_size = -1;       ///< -1 = batch_size × data-parallel degree
  int64_t gradient_accumulation_steps = -1;  ///< -1 = derived from global_batch_size
  int64_t seq_len = 2048;               ///< tokens per sample
  double max_norm = 1.0;                ///< gradient clipping by global norm (<= 0: off)
  int64_t steps = 10000;                ///< optimizer steps to train
  std::string dataset;                  ///< text/JSONL file or folder, or a torchtitan name (c4_test); "" = built-in corpus
  std::string dataset_path;             ///< where the named dataset's files are (torchtitan's rule: it wins when set)
  int64_t seed = 0;                     ///< RNG seed for init and data order
  bool deterministic = false;           ///< ask torch for deterministic kernels
  /// With `deterministic`: an op without a deterministic kernel warns
  /// (once) instead of stopping the job (torchtitan's [debug] key).
  bool deterministic_warn_only = false;
  std::string device = "auto";          ///< "auto", "cpu" or "cuda"
  /// The parameters' own dtype ("float32" or "bfloat16"): "bfloat16" keeps
  /// weights, gradients and optimizer state in bf16 with no fp32 copy
  /// (torchtitan's pure bf16 training); RoPE and the loss stay fp32.
  std::string dtype = "float32";
  std::string mixed_precision_param = "bfloat16";  ///< FSDP parameter dtype; the autocast dtype without FSDP/TP/PP on GPUs
  std::string mixed_precision_reduce = "float32";  ///< FSDP gradient-reduction dtype
  bool enable_cpu_offload = false;                ///< FSDP shards, grads, optimizer state in CPU memory
  /// FSDP: free gathered weights after forward ("always"), keep them for
  /// backward ("never"), or torchtitan's "default" (always, except the last
  /// block, whose backward comes first; and never under pipelining).
  std::string fsdp_reshard_after_forward = "default";
  /// titan's: under pipeline parallelism, FSDP reduce-scatters each
  /// micro-batch's gradients into the shards' (as it does for plain
  /// gradient accumulation) instead of summing them unsharded in reduce
  /// dtype until the step's last backward (torch's pipelining, the
  /// default): no full-stage fp32 gradient sums, one reduce-scatter per
  /// unit and micro-batch instead of per step.
  bool fsdp_reduce_scatter_per_microbatch = false;
  int64_t data_parallel_replicate_degree = 1;  ///< DDP replicas
  int64_t data_parallel_shard_degree = -1;     ///< FSDP shards; -1 = the remaining ranks
  int64_t tensor_parallel_degree = 1;          ///< TP ranks
  int64_t context_parallel_degree = 1;         ///< CP ranks
  /// CP: how K/V reach every rank, "allgather" (all at once) or "alltoall"
  /// (round the ring, overlapped with the blocks' compute).
  std::string context_parallel_rotate_method = "allgather";
  /// CP: "headtail" (2·cp chunks, rank i holds i and 2·cp−1−i: equal causal
  /// work) or "contiguous" (rank i holds the i-th cp-th of the sequence;
  /// "None", torchtitan's spelling of no load balancing, is the same).
  std::string context_parallel_load_balancer = "headtail";
  bool enable_loss_parallel = false;           ///< keep logits sharded through the loss (TP)
  /// TP: shard the residual stream on the sequence between blocks (SP);
  /// false gives plain Megatron TP (replicated activations, all-reduces).
  bool enable_sequence_parallel = true;
  bool enable_async_tensor_parallel = false;   ///< overlap TP collectives with compute
};

/// @brief [experimental]: pipeline parallelism (torchtitan's section for it).
struct ExperimentalSection {
  int64_t pipeline_parallel_degree = 1;             ///< PP stages
  std::string pipeline_parallel_schedule = "1F1B";  ///< schedule name (case-insensitive)
  /// Sequences per pipeline micro-batch (torchtitan's default 1): the local
  /// batch splits into local_batch / microbatch_size micro-batches.
  int64_t pipeline_parallel_microbatch_size = 1;
  /// Layers per pipeline stage; -1 = pp stages (2·pp for the multi-stage
  /// schedules).
  int64_t pipeline_parallel_layers_per_stage = -1;
  /// How many layers' worth the first stage's embeddings count for, and the
  /// last stage's norm + output: those stages hold that many fewer layers
  /// (torchtitan's split, both 1 by default).
  int64_t pipeline_parallel_first_stage_less_layers = 1;
  int64_t pipeline_parallel_last_stage_less_layers = 1;
  /// The modules of each pipeline stage, by name (torchtitan's
  /// module_fqns_per_model_part): {{"tok_embeddings", "layers.0"},
  /// {"layers.1", "norm", "output"}}; empty = split by the keys above.
  StringLists module_fqns_per_model_part;
  /// A CSV of every pipeline rank's compute actions in torch's spelling
  /// (torchtitan's pipeline_parallel_schedule_csv); "" = the schedule's own
  /// order. The schedule's name still places the stages on the ranks.
  std::string pipeline_parallel_schedule_csv;
};

/// @brief [checkpoint]: distributed checkpointing.
struct CheckpointSection {
  bool enable_checkpoint = false;       ///< save and resume checkpoints
  std::string folder = "checkpoint";    ///< under dump_folder
  std::string interval_type = "steps";  ///< "steps" or "seconds"
  int64_t interval = 500;               ///< save every `interval` steps or seconds
  bool model_weights_only = false;      ///< final save holds weights only
  std::string export_dtype = "float32";  ///< dtype of a weights-only export
  /// The last save is a Hugging Face LlamaForCausalLM folder (config.json
  /// and safetensors, in export_dtype) that every rank writes its rows of.
  bool last_save_in_hf = false;
  std::string async_mode = "disabled";  ///< "disabled", "async", "async_with_pinned_mem"
  int64_t keep_latest_k = 10;           ///< checkpoints kept (0 = all)
  int64_t load_step = -1;               ///< step to resume from; -1 = latest
  bool create_seed_checkpoint = false;  ///< save step-0 weights (one process) and stop
  /// A checkpoint to start from when the job's own folder has none to resume
  /// (torchtitan's initial_load_path): a DCP step folder, or with
  /// initial_load_in_hf a Hugging Face folder. Each rank reads only the rows
  /// it holds. "" = initialise.
  std::string initial_load_path;
  bool initial_load_model_only = true;  ///< load weights only (not optimizer, step, data)
  bool initial_load_in_hf = false;      ///< initial_load_path is a Hugging Face safetensors folder
  /// Parts of a checkpoint a resume leaves out (torchtitan's names: "model",
  /// "optimizer", "lr_scheduler", "dataloader", "train_state"; titan's "rng"):
  /// e.g. a new optimizer and schedule over trained weights.
  std::vector<std::string> exclude_from_loading;
  bool enable_first_step_checkpoint = false;  ///< also save after step 1 (checks saving early)
  bool load_only = false;                     ///< load checkpoints, never save one
};

/// @brief [activation_checkpoint]: recompute activations in backward.
struct ActivationCheckpointSection {
  std::string mode = "none";                ///< "none", "selective" or "full"
  std::string selective_ac_option = "2";    ///< "op" or every N-th layer ("2")
  /// Op mode: matmuls with the weight shape of a Linear whose name contains
  /// one of these are recomputed, not kept (torchtitan's rule).
  std::vector<std::string> per_op_sac_force_recompute_mm_shapes_by_fqns = {"moe.router.gate"};
};

/// @brief [float8]: FP8 linear layers.
struct Float8Section {
  bool enable_float8_linear = false;  ///< swap nn.Linear for float8 training
  /// Linear layers left in high precision (a name or a name's last parts);
  /// torchtitan's [quantize.linear.float8] filter_fqns.
  std::vector<std::string> filter_fqns = {"output"};
  /// FSDP all-gathers the converted weights in float8 (1 byte per element).
  bool enable_fsdp_float8_all_gather = false;
  /// With the float8 all-gather: one all-reduce of every layer's amax after
  /// each optimizer step instead of one per layer per all-gather.
  bool precompute_float8_dynamic_scale_for_fsdp = false;
  /// torchao's scaling recipe: "tensorwise" or "rowwise".
  std::string recipe_name = "tensorwise";
  /// On GPUs, the float8 GEMMs computed as the CPU computes them (operands
  /// upcast, an fp32 matmul) instead of by float8 tensor cores: for GPUs
  /// below compute capability 8.9 (torchtitan's [quantize.linear.float8]
  /// emulate, torchao's Float8LinearConfig.emulate). The CPU always emulates.
  bool emulate = false;
};

/// @brief [validation]: the loss on a held-out split every `freq` steps,
/// computed without touching the optimizer or the training data's position
/// (torchtitan's [validation]).
struct ValidationSection {
  bool enable = false;                    ///< run validation
  std::string dataset = "c4_validation";  ///< as [training] dataset ("" = the built-in corpus)
  std::string dataset_path;               ///< as [training] dataset_path
  int64_t local_batch_size = 8;           ///< sequences per rank and batch
  int64_t seq_len = 2048;                 ///< tokens per sequence
  int64_t freq = 10;                      ///< validate after every freq-th step
  int64_t steps = -1;                     ///< batches per validation; -1 = one pass over the split
};

/// @brief [comm]: collective timeouts, the flight recorder, and the fake
/// backend that plays one rank of a larger job in one process.
struct CommSection {
  int64_t init_timeout_seconds = 300;  ///< rendezvous and first collective
  int64_t timeout_seconds = 300;       ///< every later collective
  int64_t trace_buf_size = 20000;      ///< flight-recorder entries per rank; 0 = off
  std::string save_traces_folder = "comm_traces";  ///< flight-recorder dumps, under dump_folder
  std::string save_traces_file_prefix = "rank_";   ///< a dump is PREFIX<rank>.json
  /// "default" (the launcher's ranks communicate) or "fake_backend"
  /// (torchtitan's name): one process plays rank fake_rank of a job of
  /// fake_world_size ranks, and no collective communicates.
  std::string mode = "default";
  int64_t fake_world_size = 1;  ///< the world the fake rank plays in ("fake_backend")
  int64_t fake_rank = 0;        ///< the rank it plays, in [0, fake_world_size)
  /// The engine under the collectives: "auto" (Gloo for CPU tensors, NCCL
  /// for CUDA ones), "gloo" (also for CUDA tensors, staged through host
  /// memory where Gloo takes none) or "nccl".
  std::string backend = "auto";
  /// Local ranks that share one GPU (1: a GPU per rank). Above 1 a node of
  /// G GPUs runs up to G x ranks_per_device ranks.
  int64_t ranks_per_device = 1;
};

/// @brief [cluster] (titan's): the machines `titan predict` models a job
/// on. A preset names an accelerator and its network; every other key
/// replaces one of the preset's values (0 = the preset's).
struct ClusterSection {
  /// h100_sxm, h100_hbm2e_500w, h200, a100_80g, b200 (predict/cluster.hpp),
  /// or cpu: this machine as `titan predict --calibrate` measured it
  std::string preset = "h100_sxm";
  double peak_bf16_tflops = 0;  ///< dense bf16 tensor-core peak per GPU, TFLOP/s
  double peak_fp8_tflops = 0;   ///< dense float8 peak per GPU, TFLOP/s
  double peak_fp32_tflops = 0;  ///< fp32 (no tensor cores) peak per GPU, TFLOP/s
  double hbm_bandwidth_gbps = 0;  ///< memory bandwidth per GPU, GB/s
  double hbm_capacity_gib = 0;    ///< memory per GPU, GiB
  int64_t gpus_per_node = 0;      ///< GPUs joined by the intra-node links
  double intra_node_bandwidth_gbps = 0;  ///< per GPU, each way, GB/s (NVLink)
  /// An all-reduce inside a node, where switches reduce (NVLink SHARP), GB/s
  double intra_node_all_reduce_bandwidth_gbps = 0;
  double intra_node_latency_us = 0;      ///< per step of a ring inside a node
  double inter_node_bandwidth_gbps = 0;  ///< per GPU, each way, GB/s (its NIC)
  double inter_node_latency_us = 0;      ///< per step of a ring across nodes
  /// Fractions of a peak that kernels reach (calibrated: predict/cluster.hpp)
  double matmul_efficiency = 0;
  double attention_efficiency = 0;
  double memory_efficiency = 0;
};

/// @brief The whole configuration of a training job.
///
/// Build one with parse_job_config() (load.hpp): defaults < TOML file <
/// command line, then validate(). Check check_supported() before training.
struct JobConfig {
  JobSection job;
  ProfilingSection profiling;
  MetricsSection metrics;
  ModelSection model;
  OptimizerSection optimizer;
  LrSchedulerSection lr_scheduler;
  TrainingSection training;
  ExperimentalSection experimental;
  CheckpointSection checkpoint;
  ActivationCheckpointSection activation_checkpoint;
  Float8Section float8;
  ValidationSection validation;
  CommSection comm;
  ClusterSection cluster;

  /// Where each option that is not a default came from, keyed "section.key"
  /// (canonical names): "file.toml:12" or "command line". Error messages
  /// about a value name its origin with it.
  std::map<std::string, std::string> origin;

  /// Values given for torchtitan v0.2 keys titan has no option for
  /// ("section.key" -> value; see torchtitan.hpp). check_supported()
  /// refuses those that would change the training.
  std::map<std::string, Value> torchtitan_only;

  /// @brief The effective config as TOML (canonical names, every key), for
  /// logs and `titan config`; loading it back gives the same values.
  std::string to_toml() const;
  /// @brief The same as JSON, {"section": {"key": value}} (torchtitan's
  /// save_config_file layout, with titan's names), indented by 2.
  std::string to_json() const;
};

}  // namespace titan::config
