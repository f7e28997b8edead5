// The per-rank walk of memory_estimate.hpp: parameters from the model on
// the meta device, split as TP and FSDP split them; activations from
// activations.hpp; the peak as the largest of the step's moments.
#include "titan/estimate/memory_estimate.hpp"

#include <ATen/Context.h>

#include <algorithm>
#include <map>

#include <ATen/ATen.h>

#include "titan/config/validate.hpp"
#include "titan/estimate/activations.hpp"
#include "titan/metrics/format.hpp"
#include "titan/models/llama3/flops.hpp"
#include "titan/models/llama3/parallelize_options.hpp"
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

int64_t dtype_bytes(const std::string& name) { return name == "bfloat16" ? 2 : 4; }

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

// One FSDP unit's (or, without FSDP, one group's) sizes on this rank.
struct UnitBytes {
  int64_t shard_numel = 0;     // this rank's (padded) shard elements
  int64_t gathered_numel = 0;  // the unsharded, padded elements
  int64_t output_and_norm_numel = 0;  // root unit only: the parameters whose gradients come first
};

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
struct RootShare {
  int64_t shard_numel = 0, gathered_numel = 0, output_and_norm_numel = 0;
};

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

JobEstimate estimate_job(const config::JobConfig& cfg, int64_t world_size,
                         const std::optional<models::llama3::ModelArgs>& model_args) {
  JobEstimate e;
  e.flavor = model_args ? "custom" : cfg.model.flavor;
  e.args = model_args ? *model_args : models::llama3::flavor_args(cfg.model);
  e.args.max_seq_len = cfg.training.seq_len;
  ModelArgs& args = e.args;
  e.dims = parallel::ParallelDims::from_config(cfg, world_size);
  const parallel::ParallelDims& dims = e.dims;
  const config::BatchPlan batches = config::plan_batches(cfg, dims.dp_degree());
  // The layout checks of `titan train` (TP's head split, CP's sequence
  // split, the pipeline plan, what AC, float8 and the optimizer step in
  // backward rule out): a job the trainer would refuse is refused here too,
  // in the same line, rather than estimated.
  (void)models::llama3::parallelize_options(cfg, dims, args, batches.local_batch);

  const bool fsdp = dims.fsdp_enabled();
  const bool ddp = dims.dp_replicate > 1 && !fsdp;
  const int64_t shards = fsdp ? dims.dp_shard * dims.cp : 1;
  const bool pipelined = dims.pp > 1;
  const bool offload = fsdp && cfg.training.enable_cpu_offload;
  // Parameters, their gradients and Adam's two moments are stored in
  // [training] dtype; FSDP gathers in mixed_precision_param.
  const int64_t storage_bytes = dtype_bytes(cfg.training.dtype);
  const int64_t param_bytes = fsdp ? dtype_bytes(cfg.training.mixed_precision_param) : storage_bytes;
  const int64_t reduce_bytes = fsdp ? dtype_bytes(cfg.training.mixed_precision_reduce) : 4;
  const std::string& reshard = cfg.training.fsdp_reshard_after_forward;
  const bool blocks_reshard = reshard == "always" || (reshard == "default" && !pipelined);

  ActivationLayout layout;
  layout.tp = dims.tp;
  layout.sequence_parallel = dims.tp > 1 && cfg.training.enable_sequence_parallel;
  layout.loss_parallel = dims.tp > 1 && cfg.training.enable_loss_parallel;
  layout.attention = ops::parse_attention_backend(cfg.model.attn_type);
  // FSDP computes in param_dtype; without it one GPU and DDP autocast to it
  // (parallel/mixed_precision.hpp), on the device `titan train` would pick
  // here ("auto": a GPU when there is one); otherwise fp32.
  const bool on_gpu = cfg.training.device == "cuda" || (cfg.training.device == "auto" && at::hasCUDA());
  const std::optional<at::ScalarType> amp = parallel::autocast_dtype(
      dims, cfg.training.mixed_precision_param, on_gpu ? c10::Device(c10::kCUDA) : c10::Device(c10::kCPU));
  layout.activation_bytes = amp ? static_cast<int64_t>(c10::elementSize(*amp)) : param_bytes;
  layout.fused_kernels = cfg.model.fused_kernels;
  layout.fused_norm = cfg.model.fused_kernels && !on_gpu;
  layout.loss_kernel = cfg.model.fused_kernels && on_gpu;
  const BlockActivations block = block_activations(args, layout);
  const HeadActivations head = head_activations(args, layout);
  const AcChoice ac = ac_choice(cfg.activation_checkpoint.mode, cfg.activation_checkpoint.selective_ac_option,
                                args.n_layers);

  // Pipeline: the schedule's stages and micro-batches (the trainer's plan).
  std::vector<pp::LayerRange> stage_layers{{0, args.n_layers}};
  pp::ScheduleSpec spec;
  models::llama3::PipelinePlan plan;
  int64_t micro_tokens = batches.local_batch * cfg.training.seq_len;
  if (pipelined) {
    plan = models::llama3::plan_pipeline(cfg, args.n_layers, batches.local_batch);
    stage_layers = plan.layers;
    spec = plan.spec;
    micro_tokens = cfg.experimental.pipeline_parallel_microbatch_size * cfg.training.seq_len;
  }
  const double tokens = static_cast<double>(micro_tokens) / static_cast<double>(dims.cp);  // per rank

  const std::map<std::string, UnitBytes> units = unit_sizes(args, dims.tp, shards);
  e.parameters = models::llama3::count_parameters(args);
  e.param_dtype = cfg.training.dtype;
  e.tokens_per_step = batches.global_batch * cfg.training.seq_len;
  e.flops_per_token = models::llama3::flops_per_token(args, cfg.training.seq_len);
  e.flops_per_step = e.flops_per_token * static_cast<double>(e.tokens_per_step);
  // Recompute: one more forward of each checkpointed block — its matmuls
  // (2 FLOPs per parameter per token) and attention's two products (4·H·Q
  // per token and position, torchtitan's convention) — or, per op, only
  // attention (the matmul outputs are kept).
  int64_t wrapped_count = 0;
  for (bool w : ac.wrapped) wrapped_count += w ? 1 : 0;
  // Per block: all parameters but the embedding table, the LM head (its own
  // weight unless tied to the table) and the final norm.
  const int64_t table = models::llama3::count_embedding_parameters(args);
  const double block_params =
      static_cast<double>(models::llama3::count_parameters(args) - table - (args.tie_word_embeddings ? 0 : table) -
                          args.dim) /
      static_cast<double>(args.n_layers);
  const double attention_fwd = 4.0 * static_cast<double>(args.n_heads * args.head_dim() * cfg.training.seq_len);
  const double recompute_per_token = ac.per_op ? attention_fwd : 2.0 * block_params + attention_fwd;
  e.recompute_flops_per_step =
      recompute_per_token * static_cast<double>(wrapped_count) * static_cast<double>(e.tokens_per_step);

  const int num_stages = static_cast<int>(stage_layers.size());
  // Every rank's compute actions, made once (the zero-bubble lists come
  // from list scheduling over all ranks).
  const std::vector<pp::RankActions> actions = pipelined ? plan.actions() : std::vector<pp::RankActions>{};
  for (int pr = 0; pr < static_cast<int>(dims.pp); ++pr) {
    RankMemory r;
    r.pp_rank = pr;
    r.stages = pipelined ? spec.stages_of_rank(pr) : std::vector<int>{0};
    const std::map<int, int64_t> in_flight =
        pipelined ? microbatches_in_flight(actions.at(static_cast<size_t>(pr))) : std::map<int, int64_t>{{0, 1}};
    const std::map<int, int64_t> awaiting_w =
        pipelined ? microbatches_awaiting_weight_step(actions.at(static_cast<size_t>(pr))) : std::map<int, int64_t>{};

    // Units this rank holds, in forward order, and the root's share.
    struct Block {
      std::string name;
      UnitBytes unit;
      bool wrapped = false;
      int stage = 0;
    };
    std::vector<Block> blocks;
    RootShare root;
    bool has_first = false, has_last = false;
    for (int s : r.stages) {
      for (int64_t l = stage_layers[static_cast<size_t>(s)].begin; l < stage_layers[static_cast<size_t>(s)].end; ++l) {
        const std::string name = "layers." + std::to_string(l);
        blocks.push_back({name, units.at(name), static_cast<bool>(ac.wrapped[static_cast<size_t>(l)]), s});
      }
      has_first = has_first || s == 0;
      has_last = has_last || s == num_stages - 1;
    }
    const RootShare share = root_share(args, units.at("root"), dims.tp, shards, has_first, has_last);
    root = share;

    int64_t shard_numel = root.shard_numel;
    for (const Block& b : blocks) shard_numel += b.unit.shard_numel;
    r.parameters = offload ? 0 : storage_bytes * shard_numel;
    r.gradients = r.parameters;
    r.optimizer_state = 2 * r.parameters;
    r.ddp_buckets = ddp ? storage_bytes * shard_numel : 0;
    const double persistent = static_cast<double>(r.parameters + r.optimizer_state + r.ddp_buckets);

    // Activation bytes of each block for this rank's micro-batch.
    auto kept = [&](const Block& b) {
      const double per_token = !b.wrapped ? block.saved : (ac.per_op ? block.kept_op : block.kept_full);
      return per_token * tokens;
    };
    const double saved_block = block.saved * tokens;
    const double head_in = head.stage_input * tokens;  // every stage keeps its input
    const double head_saved = has_last ? head.saved * tokens : 0.0;
    const double head_transient = has_last ? head.transient * tokens : 0.0;
    const double flow = block.grad_transient * tokens;

    auto gathered = [&](const Block& b) { return fsdp ? static_cast<double>(param_bytes * b.unit.gathered_numel) : 0.0; };
    // Under autocast each matmul's weight is cast to the compute dtype and
    // autograd keeps the cast until that matmul's backward: a block's casts
    // live from its forward to its backward (a checkpointed block's only
    // during its recompute), the LM head's until the loss's backward. The
    // embedding is not cast (a lookup).
    // Weights already stored in the autocast dtype are used as they are.
    const double amp_bytes =
        amp && static_cast<int64_t>(c10::elementSize(*amp)) != storage_bytes ? static_cast<double>(c10::elementSize(*amp)) : 0.0;
    auto cast = [&](const Block& b) { return amp_bytes * static_cast<double>(b.unit.gathered_numel); };
    const double head_cast = has_last ? amp_bytes * static_cast<double>(root.output_and_norm_numel) : 0.0;
    const double root_gathered = fsdp ? static_cast<double>(param_bytes * root.gathered_numel) : 0.0;
    auto local_grads = [&](const Block& b) {
      return offload ? 0.0 : static_cast<double>(storage_bytes * b.unit.shard_numel);
    };
    // Gradients of the norm and LM head come first in backward; under FSDP
    // the root unit holds them unsharded until the embedding's arrives.
    const double head_grads = fsdp ? static_cast<double>(param_bytes * root.output_and_norm_numel)
                                   : static_cast<double>(storage_bytes * root.output_and_norm_numel);
    const double all_grads = static_cast<double>(r.gradients);

    struct Moment {
      std::string phase;
      double activations = 0, gathered = 0, grads = 0, transient = 0;
      double total(double p) const { return p + activations + gathered + grads + transient; }
    };
    std::vector<Moment> moments;

    if (pipelined) {
      // Several micro-batches in flight per stage, after the first backward.
      // Under FSDP each unit sums its micro-batches' gradients unsharded, in
      // reduce dtype, until the step's last backward reduce-scatters them
      // (the shards' own gradients come only then, after the peak), unless
      // fsdp_reduce_scatter_per_microbatch reduces each backward's; without
      // FSDP every gradient is in .grad already.
      double per_mb_all = 0;
      Moment m;
      m.phase = "steady state";
      for (int s : r.stages) {
        double per_mb = head_in;
        for (const Block& b : blocks)
          if (b.stage == s) per_mb += kept(b);
        const int64_t n = in_flight.count(s) ? in_flight.at(s) : 1;
        r.microbatches_in_flight = std::max(r.microbatches_in_flight, n);
        m.activations += per_mb * static_cast<double>(n);
        per_mb_all = std::max(per_mb_all, per_mb);
        // Zero bubble: what each micro-batch's I left for its W.
        if (awaiting_w.count(s)) {
          double kept_for_w = s == num_stages - 1 ? head.weight_step_gradients * tokens : 0.0;
          for (const Block& b : blocks)
            if (b.stage == s) kept_for_w += block.weight_step_gradients * tokens;
          m.activations += kept_for_w * static_cast<double>(awaiting_w.at(s));
        }
      }
      m.activations += head_saved;
      // The largest block unit: what one gather holds, and its shard.
      int64_t largest_numel = 0, largest_shard_numel = 0;
      for (const Block& b : blocks) {
        largest_numel = std::max(largest_numel, b.unit.gathered_numel);
        largest_shard_numel = std::max(largest_shard_numel, b.unit.shard_numel);
      }
      // A unit's reduce-scatter in a backward: its unsharded gradients (in
      // the compute dtype), staged in reduce dtype with its output shard;
      // Gloo reduces a copy of the input as well.
      const double largest_unit = static_cast<double>(std::max(root.gathered_numel, largest_numel));
      const double reduction = static_cast<double>(param_bytes) * largest_unit +
                               static_cast<double>(reduce_bytes) *
                                   (largest_unit * (on_gpu ? 1 : 2) + static_cast<double>(largest_shard_numel));
      if (fsdp && cfg.training.fsdp_reduce_scatter_per_microbatch) {
        // Every backward reduce-scatters into the shards' gradients: no
        // unsharded sums, a reduction in flight at any backward.
        m.grads = all_grads;
        m.transient += reduction;
      } else if (fsdp) {
        m.grads = static_cast<double>(reduce_bytes * root.gathered_numel);
        for (const Block& b : blocks) m.grads += static_cast<double>(reduce_bytes * b.unit.gathered_numel);
      } else {
        m.grads = all_grads;
      }
      m.gathered = root_gathered;
      if (!blocks_reshard) {
        // Every block gathered from the first forward to the last backward.
        for (const Block& b : blocks) m.gathered += gathered(b);
        m.transient += std::max(head_transient, saved_block + flow);
        moments.push_back(m);
      } else {
        // "always": a forward frees its block's weights, so a backward that
        // starts on the in-flight micro-batches gathers them again, one
        // block ahead (its own and the prefetched one, each with the
        // gather's output buffer and send buffer).
        const double largest = fsdp ? static_cast<double>(param_bytes * largest_numel) : 0.0;  // as gathered(b)
        m.gathered += 2 * largest;
        m.transient += std::max(head_transient, saved_block + flow) + largest +
                       static_cast<double>(param_bytes * largest_shard_numel);
        moments.push_back(m);
        // A backward without gradient sync keeps the weights it gathered
        // (torch's pipelining drives FSDP2 so): at its end every block is
        // gathered again, one micro-batch fewer in flight. One that
        // reduce-scatters frees each block's as it finishes it: only the
        // steady state's two remain.
        if (!(fsdp && cfg.training.fsdp_reduce_scatter_per_microbatch)) {
          Moment end = m;
          end.phase = "end of a micro-batch's backward";
          end.activations = m.activations - per_mb_all;
          end.gathered = root_gathered;
          for (const Block& b : blocks) end.gathered += gathered(b);
          end.transient = flow;
          moments.push_back(end);
        }
      }
      if (fsdp && !cfg.training.fsdp_reduce_scatter_per_microbatch) {
        // The step's last backward (with gradient sync), on one micro-batch:
        // each unit hands its summed gradients, plus this backward's, to
        // its reduce-scatter while the units before it still hold theirs.
        Moment last = m;
        last.phase = "the step's last backward";
        last.activations = per_mb_all + head_saved;
        last.transient = flow + reduction;
        if (!blocks_reshard) last.gathered = moments.front().gathered;
        moments.push_back(last);
      }
    } else {
      // Gradient accumulation: the micro-steps after the first start with
      // every gradient already there.
      const bool accumulating = batches.accumulation_steps > 1;
      // [optimizer] early_step_in_backward (refused with PP and DDP): in the
      // step's last backward each gradient is applied and freed once final
      // (a plain parameter's at once; an FSDP shard's when its reduction is
      // waited, at the next unit's issue). Without accumulation a finished
      // block leaves no gradient behind; with it, the accumulated ones go
      // as their blocks finish.
      const bool early = cfg.optimizer.early_step_in_backward;
      const double head_stored = offload ? 0.0 : static_cast<double>(storage_bytes * root.output_and_norm_numel);
      const double root_shard_grads = offload ? 0.0 : static_cast<double>(storage_bytes * root.shard_numel);
      // 1. Start of backward.
      Moment start;
      start.phase = "start of backward";
      start.activations = head_in + head_saved;
      for (const Block& b : blocks) start.activations += kept(b);
      start.gathered = root_gathered + head_cast;
      for (const Block& b : blocks) start.gathered += blocks_reshard && &b != &blocks.back() ? 0.0 : gathered(b);
      for (const Block& b : blocks) start.gathered += b.wrapped ? 0.0 : cast(b);
      start.grads = accumulating ? all_grads : 0.0;
      start.transient = head_transient;
      moments.push_back(start);
      // 2. Backward of each block, last to first.
      for (size_t i = blocks.size(); i-- > 0;) {
        Moment m;
        m.phase = "backward of " + blocks[i].name;
        m.activations = head_in;
        for (size_t j = 0; j < i; ++j) m.activations += kept(blocks[j]);
        // Its own saved set: kept from forward, or rebuilt by the recompute
        // (per-op SAC rebuilds it around the matmul outputs it kept).
        m.activations += saved_block;
        double done = head_grads;
        for (size_t j = i + 1; j < blocks.size(); ++j) done += local_grads(blocks[j]);
        // Its own parameters' gradients, made during this backward: in .grad
        // at once without FSDP; under FSDP unsharded, in the compute dtype,
        // until the end of the block stages them for the reduce-scatter.
        if (!fsdp) done += local_grads(blocks[i]);
        m.grads = accumulating ? all_grads + (fsdp ? head_grads : 0.0) : done;
        if (early) {
          // Applied already: the blocks after i (under FSDP all but the one
          // whose reduction is still in flight) and, without FSDP, the
          // head's and this block's own.
          double applied = fsdp ? 0.0 : head_stored + local_grads(blocks[i]);
          for (size_t j = i + (fsdp ? 2 : 1); j < blocks.size(); ++j) applied += local_grads(blocks[j]);
          m.grads = accumulating ? all_grads + (fsdp ? head_grads : 0.0) - applied : (fsdp ? head_grads : 0.0);
        }
        m.gathered = root_gathered + gathered(blocks[i]) + cast(blocks[i]);
        for (size_t j = 0; j < i; ++j) m.gathered += blocks[j].wrapped ? 0.0 : cast(blocks[j]);
        m.transient = flow;
        if (fsdp) m.transient += static_cast<double>(param_bytes * blocks[i].unit.gathered_numel);
        // The next block to run backward was freed after forward (or only
        // ran its checkpointed first pass) and is prefetched now: its
        // weights, and its shard's send buffer until the gather is waited.
        if (fsdp && blocks_reshard && i > 0) {
          m.gathered += gathered(blocks[i - 1]);
          m.transient += static_cast<double>(param_bytes * blocks[i - 1].unit.shard_numel);
        }
        // The block after it (done just before) is still reduce-scattering
        // (with activation checkpointing too: its reduction overlaps this
        // block's recompute and backward): its staged input and its output.
        // Gloo (CPU) reduces a copy of the input as well; NCCL does not.
        if (fsdp && i + 1 < blocks.size()) {
          const UnitBytes& after = blocks[i + 1].unit;
          m.transient += static_cast<double>(reduce_bytes * (after.gathered_numel + after.shard_numel));
          if (!on_gpu) m.transient += static_cast<double>(reduce_bytes * after.gathered_numel);
        }
        moments.push_back(m);
      }
      // 3. End of backward: every gradient, the root's reduction in flight.
      Moment end;
      end.phase = "end of backward";
      end.grads = all_grads + (fsdp ? head_grads : 0.0);
      // With the step in backward only what waits for the root's reduction
      // is left: its unsharded gradients and, accumulated, its shard's and
      // the first block's.
      if (early) {
        const double accumulated_waiting =
            accumulating ? root_shard_grads + (blocks.empty() ? 0.0 : local_grads(blocks.front())) : 0.0;
        end.grads = fsdp ? head_grads + accumulated_waiting : 0.0;
      }
      end.gathered = root_gathered;
      if (fsdp) end.transient = static_cast<double>(reduce_bytes * root.gathered_numel);
      moments.push_back(end);
    }

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
  l += fsdp ? ", FSDP " + cfg.training.mixed_precision_param + " params" : (ddp ? ", DDP" : "");
  if (amp) l += ", autocast " + cfg.training.mixed_precision_param;
  if (storage_bytes != 4) l += ", " + cfg.training.dtype + " weights and optimizer state";
  if (dims.tp > 1) l += layout.sequence_parallel ? ", TP+SP" : ", TP";
  if (pipelined) l += ", " + spec.describe() + (plan.schedule_csv.empty() ? "" : ", order from " + plan.schedule_csv);
  l += ", AC " + cfg.activation_checkpoint.mode;
  if (cfg.activation_checkpoint.mode == "selective") l += " (" + cfg.activation_checkpoint.selective_ac_option + ")";
  l += ", attention " + cfg.model.attn_type;
  l += titan::strprintf(", %lld x %lld tokens per micro-batch", static_cast<long long>(pipelined ? cfg.experimental.pipeline_parallel_microbatch_size : batches.local_batch),
                          static_cast<long long>(cfg.training.seq_len));
  e.layout = l;
  if (offload) e.notes.push_back("CPU offload: shards, gradients and optimizer state are in host memory, not counted");
  if (cfg.float8.enable_float8_linear)
    e.notes.push_back("float8 linears are counted as their param-dtype counterparts (their saved inputs are smaller)");
  if (dims.cp > 1) e.notes.push_back("context parallelism: the ring's K/V buffers are not counted");
  if (pipelined) e.notes.push_back("pipeline: in-flight micro-batches on top of every gradient (an upper bound)");
  if (cfg.optimizer.early_step_in_backward)
    e.notes.push_back("optimizer step in backward: each gradient is freed once applied (grads@peak counts those "
                      "still waiting; the grads column is what the step would hold without it)");
  if (on_gpu)
    e.notes.push_back("not counted: CUDA context and workspaces, the caching allocator's fragmentation, communication buffers of NCCL");
  else
    e.notes.push_back("modelled as a CPU job, as it runs here (Gloo, titan's CPU kernels): --training.device cuda for a GPU "
                      "job's numbers");
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
  s += "Estimated model size: " + gib(static_cast<double>(dtype_bytes(e.param_dtype) * e.parameters)) +
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
