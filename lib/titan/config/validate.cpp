// Value checks. Each rule names the option, so the message can name the
// value, what is allowed and where the value came from (file:line or the
// command line), all on one line.
#include "titan/config/validate.hpp"

#include <cmath>
#include <cstdlib>

#include "titan/config/schema.hpp"
#include "titan/util/error.hpp"

namespace titan::config {
namespace {

std::string origin_of(const JobConfig& cfg, const std::string& name) {
  auto it = cfg.origin.find(name);
  return it == cfg.origin.end() ? "default" : it->second;
}

// Throws "[s] k = v is out of range: must be <rule> (origin)" unless ok.
void require(const JobConfig& cfg, const std::string& name, bool ok, const std::string& rule) {
  if (ok) return;
  const Field& f = field(name);
  throw Error(f.display() + " = " + to_toml_value(f.get(cfg)) + " is out of range: must be " + rule + " (" +
              origin_of(cfg, name) + ")");
}

bool positive_integer_text(const std::string& s) {
  if (s.empty() || s.size() > 9) return false;
  for (char ch : s)
    if (ch < '0' || ch > '9') return false;
  return std::atoi(s.c_str()) > 0;
}

}  // namespace

void validate(const JobConfig& cfg) {
  // Enumerated strings and finite floats, from the schema.
  for (const Field& f : fields()) {
    const Value v = f.get(cfg);
    if (f.type == FieldType::Float) require(cfg, f.name(), std::isfinite(std::get<double>(v)), "a finite number");
    if (f.choices.empty()) continue;
    const std::string& s = std::get<std::string>(v);
    bool ok = false;
    std::string list;
    for (const std::string& c : f.choices) {
      ok = ok || c == s;
      list += (list.empty() ? "" : ", ") + to_toml_value(Value{c});
    }
    if (!ok)
      throw Error(f.display() + " = " + to_toml_value(v) + " is not valid: expected one of " + list + " (" +
                  origin_of(cfg, f.name()) + ")");
  }

  const auto& t = cfg.training;
  require(cfg, "training.batch_size", t.batch_size > 0, "> 0");
  require(cfg, "training.seq_len", t.seq_len > 0, "> 0");
  // 0: an init-only run (build, parallelise, initialise, save step 0).
  require(cfg, "training.steps", t.steps >= 0, ">= 0");
  require(cfg, "training.global_batch_size", t.global_batch_size == -1 || t.global_batch_size > 0, "> 0, or -1 (auto)");
  require(cfg, "training.gradient_accumulation_steps",
          t.gradient_accumulation_steps == -1 || t.gradient_accumulation_steps > 0, "> 0, or -1 (auto)");
  require(cfg, "training.seed", t.seed >= 0, ">= 0");
  // As torchtitan's ParallelDims: only the FSDP degree may be -1 (it takes
  // the ranks the others leave).
  require(cfg, "training.data_parallel_replicate_degree", t.data_parallel_replicate_degree >= 1, ">= 1");
  require(cfg, "training.data_parallel_shard_degree",
          t.data_parallel_shard_degree >= 1 || t.data_parallel_shard_degree == -1, ">= 1, or -1 (the remaining ranks)");
  require(cfg, "training.tensor_parallel_degree", t.tensor_parallel_degree >= 1, ">= 1");
  require(cfg, "training.context_parallel_degree", t.context_parallel_degree >= 1, ">= 1");
  require(cfg, "experimental.pipeline_parallel_degree", cfg.experimental.pipeline_parallel_degree >= 1, ">= 1");
  require(cfg, "experimental.pipeline_parallel_microbatch_size",
          cfg.experimental.pipeline_parallel_microbatch_size >= 1, ">= 1");
  require(cfg, "experimental.pipeline_parallel_layers_per_stage",
          cfg.experimental.pipeline_parallel_layers_per_stage >= 1 ||
              cfg.experimental.pipeline_parallel_layers_per_stage == -1,
          ">= 1, or -1 (pp stages, 2 per rank for multi-stage schedules)");
  require(cfg, "experimental.pipeline_parallel_first_stage_less_layers",
          cfg.experimental.pipeline_parallel_first_stage_less_layers >= 0, ">= 0");
  require(cfg, "experimental.pipeline_parallel_last_stage_less_layers",
          cfg.experimental.pipeline_parallel_last_stage_less_layers >= 0, ">= 0");

  const auto& o = cfg.optimizer;
  require(cfg, "optimizer.lr", o.lr > 0, "> 0");
  require(cfg, "optimizer.eps", o.eps > 0, "> 0");
  require(cfg, "optimizer.weight_decay", o.weight_decay >= 0, ">= 0");
  require(cfg, "optimizer.beta1", o.beta1 >= 0 && o.beta1 < 1, "in [0, 1)");
  require(cfg, "optimizer.beta2", o.beta2 >= 0 && o.beta2 < 1, "in [0, 1)");

  const auto& s = cfg.lr_scheduler;
  require(cfg, "lr_scheduler.warmup_steps", s.warmup_steps >= 0, ">= 0");
  require(cfg, "lr_scheduler.decay_ratio", s.decay_ratio == -1 || (s.decay_ratio >= 0 && s.decay_ratio <= 1),
          "in [0, 1], or -1 (every step after warm-up)");
  require(cfg, "lr_scheduler.min_lr_factor", s.min_lr_factor >= 0 && s.min_lr_factor <= 1, "in [0, 1]");
  require(cfg, "lr_scheduler.total_steps", s.total_steps >= 1 || s.total_steps == -1, ">= 1, or -1 ([training] steps)");

  require(cfg, "metrics.log_freq", cfg.metrics.log_freq > 0, "> 0");
  require(cfg, "profiling.profile_freq", cfg.profiling.profile_freq > 0, "> 0");
  require(cfg, "profiling.profiler_warmup", cfg.profiling.profiler_warmup >= 0, ">= 0");
  require(cfg, "profiling.profiler_active", cfg.profiling.profiler_active >= 1, ">= 1");
  // torchtitan's schedule waits profile_freq - warmup - active steps per window.
  require(cfg, "profiling.profiler_active",
          !cfg.profiling.enable_profiling ||
              cfg.profiling.profiler_warmup + cfg.profiling.profiler_active <= cfg.profiling.profile_freq,
          "such that profiler_warmup + profiler_active <= profile_freq");
  require(cfg, "checkpoint.interval", cfg.checkpoint.interval > 0, "> 0");
  require(cfg, "checkpoint.keep_latest_k", cfg.checkpoint.keep_latest_k >= 0, ">= 0");
  require(cfg, "checkpoint.load_step", cfg.checkpoint.load_step >= -1, ">= 0, or -1 (the latest)");
  // torchtitan loads an initial checkpoint only with checkpointing on, and
  // a Hugging Face folder holds weights alone: say so rather than ignore it.
  const auto& c = cfg.checkpoint;
  require(cfg, "checkpoint.initial_load_path", c.initial_load_path.empty() || c.enable_checkpoint,
          "\"\" unless [checkpoint] enable_checkpoint = true (the initial load is part of checkpointing)");
  for (const std::string& part : c.exclude_from_loading)
    require(cfg, "checkpoint.exclude_from_loading",
            part == "model" || part == "optimizer" || part == "lr_scheduler" || part == "dataloader" ||
                part == "train_state" || part == "rng",
            "a list of model, optimizer, lr_scheduler, dataloader, train_state, rng (got \"" + part + "\")");
  require(cfg, "checkpoint.initial_load_in_hf", !c.initial_load_in_hf || !c.initial_load_path.empty(),
          "false unless [checkpoint] initial_load_path names the Hugging Face folder");
  require(cfg, "checkpoint.initial_load_model_only", c.initial_load_model_only || !c.initial_load_in_hf,
          "true with initial_load_in_hf (a Hugging Face folder holds weights only)");
  require(cfg, "checkpoint.model_weights_only", c.model_weights_only || !c.last_save_in_hf,
          "true with last_save_in_hf (a Hugging Face folder holds weights only; torchtitan's last_save_model_only)");
  const std::string& ac = cfg.activation_checkpoint.selective_ac_option;
  require(cfg, "activation_checkpoint.selective_ac_option", ac == "op" || positive_integer_text(ac),
          "\"op\" or a positive integer such as \"2\"");
  const auto& v = cfg.validation;
  require(cfg, "validation.local_batch_size", v.local_batch_size > 0, "> 0");
  require(cfg, "validation.seq_len", v.seq_len > 0, "> 0");
  require(cfg, "validation.freq", v.freq > 0, "> 0");
  require(cfg, "validation.steps", v.steps > 0 || v.steps == -1, "> 0, or -1 (one pass over the split)");
  // The model's RoPE table is built for [training] seq_len.
  require(cfg, "validation.seq_len", !v.enable || v.seq_len <= cfg.training.seq_len,
          "<= [training] seq_len (the model's RoPE table is that long)");
  require(cfg, "comm.init_timeout_seconds", cfg.comm.init_timeout_seconds > 0, "> 0");
  require(cfg, "comm.timeout_seconds", cfg.comm.timeout_seconds > 0, "> 0");
  require(cfg, "comm.trace_buf_size", cfg.comm.trace_buf_size >= 0, ">= 0");
  require(cfg, "comm.fake_world_size", cfg.comm.fake_world_size >= 1, ">= 1");
  require(cfg, "comm.fake_rank", cfg.comm.fake_rank >= 0 && cfg.comm.fake_rank < cfg.comm.fake_world_size,
          "in [0, [comm] fake_world_size = " + std::to_string(cfg.comm.fake_world_size) + ")");
  require(cfg, "comm.ranks_per_device", cfg.comm.ranks_per_device >= 1, ">= 1");
  require(cfg, "comm.save_traces_folder", !cfg.comm.save_traces_folder.empty(), "non-empty");
  require(cfg, "comm.save_traces_file_prefix",
          cfg.comm.save_traces_file_prefix.find('/') == std::string::npos, "a file-name prefix without '/'");
  const ClusterSection& k = cfg.cluster;
  for (const auto& [name, value] :
       std::vector<std::pair<const char*, double>>{{"cluster.peak_bf16_tflops", k.peak_bf16_tflops},
                                                   {"cluster.peak_fp8_tflops", k.peak_fp8_tflops},
                                                   {"cluster.peak_fp32_tflops", k.peak_fp32_tflops},
                                                   {"cluster.hbm_bandwidth_gbps", k.hbm_bandwidth_gbps},
                                                   {"cluster.hbm_capacity_gib", k.hbm_capacity_gib},
                                                   {"cluster.gpus_per_node", static_cast<double>(k.gpus_per_node)},
                                                   {"cluster.intra_node_bandwidth_gbps", k.intra_node_bandwidth_gbps},
                                                   {"cluster.intra_node_all_reduce_bandwidth_gbps",
                                                    k.intra_node_all_reduce_bandwidth_gbps},
                                                   {"cluster.intra_node_latency_us", k.intra_node_latency_us},
                                                   {"cluster.inter_node_bandwidth_gbps", k.inter_node_bandwidth_gbps},
                                                   {"cluster.inter_node_latency_us", k.inter_node_latency_us}})
    require(cfg, name, value >= 0 && std::isfinite(value), ">= 0 (0 = the preset's)");
  for (const auto& [name, value] : std::vector<std::pair<const char*, double>>{
           {"cluster.matmul_efficiency", k.matmul_efficiency},
           {"cluster.attention_efficiency", k.attention_efficiency},
           {"cluster.memory_efficiency", k.memory_efficiency}})
    require(cfg, name, value >= 0 && value <= 1, "in [0, 1] (0 = the preset's)");
}

BatchPlan plan_batches(const JobConfig& cfg, int64_t dp_degree) {
  TITAN_CHECK(dp_degree >= 1, "data-parallel degree must be >= 1 (got ", dp_degree, ")");
  const auto& t = cfg.training;
  BatchPlan p;
  p.local_batch = t.batch_size;
  p.dp_degree = dp_degree;
  const int64_t per_micro_step = t.batch_size * dp_degree;
  if (t.global_batch_size == -1) {
    p.accumulation_steps = t.gradient_accumulation_steps == -1 ? 1 : t.gradient_accumulation_steps;
    p.global_batch = per_micro_step * p.accumulation_steps;
    return p;
  }
  TITAN_CHECK(t.global_batch_size % per_micro_step == 0, "[training] global_batch_size = ", t.global_batch_size,
              " is not a multiple of batch_size x data-parallel degree = ", t.batch_size, " x ", dp_degree, " (",
              origin_of(cfg, "training.global_batch_size"), ")");
  p.global_batch = t.global_batch_size;
  p.accumulation_steps = t.global_batch_size / per_micro_step;
  TITAN_CHECK(t.gradient_accumulation_steps == -1 || t.gradient_accumulation_steps == p.accumulation_steps,
              "[training] gradient_accumulation_steps = ", t.gradient_accumulation_steps, " disagrees with global_batch_size ",
              t.global_batch_size, " / (batch_size ", t.batch_size, " x data-parallel degree ", dp_degree,
              ") = ", p.accumulation_steps, "; set only one of them");
  return p;
}

}  // namespace titan::config
