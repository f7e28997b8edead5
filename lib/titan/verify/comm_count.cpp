#include "titan/verify/comm_count.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "titan/metrics/format.hpp"
#include "titan/models/llama3/job_layout.hpp"
#include "titan/models/llama3/pipeline.hpp"
#include "titan/parallel/data_parallel.hpp"
#include "titan/parallel/parallel_dims.hpp"
#include "titan/util/error.hpp"
#include "titan/util/strprintf.hpp"

namespace titan::verify {
namespace {

constexpr double kFloat = 4;  // bytes of an fp32 element
constexpr double kLong = 8;   // bytes of a double or int64 scalar

// Accumulates a step's expected traffic on rank 0.
class Count {
 public:
  void add(const std::string& group, CommKind kind, int64_t ops, double bytes_each) {
    if (ops == 0) return;
    CommVolume& v = comm_[group][kind];
    v.ops += ops;
    v.bytes += static_cast<double>(ops) * bytes_each;
  }
  // `ops` collectives of payload S over n ranks, at their wire volumes.
  void all_gather(const std::string& g, int64_t ops, double S, int n) {
    add(g, CommKind::AllGather, ops, dist::all_gather_bytes(S, n));
  }
  void reduce_scatter(const std::string& g, int64_t ops, double S, int n) {
    add(g, CommKind::ReduceScatter, ops, dist::reduce_scatter_bytes(S, n));
  }
  void all_reduce(const std::string& g, int64_t ops, double S, int n) {
    add(g, CommKind::AllReduce, ops, dist::ring_all_reduce_bytes(S, n));
  }
  // Sends carry their bytes; receives are ops that send nothing.
  void sends(const std::string& g, int64_t ops, double S) { add(g, CommKind::PointToPoint, ops, S); }
  void receives(const std::string& g, int64_t ops) { add(g, CommKind::PointToPoint, ops, 0); }
  void broadcast(const std::string& g, int64_t ops, double S, int n) {
    add(g, CommKind::Broadcast, ops, dist::analytic_bytes(dist::CommOp::Broadcast, S, n));
  }
  StepComm take() { return std::move(comm_); }

