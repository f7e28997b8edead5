// The job-level estimate of memory_estimate.hpp: parameters from the model
// on the meta device, split as TP and FSDP split them into units; per-token
// activations from activations.hpp; each pipeline rank's moments from
// rank_moments.hpp, and its peak as the largest of them.
#include "titan/estimate/memory_estimate.hpp"

#include <ATen/Context.h>

#include <algorithm>
#include <map>

#include <ATen/ATen.h>

#include "titan/config/validate.hpp"
#include "titan/estimate/activations.hpp"
#include "titan/estimate/rank_moments.hpp"
#include "titan/metrics/format.hpp"
#include "titan/models/llama3/flops.hpp"
#include "titan/models/llama3/pipeline.hpp"
#include "titan/models/llama3/transformer.hpp"
#include "titan/parallel/mixed_precision.hpp"
#include "titan/parallel/pipeline/schedule.hpp"
#include "titan/util/error.hpp"
#include "titan/util/strprintf.hpp"

namespace titan::estimate {
namespace {

using models::llama3::ModelArgs;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A parameter's TP-local shape (llama3_tp_plan: embedding row-wise and the
// LM head column-wise split the vocabulary, wq/wk/wv/w1/w3 their output
// rows, wo/w2 their input columns; norms are replicated).
std::vector<int64_t> tp_local_shape(const std::string& fqn, std::vector<int64_t> shape, int64_t tp) {
  if (tp == 1) return shape;
  auto ends_with = [&](const char* s) {
    const std::string tail(s);
    return fqn.size() >= tail.size() && fqn.compare(fqn.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (ends_with("tok_embeddings.weight") || ends_with("output.weight") || ends_with("wq.weight") ||
      ends_with("wk.weight") || ends_with("wv.weight") || ends_with("w1.weight") || ends_with("w3.weight"))
    shape[0] = ceil_div(shape[0], tp);
  else if (ends_with("wo.weight") || ends_with("w2.weight"))
    shape[1] = ceil_div(shape[1], tp);
  return shape;
}

// Walks the meta model's parameters into units: "root" and "layers.<id>".
std::map<std::string, UnitBytes> unit_sizes(const ModelArgs& args, int64_t tp, int64_t shards) {
  models::llama3::Transformer model(args, at::TensorOptions().dtype(at::kFloat).device(at::kMeta));
  std::map<std::string, UnitBytes> units;
  for (const auto& item : model->named_parameters()) {
    const std::string& fqn = item.key();
    std::vector<int64_t> shape = tp_local_shape(fqn, item.value().sizes().vec(), tp);
    int64_t rest = 1;
    for (size_t i = 1; i < shape.size(); ++i) rest *= shape[i];
    const int64_t rows = ceil_div(shape[0], shards);  // FSDP pads dim 0 to a multiple of the shards
    std::string unit = "root";
    if (fqn.rfind("layers.", 0) == 0) unit = fqn.substr(0, fqn.find('.', 7));
    UnitBytes& u = units[unit];
    u.shard_numel += rows * rest;
    u.gathered_numel += rows * shards * rest;
    if (unit == "root" && fqn.rfind("tok_embeddings", 0) != 0) u.output_and_norm_numel += shape[0] * rest;
  }
  return units;
}

// Root parameters a stage holds: the embedding on the first, norm and
// output on the last (the numels of `root` split accordingly).
RootShare root_share(const ModelArgs& args, const UnitBytes& root, int64_t tp, int64_t shards, bool first, bool last) {
  const int64_t emb_rows = ceil_div(ceil_div(args.vocab_size, tp), shards);
  const int64_t emb_shard = emb_rows * args.dim, emb_gathered = emb_rows * shards * args.dim;
  RootShare r;
  if (first) r.shard_numel += emb_shard, r.gathered_numel += emb_gathered;
  if (last) {
    r.shard_numel += root.shard_numel - emb_shard;
    r.gathered_numel += root.gathered_numel - emb_gathered;
    r.output_and_norm_numel = root.output_and_norm_numel;
  }
  return r;
}

// Per stage, the most micro-batches between their I and their W at once
// (a zero-bubble schedule's split backward; none on the first stage, whose
// I computes nothing: pp::Action::computes).
std::map<int, int64_t> microbatches_awaiting_weight_step(const pp::RankActions& actions) {
  std::map<int, int64_t> live, most;
  for (const pp::Action& a : actions) {
    if (a.computes() == pp::ActionType::BackwardInput) most[a.stage] = std::max(most[a.stage], ++live[a.stage]);
    if (a.computes() == pp::ActionType::BackwardWeight) --live[a.stage];
  }
  return most;
}

// The most micro-batches whose forward ran and whose backward has not, per
// stage, in the schedule's own order of actions.
std::map<int, int64_t> microbatches_in_flight(const pp::RankActions& actions) {
  std::map<int, int64_t> live, most;
  for (const pp::Action& a : actions) {
    if (a.type == pp::ActionType::Forward) most[a.stage] = std::max(most[a.stage], ++live[a.stage]);
    // A micro-batch's inputs are freed by its whole backward, or (zero
    // bubble) only by its W.
    const bool frees = a.type == pp::ActionType::Backward || a.type == pp::ActionType::BackwardWeight;
    if (frees) --live[a.stage];
  }
  return most;
}

// GiB for real flavors, MiB for the small ones a laptop trains.
std::string gib(double bytes) {
  const double mib = bytes / (1024.0 * 1024.0);
  return mib < 1024.0 ? titan::strprintf("%.1f MiB", mib) : titan::strprintf("%.2f GiB", mib / 1024.0);
}

}  // namespace

const RankMemory& JobEstimate::worst() const {
  TITAN_CHECK(!ranks.empty(), "estimate: no ranks");
  return *std::max_element(ranks.begin(), ranks.end(),
                           [](const RankMemory& a, const RankMemory& b) { return a.peak < b.peak; });
}

JobEstimate estimate_job(const models::llama3::JobLayout& job) {
  JobEstimate e;
  e.flavor = "custom";
  e.args = job.args;
  const ModelArgs& args = e.args;
  e.dims = job.dims;
  const parallel::ParallelDims& dims = e.dims;
  const config::BatchPlan& batches = job.batches;
  const models::llama3::ParallelizeOptions& o = job.parallelize;
  const int64_t seq_len = o.seq_len;

  const bool fsdp = dims.fsdp_enabled();
  const bool ddp = dims.dp_replicate > 1 && !fsdp;
  const int64_t shards = fsdp ? dims.dp_shard * dims.cp : 1;
  const bool pipelined = job.pipelined();
  const bool offload = fsdp && o.fsdp.cpu_offload;
  // Parameters, their gradients and Adam's two moments are stored in
  // [training] dtype; FSDP gathers in mixed_precision_param.
  const int64_t storage_bytes = static_cast<int64_t>(c10::elementSize(o.param_storage_dtype));
  const int64_t param_bytes = fsdp ? static_cast<int64_t>(c10::elementSize(o.fsdp.param_dtype)) : storage_bytes;
  const int64_t reduce_bytes = fsdp ? static_cast<int64_t>(c10::elementSize(o.fsdp.reduce_dtype)) : 4;
  // Blocks but the model's last (whose weights backward needs first).
  const bool blocks_reshard = o.fsdp.block_reshards_after_forward(/*last_block=*/false, pipelined);
  const std::string param_dtype_name = models::llama3::config_dtype_name(o.fsdp.param_dtype);

  ActivationLayout layout;
  layout.tp = dims.tp;
  layout.sequence_parallel = dims.tp > 1 && o.tp.sequence_parallel;
  layout.loss_parallel = dims.tp > 1 && o.tp.loss_parallel;
  layout.attention = ops::parse_attention_backend(args.attn_type);
  // FSDP computes in param_dtype; without it one GPU and DDP autocast to it
  // (parallel/mixed_precision.hpp) on the job's device; otherwise fp32.
  const bool on_gpu = job.device.is_cuda();
  const std::optional<at::ScalarType> amp = parallel::autocast_dtype(dims, param_dtype_name, job.device);
  layout.activation_bytes = amp ? static_cast<int64_t>(c10::elementSize(*amp)) : param_bytes;
  layout.fused_kernels = args.fused_kernels;
  layout.fused_norm = args.fused_kernels && !on_gpu;
  layout.loss_kernel = args.fused_kernels && on_gpu;
  const std::vector<bool>& wrapped = o.ac.blocks;

  // Pipeline: the schedule's stages and micro-batches (the trainer's plan).
  std::vector<pp::LayerRange> stage_layers{{0, args.n_layers}};
  pp::ScheduleSpec spec;
  models::llama3::PipelinePlan plan;
  const int64_t micro_tokens = job.microbatch_sequences() * seq_len;
  if (pipelined) {
    plan = *o.pipeline;
    stage_layers = plan.layers;
    spec = plan.spec;
  }
  const double tokens = static_cast<double>(micro_tokens) / static_cast<double>(dims.cp);  // per rank

  const std::map<std::string, UnitBytes> units = unit_sizes(args, dims.tp, shards);
  e.parameters = models::llama3::count_parameters(args);
  e.param_dtype = models::llama3::config_dtype_name(o.param_storage_dtype);
  e.tokens_per_step = batches.global_batch * seq_len;
  e.flops_per_token = models::llama3::flops_per_token(args, seq_len);
  e.flops_per_step = e.flops_per_token * static_cast<double>(e.tokens_per_step);
  // Recompute: one more forward of each checkpointed block — its matmuls
  // (2 FLOPs per parameter per token) and attention's two products (4·H·Q
  // per token and position, torchtitan's convention) — or, per op, only
  // attention (the matmul outputs are kept).
  int64_t wrapped_count = 0;
  for (bool w : wrapped) wrapped_count += w ? 1 : 0;
  // Per block: all parameters but the embedding table, the LM head (its own
  // weight unless tied to the table) and the final norm.
  const int64_t table = models::llama3::count_embedding_parameters(args);
  const double block_params =
      static_cast<double>(models::llama3::count_parameters(args) - table - (args.tie_word_embeddings ? 0 : table) -
                          args.dim) /
      static_cast<double>(args.n_layers);
  const double attention_fwd = 4.0 * static_cast<double>(args.n_heads * args.head_dim() * seq_len);
  const double recompute_per_token = o.ac.policy.per_op() ? attention_fwd : 2.0 * block_params + attention_fwd;
  e.recompute_flops_per_step =
      recompute_per_token * static_cast<double>(wrapped_count) * static_cast<double>(e.tokens_per_step);

  const int num_stages = static_cast<int>(stage_layers.size());
  StepFacts facts;
  facts.fsdp = fsdp;
  facts.offload = offload;
  facts.on_gpu = on_gpu;
  facts.blocks_reshard = blocks_reshard;
  facts.reduce_per_microbatch = fsdp && pipelined && o.fsdp.reduce_scatter_per_microbatch;
  facts.accumulating = batches.accumulation_steps > 1;
  facts.early = job.step_in_backward;
  facts.ac_per_op = o.ac.policy.per_op();
  facts.storage_bytes = storage_bytes;
  facts.param_bytes = param_bytes;
  facts.reduce_bytes = reduce_bytes;
  // Weights already stored in the autocast dtype are used as they are.
  facts.amp_bytes = amp && static_cast<int64_t>(c10::elementSize(*amp)) != storage_bytes
                        ? static_cast<double>(c10::elementSize(*amp))
                        : 0.0;
  facts.tokens = tokens;
  facts.num_stages = num_stages;
  facts.block = block_activations(args, layout);
  facts.head = head_activations(args, layout);
  // Every rank's compute actions, made once (the zero-bubble lists come
  // from list scheduling over all ranks).
  const std::vector<pp::RankActions> actions = pipelined ? plan.actions() : std::vector<pp::RankActions>{};
  for (int pr = 0; pr < static_cast<int>(dims.pp); ++pr) {
    RankMemory r;
    r.pp_rank = pr;
    r.stages = pipelined ? spec.stages_of_rank(pr) : std::vector<int>{0};

    // Units this rank holds, in forward order, the root's share, and how
    // many micro-batches its schedule keeps.
    RankUnits u;
    u.stages = r.stages;
    if (pipelined) {
      u.in_flight = microbatches_in_flight(actions.at(static_cast<size_t>(pr)));
      u.awaiting_w = microbatches_awaiting_weight_step(actions.at(static_cast<size_t>(pr)));
    }
    bool has_first = false;
    for (int s : r.stages) {
      for (int64_t l = stage_layers[static_cast<size_t>(s)].begin; l < stage_layers[static_cast<size_t>(s)].end; ++l) {
        const std::string name = "layers." + std::to_string(l);
        u.blocks.push_back({name, units.at(name), static_cast<bool>(wrapped[static_cast<size_t>(l)]), s});
      }
      has_first = has_first || s == 0;
      u.has_last = u.has_last || s == num_stages - 1;
    }
    u.root = root_share(args, units.at("root"), dims.tp, shards, has_first, u.has_last);

    const int64_t shard_numel = shard_numel_of(u);
    r.parameters = offload ? 0 : storage_bytes * shard_numel;
    r.gradients = r.parameters;
    r.optimizer_state = 2 * r.parameters;
    r.ddp_buckets = ddp ? storage_bytes * shard_numel : 0;
    const double persistent = static_cast<double>(r.parameters + r.optimizer_state + r.ddp_buckets);

    const std::vector<Moment> moments =
        pipelined ? pipelined_moments(facts, u, r.microbatches_in_flight) : unpipelined_moments(facts, u);
    const Moment& top = *std::max_element(moments.begin(), moments.end(), [&](const Moment& a, const Moment& b) {
      return a.total(persistent) < b.total(persistent);
    });
    r.peak_phase = top.phase;
    r.activations = static_cast<int64_t>(top.activations);
    r.fsdp_gathered = static_cast<int64_t>(top.gathered);
    r.gradients_at_peak = static_cast<int64_t>(top.grads);
    r.transient = static_cast<int64_t>(top.transient);
    r.peak = static_cast<int64_t>(top.total(persistent));
    e.ranks.push_back(r);
  }

  // The layout line and what is left out.
  std::string l = dims.describe();
  l += fsdp ? ", FSDP " + param_dtype_name + " params" : (ddp ? ", DDP" : "");
  if (amp) l += ", autocast " + param_dtype_name;
  if (storage_bytes != 4) l += ", " + e.param_dtype + " weights and optimizer state";
  if (dims.tp > 1) l += layout.sequence_parallel ? ", TP+SP" : ", TP";
  if (pipelined) l += ", " + spec.describe() + (plan.schedule_csv.empty() ? "" : ", order from " + plan.schedule_csv);
  l += ", AC " + o.ac.policy.config_words();
  l += ", attention " + args.attn_type;
  l += titan::strprintf(", %lld x %lld tokens per micro-batch", static_cast<long long>(job.microbatch_sequences()),
                          static_cast<long long>(seq_len));
  e.layout = l;
  if (offload) e.notes.push_back("CPU offload: shards, gradients and optimizer state are in host memory, not counted");
  if (o.float8.enable)
    e.notes.push_back("float8 linears are counted as their param-dtype counterparts (their saved inputs are smaller)");
  if (dims.cp > 1) e.notes.push_back("context parallelism: the ring's K/V buffers are not counted");
  if (pipelined) e.notes.push_back("pipeline: in-flight micro-batches on top of every gradient (an upper bound)");
  if (job.step_in_backward)
    e.notes.push_back("optimizer step in backward: each gradient is freed once applied (grads@peak counts those "
                      "still waiting; the grads column is what the step would hold without it)");
  if (on_gpu)
    e.notes.push_back("not counted: CUDA context and workspaces, the caching allocator's fragmentation, communication buffers of NCCL");
  else
    e.notes.push_back("modelled as a CPU job, as it runs here (Gloo, titan's CPU kernels): --training.device cuda for a GPU "
                      "job's numbers");
  return e;
}

JobEstimate estimate_job(const config::JobConfig& cfg, int64_t world_size,
                         const std::optional<models::llama3::ModelArgs>& model_args) {
  // The device `titan train` would pick here: "auto" is a GPU when there is one.
  const bool on_gpu = cfg.training.device == "cuda" || (cfg.training.device == "auto" && at::hasCUDA());
  JobEstimate e = estimate_job(models::llama3::plan_layout(cfg, world_size, on_gpu ? c10::Device(c10::kCUDA)
                                                                                   : c10::Device(c10::kCPU),
                                                           model_args));
  e.flavor = model_args ? "custom" : cfg.model.flavor;
  return e;
}

config::JobConfig planned_for_gpus(config::JobConfig cfg) {
  if (cfg.training.device == "auto") cfg.training.device = "cuda";
  return cfg;
}

std::string format_estimate(const JobEstimate& e) {
  std::string s;
  s += titan::strprintf("model      llama3 %s: %s parameters, %lld layers, dim %lld, vocab %lld\n",
                          e.flavor.c_str(), metrics::with_thousands(static_cast<double>(e.parameters)).c_str(),
                          static_cast<long long>(e.args.n_layers), static_cast<long long>(e.args.dim),
                          static_cast<long long>(e.args.vocab_size));
  s += "layout     " + e.layout + "\n";
  s += titan::strprintf("%-9s %-10s %12s %12s %12s %12s %12s %12s %12s %12s  %s\n", "pp rank", "stages", "params",
                          "grads", "optimizer", "ddp buckets", "activations", "fsdp gather", "grads@peak",
                          "transient", "peak (phase)");
  for (const RankMemory& r : e.ranks) {
    std::string stages;
    for (int st : r.stages) stages += (stages.empty() ? "" : ",") + std::to_string(st);
    s += titan::strprintf("%-9d %-10s %12s %12s %12s %12s %12s %12s %12s %12s  %s (%s)\n", r.pp_rank, stages.c_str(),
                            gib(static_cast<double>(r.parameters)).c_str(), gib(static_cast<double>(r.gradients)).c_str(),
                            gib(static_cast<double>(r.optimizer_state)).c_str(),
                            gib(static_cast<double>(r.ddp_buckets)).c_str(),
                            gib(static_cast<double>(r.activations)).c_str(),
                            gib(static_cast<double>(r.fsdp_gathered)).c_str(),
                            gib(static_cast<double>(r.gradients_at_peak)).c_str(),
                            gib(static_cast<double>(r.transient)).c_str(), gib(static_cast<double>(r.peak)).c_str(),
                            r.peak_phase.c_str());
  }
  for (const std::string& n : e.notes) s += "note       " + n + "\n";
  const RankMemory& w = e.worst();
  // torchtitan's estimation.py lines (sizes in GiB, per rank where per rank).
  s += "Estimated model size: " + gib(static_cast<double>((e.param_dtype == "bfloat16" ? 2 : 4) * e.parameters)) +
       (e.param_dtype == "bfloat16" ? " (bf16, whole model)\n" : " (fp32, whole model)\n");
  s += "Estimated optimizer state size: " + gib(static_cast<double>(w.optimizer_state)) + " per rank\n";
  s += "Total estimated GPU memory: " + gib(static_cast<double>(w.peak)) + " per rank (peak, pp rank " +
       std::to_string(w.pp_rank) + ")\n";
  s += titan::strprintf("Estimated FLOP per step: %.3g (model FLOPs, whole job; %.3g per rank; AC recompute adds %.3g)\n",
                          e.flops_per_step, e.flops_per_step / static_cast<double>(e.dims.world_size),
                          e.recompute_flops_per_step);
  return s;
}

}  // namespace titan::estimate