 private:
  StepComm comm_;
};

// Bytes per element of each kind of traffic.
struct WireSizes {
  double param = kFloat;       // FSDP's all-gathered weights
  double reduce = kFloat;      // gradients reduce-scattered or all-reduced
  double activation = kFloat;  // TP, CP and PP traffic: what the blocks compute in
};

// Elements of a [rows, cols] weight as FSDP gathers it over n shards: the
// rows padded up to a multiple of n.
double padded(int64_t rows, int64_t cols, int64_t n) {
  return static_cast<double>((rows + n - 1) / n * n * cols);
}

// The layout's facts the count needs, from the config and the mesh.
struct Layout {
  int64_t dp_replicate, fsdp_n, tp, cp, pp;
  std::string fsdp_group, loss_group;
  bool fsdp, ddp, sp, loss_parallel;
};

Layout layout_of(const models::llama3::JobLayout& job) {
  const parallel::ParallelDims& d = job.dims;
  Layout l{};
  l.dp_replicate = d.dp_replicate, l.tp = d.tp, l.cp = d.cp, l.pp = d.pp;
  l.fsdp = d.fsdp_enabled();
  l.ddp = d.ddp_enabled();
  l.fsdp_n = d.dp_shard * d.cp;
  l.fsdp_group = !d.cp_enabled() ? "dp_shard" : (d.dp_shard_enabled() ? "dp_shard_cp" : "cp");
  const std::string dp = d.dp_mesh_name();
  l.loss_group = !d.cp_enabled() ? dp : (d.dp_degree() > 1 ? "dp_cp" : "cp");
  l.sp = d.tp_enabled() && job.parallelize.tp.sequence_parallel;
  l.loss_parallel = d.tp_enabled() && job.parallelize.tp.loss_parallel;
  return l;
}

// What one rank's pipeline stage (or the whole model) holds.
struct StagePart {
  int64_t first_block = 0, blocks = 0;
  bool has_embedding = true, has_output = true;  // the first / last stage
  int stage = 0;                                 // its global stage index under PP
};

// The [rows, cols] of each weight of one block on this rank, in the order
// the model registers them (TP-local shapes: wq, wk, wv, w1, w3 split on
// their rows, wo and w2 on their columns, the two norms whole).
std::vector<std::pair<int64_t, int64_t>> block_weight_shapes(const models::llama3::ModelArgs& a, int64_t tp) {
  const int64_t q = a.n_heads * a.head_dim() / tp, kv = a.kv_heads() * a.head_dim() / tp, f = a.ffn_hidden_dim() / tp;
  return {{q, a.dim}, {kv, a.dim}, {kv, a.dim}, {a.dim, q}, {f, a.dim}, {a.dim, f}, {f, a.dim}, {a.dim, 1}, {a.dim, 1}};
}

// The same for a stage's root: the embedding (first stage), the final norm
// and the output (last stage; none of its own when it is the embedding's,
// tied, in the same part).
std::vector<std::pair<int64_t, int64_t>> root_weight_shapes(const models::llama3::ModelArgs& a, int64_t tp,
                                                            const StagePart& s) {
  std::vector<std::pair<int64_t, int64_t>> out;
  if (s.has_embedding) out.push_back({a.vocab_size / tp, a.dim});
  if (s.has_output) {
    out.push_back({a.dim, 1});
    if (!(a.tie_word_embeddings && s.has_embedding)) out.push_back({a.vocab_size / tp, a.dim});
  }
  return out;
}

// Bytes of weights as one FSDP unit of n ranks gathers them (each padded
// on dim 0 to a multiple of n).
double unit_elements(const std::vector<std::pair<int64_t, int64_t>>& shapes, int64_t n) {
  double e = 0;
  for (const auto& [rows, cols] : shapes) e += padded(rows, cols, n);
  return e;
}

double block_unit_elements(const models::llama3::ModelArgs& a, const Layout& l) {
  return unit_elements(block_weight_shapes(a, l.tp), l.fsdp_n);
}

double root_unit_elements(const models::llama3::ModelArgs& a, const Layout& l, const StagePart& s) {
  return unit_elements(root_weight_shapes(a, l.tp, s), l.fsdp_n);
}

// The bytes of every parameter of a stage part, in the order the model
// registers them (root's embedding, the blocks, root's norm and output):
// DDP buckets them in reverse of it.
std::vector<int64_t> stage_param_bytes_in_order(const models::llama3::ModelArgs& a, const Layout& l,
                                                const StagePart& s, double element_size) {
  std::vector<int64_t> out;
  auto add = [&](int64_t rows, int64_t cols) {
    out.push_back(static_cast<int64_t>(static_cast<double>(rows * cols) * element_size));
  };
  const auto root = root_weight_shapes(a, l.tp, s);
  const size_t before_blocks = s.has_embedding ? 1 : 0;
  for (size_t k = 0; k < before_blocks; ++k) add(root[k].first, root[k].second);
  const auto block = block_weight_shapes(a, l.tp);
  for (int64_t b = 0; b < s.blocks; ++b)
    for (const auto& [rows, cols] : block) add(rows, cols);
  for (size_t k = before_blocks; k < root.size(); ++k) add(root[k].first, root[k].second);
  return out;
}

}  // namespace

const char* comm_kind_name(CommKind kind) {
  switch (kind) {
    case CommKind::AllGather: return "all_gather";
    case CommKind::ReduceScatter: return "reduce_scatter";
    case CommKind::AllReduce: return "all_reduce";
    case CommKind::PointToPoint: return "send/recv";
    case CommKind::Broadcast: return "broadcast";
    case CommKind::Other: return "other";
  }
  return "other";
}

StepComm measured_step_comm(int64_t step) {
  StepComm out;
  for (const dist::CommRecord& r : dist::CommLog::instance().records_of_step(step)) {
    CommKind k = CommKind::Other;
    switch (r.op) {
      case dist::CommOp::AllGather: k = CommKind::AllGather; break;
      case dist::CommOp::ReduceScatter: k = CommKind::ReduceScatter; break;
      case dist::CommOp::AllReduce: k = CommKind::AllReduce; break;
      case dist::CommOp::Send:
      case dist::CommOp::Recv: k = CommKind::PointToPoint; break;
      case dist::CommOp::Broadcast: k = CommKind::Broadcast; break;
      default: break;
    }
    CommVolume& v = out[r.group][k];
    v.ops += 1;
    v.bytes += static_cast<double>(r.wire_bytes);
  }
  return out;
}

namespace {

// All-gathers of one FSDP unit of `stage` in one schedule step (fsdp/hooks.cpp):
// the unit gathers at a forward or a backward that finds its weights freed.
// With `reshard_after_forward` ("always", block units only) a forward frees
// them again unless a backward of the unit has begun and not finished (a
// zero-bubble I before its W). A backward without gradient sync keeps them
// for the next micro-batch; with sync (`sync_every_backward`) it frees them
// once no other micro-batch's graph holds them, or under
// `reshard_after_forward` unless a backward of the unit has begun. The first
// stage's I does nothing and its W is the whole backward
// (pp::Action::computes).
//
// A `checkpointed` block (activation checkpointing) runs its forward
// without autograd. Without `reshard_after_forward` it keeps the weights
// for its recompute (a pending recompute holds them as a graph would);
// with it no graph holds them, so the forward frees them unless the step's
// unsynced gradient sums are there (a backward of this step has run
// without sync, and the next micro-batch reuses the weights) or a
// recompute's graph is still waiting for its W. Its backward recomputes
// the forward, gathering what it finds freed, and that graph is in flight
// until the backward's weight half.
int64_t gathers_of_stage_unit(const pp::RankActions& actions, int stage, bool reshard_after_forward,
                              bool sync_every_backward, bool checkpointed) {
  bool gathered = false, unsynced = false;
  int begun = 0, in_flight = 0, recomputes_pending = 0;
  int64_t gathers = 0;
  auto gather = [&] {
    if (!gathered) ++gathers, gathered = true;
  };
  auto backward_done = [&] {
    --in_flight;
    if (!sync_every_backward) {
      unsynced = true;
      return;
    }
    if ((in_flight == 0 && recomputes_pending == 0) || (reshard_after_forward && begun == 0)) gathered = false;
  };
  auto recompute = [&] {
    gather();
    recomputes_pending = std::max(0, recomputes_pending - 1);
    ++in_flight;  // the recompute's graph
  };
  for (const pp::Action& a : actions) {
    if (a.stage != stage || !a.computes()) continue;
    switch (*a.computes()) {
      case pp::ActionType::Forward:
        gather();
        if (checkpointed) {
          if (!reshard_after_forward) ++recomputes_pending;
          else if (in_flight == 0 && !unsynced) gathered = false;
        } else {
          ++in_flight;
          if (reshard_after_forward && begun == 0) gathered = false;
        }
        break;
      case pp::ActionType::Backward:
        if (checkpointed) recompute();
        else gather();
        backward_done();
        break;
      case pp::ActionType::BackwardInput:
        if (checkpointed) recompute();
        else gather();
        ++begun;
        break;
      case pp::ActionType::BackwardWeight:
        begun = std::max(0, begun - 1);
        backward_done();
        break;
      default: break;
    }
  }
  return gathers;
}

// The weight-gradient halves (W) `stage` runs on its own in one schedule
// step: a zero-bubble schedule's, except the first stage's, whose W is its
// whole backward (pp::Action::computes).
int64_t weight_steps_of_stage(const pp::RankActions& actions, int stage) {
  int64_t n = 0;
  for (const pp::Action& a : actions)
    if (a.stage == stage && a.computes() == pp::ActionType::BackwardWeight) ++n;
  return n;
}

}  // namespace

ExpectedComm expected_step_comm(const models::llama3::JobLayout& job, bool first_step, const CountOptions& options) {
  const parallel::ParallelDims& dims = job.dims;
  const models::llama3::ModelArgs& args = job.args;
  const models::llama3::ParallelizeOptions& o = job.parallelize;
  ExpectedComm out;
  auto refuse = [&](const std::string& why) {
    out.not_modelled_because = why;
    return out;
  };
  WireSizes wire;
  if (!options.layout_dtypes) {
    if (o.float8.enable) return refuse("float8 linears");
    if (o.fsdp.param_dtype != at::kFloat || o.fsdp.reduce_dtype != at::kFloat) return refuse("mixed precision");
    if (o.param_storage_dtype != at::kFloat) return refuse("bf16 parameters ([training] dtype)");
  } else {
    // FSDP computes in its param dtype; without FSDP autocast keeps the
    // residual stream (and so TP's, CP's and PP's traffic) in the stored dtype.
    const double stored = static_cast<double>(c10::elementSize(o.param_storage_dtype));
    const bool fsdp = dims.fsdp_enabled();
    wire.param = fsdp && o.float8.fsdp_float8_all_gather ? 1.0 : static_cast<double>(c10::elementSize(o.fsdp.param_dtype));
    wire.reduce = fsdp ? static_cast<double>(c10::elementSize(o.fsdp.reduce_dtype)) : stored;
    wire.activation = fsdp ? static_cast<double>(c10::elementSize(o.fsdp.param_dtype)) : stored;
  }
  const int me = options.pp_rank;
  TITAN_CHECK(me >= 0 && me < dims.pp, "expected_step_comm: pipeline rank ", me, " outside [0, ", dims.pp, ")");
  const std::vector<bool>& recomputed = o.ac.blocks;
  const bool op_ac = o.ac.policy.per_op();
  // Per-op AC keeps every block matmul's output unless the config forces
  // some to be recomputed (matched by weight shape): those recompute their
  // GEMMs and collectives, which the count does not follow.
  if (op_ac)
    for (const std::string& fqn : o.ac.force_recompute_mm_shapes_by_fqns)
      for (const char* linear : {"attention.wq", "attention.wk", "attention.wv", "attention.wo", "feed_forward.w1",
                                 "feed_forward.w2", "feed_forward.w3"})
        for (int64_t b = 0; b < args.n_layers; ++b)
          if (("layers." + std::to_string(b) + "." + linear).find(fqn) != std::string::npos)
            return refuse("per-op AC forcing block matmuls to recompute");

  const Layout l = layout_of(job);
  const config::BatchPlan& batches = job.batches;
  const int64_t T = o.seq_len / l.cp;  // this rank's tokens per sequence

  // The step as micro-batches and stages: without PP the accumulation
  // steps, each of batch_size sequences, through the whole model; with PP
  // a schedule step per accumulation step, each of m micro-batches, through
  // this rank's stages.
  int64_t schedule_steps = 1, micro_batches = batches.accumulation_steps, seqs = batches.local_batch;
  std::vector<StagePart> parts;
  std::vector<int> stage_ids;
  models::llama3::PipelinePlan plan;
  if (job.pipelined()) {
    plan = *o.pipeline;
    schedule_steps = batches.accumulation_steps;
    micro_batches = plan.spec.microbatches;
    seqs = job.microbatch_sequences();
    stage_ids = plan.spec.stages_of_rank(me);
    for (int s : stage_ids) {
      const pp::LayerRange r = plan.layers[static_cast<size_t>(s)];
      parts.push_back({r.begin, r.size(), s == 0, s + 1 == plan.spec.num_stages(), s});
    }
  } else {
    parts.push_back({0, args.n_layers, true, true});
  }
  const int64_t M = schedule_steps * micro_batches;  // micro-batches through each stage per step
  // Under PP, this rank's actions (the zero-bubble lists come from list
  // scheduling over all ranks: made once).
  const pp::RankActions rank_actions =
      dims.pp_enabled() ? plan.actions()[static_cast<size_t>(me)] : pp::RankActions{};
  Count c;

  // FSDP / HSDP / DDP.
  if (l.fsdp) {
    const int n = static_cast<int>(l.fsdp_n);
    const double block = block_unit_elements(args, l);
    // Under PP, whether every micro-batch's backward reduce-scatters or
    // only the step's last.
    const bool sync_every_backward = dims.pp_enabled() && o.fsdp.reduce_scatter_per_microbatch;
    for (const StagePart& s : parts) {
      const double root = root_unit_elements(args, l, s);
      // Under PP a unit's gathers per schedule step: with "default" and
      // "never" and no sync before the last backward, one (the weights stay
      // over the micro-batches). The root never reshards after forward.
      const auto pp_gathers = [&](bool reshard, bool checkpointed) -> int64_t {
        return dims.pp_enabled()
                   ? gathers_of_stage_unit(rank_actions, s.stage, reshard, sync_every_backward, checkpointed)
                   : 0;
      };
      // (A stage's last block is not the model's: the rule is the same for all.)
      const bool blocks_reshard = o.fsdp.block_reshards_after_forward(/*last_block=*/false, /*pipelined=*/true);
      const int64_t pp_block_gathers = pp_gathers(blocks_reshard, false);
      const int64_t pp_recomputed_block_gathers = pp_gathers(blocks_reshard, true);
      const int64_t pp_root_gathers = pp_gathers(false, false);
      int64_t block_gathers = 0;
      for (int64_t b = s.first_block; b < s.first_block + s.blocks; ++b) {
        if (dims.pp_enabled()) {
          block_gathers +=
              schedule_steps * (recomputed[static_cast<size_t>(b)] ? pp_recomputed_block_gathers : pp_block_gathers);
        } else {
          // A checkpointed block's first pass frees its weights only
          // where a forward would (its recompute gathers them again).
          const bool freed = o.fsdp.block_reshards_after_forward(/*last_block=*/b + 1 == args.n_layers, false);
          block_gathers += M * (freed ? 2 : 1);
        }
      }
      // A middle stage's root holds no weights: nothing to gather.
      const int64_t roots = root > 0 ? 1 : 0;
      const int64_t root_gathers = roots * (dims.pp_enabled() ? schedule_steps * pp_root_gathers : M);
      const int64_t scatters = dims.pp_enabled() && !sync_every_backward ? schedule_steps : M;  // per unit
      const std::string fsdp = options.fsdp_apart ? "fsdp:" + l.fsdp_group : l.fsdp_group;
      c.all_gather(fsdp, block_gathers, block * wire.param, n);
      c.all_gather(fsdp, root_gathers, root * wire.param, n);
      c.reduce_scatter(fsdp, scatters * s.blocks, block * wire.reduce, n);
      c.reduce_scatter(fsdp, scatters * roots, root * wire.reduce, n);
      if (l.dp_replicate > 1) {
        const int r = static_cast<int>(l.dp_replicate);
        c.all_reduce("dp_replicate", scatters * s.blocks, block * wire.reduce / n, r);
        c.all_reduce("dp_replicate", scatters * roots, root * wire.reduce / n, r);
      }
    }
  } else if (l.ddp) {
    // One all-reduce per bucket (replicate(): at most 25 MiB each) and
    // accumulation step, once per step without PP (no_sync until the last
    // micro-batch), and once per schedule step under PP, where every
    // stage part has its own buckets and syncs at its last micro-batch.
    const int64_t cap = static_cast<int64_t>(parallel::ReplicateOptions{}.bucket_cap_mb * 1024 * 1024);
    for (const StagePart& s : parts) {
      const std::vector<int64_t> bytes = stage_param_bytes_in_order(args, l, s, wire.reduce);
      for (const std::vector<size_t>& bucket : parallel::plan_buckets(bytes, std::vector<int64_t>(bytes.size(), 0), cap)) {
        double payload = 0;
        for (size_t k : bucket) payload += static_cast<double>(bytes[k]);
        c.all_reduce("dp_replicate", schedule_steps, payload, static_cast<int>(l.dp_replicate));
      }
    }
  }

  // TP, per micro-batch.
  if (dims.tp_enabled()) {
    const int n = static_cast<int>(l.tp);
    const double A = static_cast<double>(seqs * T * args.dim) * wire.activation;
    const double tokens = static_cast<double>(seqs * T);
    for (const StagePart& s : parts) {
      int64_t again = 0;  // recomputed blocks of the stage
      for (int64_t b = s.first_block; b < s.first_block + s.blocks; ++b) again += recomputed[static_cast<size_t>(b)];
      const int64_t ends = (s.has_embedding ? 1 : 0) + (s.has_output ? 1 : 0);
      if (l.sp) {
        // Each block's 4 all-gathers and 4 reduce-scatters of A, 2 + 2 more
        // where recomputed; the embedding's output and the output's input
        // once each way.
        int64_t block_ops = 4 * s.blocks + 2 * again;
        if (o.tp.async_tp) {
          // Async TP: the blocks' ones are rings of n−1 sends of a shard,
          // A/n, the same bytes in other ops; a zero-bubble W step gathers
          // the inputs of its two fused gather-matmuls again (its I kept no
          // copy). Per-op AC keeps every matmul's output, so its recompute
          // runs the two gather rings only (gather, no GEMM) and no
          // reduce-scatter ring.
          const int64_t w_steps = schedule_steps * weight_steps_of_stage(rank_actions, s.stage);
          const int64_t recompute_rings = op_ac ? 2 : 4;
          const int64_t rings = M * (8 * s.blocks + recompute_rings * again) + w_steps * 2 * s.blocks;
          c.sends("tp", rings * (n - 1), A / n);
          c.receives("tp", rings * (n - 1));
          block_ops = 0;
        }
        c.all_gather("tp", M * (block_ops + ends), A, n);
        c.reduce_scatter("tp", M * (block_ops + ends), A, n);
        const int64_t norms = 2 * s.blocks + (s.has_output ? 1 : 0);
        c.all_reduce("tp", M * norms, static_cast<double>(args.dim) * wire.activation, n);
      } else {
        c.all_reduce("tp", M * (4 * s.blocks + 2 * again + ends), A, n);
      }
      if (s.has_output) {
        if (l.loss_parallel) c.all_reduce("tp", 3 * M, tokens * kFloat, n);
        else c.all_gather("tp", M, tokens * static_cast<double>(args.vocab_size) * wire.activation, n);
      }
    }
  }

  // CP: ring attention per micro-batch and block.
  if (dims.cp_enabled()) {
    const int n = static_cast<int>(l.cp);
    const double P = static_cast<double>(seqs * (args.kv_heads() / l.tp) * T * args.head_dim()) * wire.activation;
    const bool all_gather = o.cp_rotate == cp::RotateMethod::allgather;
    for (const StagePart& s : parts)
      for (int64_t b = s.first_block; b < s.first_block + s.blocks; ++b) {
        const int64_t forwards = recomputed[static_cast<size_t>(b)] ? 2 : 1;
        if (all_gather) {
          c.all_gather("cp", M * (2 * forwards + 2), n * P, n);
          c.reduce_scatter("cp", M * 2, n * P, n);
        } else {
          const int64_t pieces = forwards * 2 * (n - 1) + 2 * (n - 1) + 2 * n;
          c.sends("cp", M * pieces, P);
          c.receives("cp", M * pieces);
        }
      }
  }

  // PP: activations forward, their gradients backward, between ranks.
  if (dims.pp_enabled()) {
    const double act = static_cast<double>(seqs * (T / (l.sp ? l.tp : 1)) * args.dim) * wire.activation;
    for (int s : stage_ids) {
      const bool sends_forward = s + 1 < plan.spec.num_stages() && plan.spec.rank_of_stage(s + 1) != me;
      const bool receives_forward = s > 0 && plan.spec.rank_of_stage(s - 1) != me;
      // Forward out and its gradient back in; forward in and its gradient back out.
      if (sends_forward) c.sends("pp", M, act), c.receives("pp", M);
      if (receives_forward) c.receives("pp", M), c.sends("pp", M, act);
      if (first_step && sends_forward) c.sends("pp", 1, 6 * kLong);
      if (first_step && receives_forward) c.receives("pp", 1);
    }
    c.broadcast("pp", schedule_steps, kLong, static_cast<int>(l.pp));
  }

  // The step's scalars.
  if (dims.dp_degree() * dims.cp > 1) {
    const int n = static_cast<int>(dims.dp_degree() * dims.cp);
    c.all_reduce(l.loss_group, 1, kLong, n);      // targets that count
    c.all_reduce(l.loss_group, 1, 2 * kLong, n);  // loss sum and tokens
    c.all_reduce(l.loss_group, 1, kLong, n);      // largest loss
  }
  // The gradient norm's partial sums: also without clipping (max_norm 0),
  // since every step logs the norm.
  if (l.fsdp) c.all_reduce(l.fsdp_group, 1, kLong, static_cast<int>(l.fsdp_n));
  if (dims.tp_enabled()) c.all_reduce("tp", 1, kLong, static_cast<int>(l.tp));
  if (dims.pp_enabled()) c.all_reduce("pp", 1, kLong, static_cast<int>(l.pp));
  out.modelled = true;
  out.comm = c.take();
  return out;
}

double total_bytes(const std::map<CommKind, CommVolume>& group) {
  double b = 0;
  for (const auto& [kind, v] : group) b += v.bytes;
  return b;
}

std::vector<std::string> comm_differences(const StepComm& measured, const StepComm& expected) {
  std::vector<std::string> out;
  std::map<std::pair<std::string, CommKind>, std::pair<CommVolume, CommVolume>> both;
  for (const auto& [g, kinds] : measured)
    for (const auto& [k, v] : kinds) both[{g, k}].first = v;
  for (const auto& [g, kinds] : expected)
    for (const auto& [k, v] : kinds) both[{g, k}].second = v;
  for (const auto& [key, pair] : both) {
    const auto& [got, want] = pair;
    // Records hold whole bytes: up to half a byte of rounding per op.
    const bool same = got.ops == want.ops && std::abs(got.bytes - want.bytes) <= 0.5 * static_cast<double>(got.ops + 1);
    if (same) continue;
    out.push_back(strprintf("%s %s: %lld ops, %s measured; %lld ops, %s by the count", key.first.c_str(),
                            comm_kind_name(key.second), static_cast<long long>(got.ops),
                            metrics::human_bytes(got.bytes).c_str(), static_cast<long long>(want.ops),
                            metrics::human_bytes(want.bytes).c_str()));
  }
  return out;
}

}  // namespace titan::verify
