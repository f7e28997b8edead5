#include "titan/predict/step_prediction.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "titan/estimate/memory_estimate.hpp"
#include "titan/metrics/format.hpp"
#include "titan/models/llama3/job_layout.hpp"
#include "titan/models/llama3/pipeline.hpp"
#include "titan/parallel/pipeline/simulate.hpp"
#include "titan/util/error.hpp"
#include "titan/util/internal_assert.hpp"
#include "titan/util/strprintf.hpp"
#include "titan/verify/comm_count.hpp"

namespace titan::predict {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Where a process group's ranks sit: its size and the distance between
// neighbours in the global rank order, with the mesh laid out as
// torchtitan's (pp, dp_replicate, dp_shard, cp, tp; tp innermost).
struct Placement {
  int64_t size = 1, stride = 1;
};

Placement placement_of(const std::string& group, const parallel::ParallelDims& d) {
  const int64_t tp = d.tp, cp = d.cp, shard = d.dp_shard, rep = d.dp_replicate;
  if (group == "tp") return {tp, 1};
  if (group == "cp") return {cp, tp};
  if (group == "dp_shard") return {shard, tp * cp};
  if (group == "dp_shard_cp") return {shard * cp, tp};
  if (group == "dp_replicate") return {rep, tp * cp * shard};
  if (group == "dp") return {rep * shard, tp * cp};
  if (group == "dp_cp") return {rep * shard * cp, tp};
  if (group == "pp") return {d.pp, tp * cp * shard * rep};
  if (group.rfind("fsdp:", 0) == 0) return placement_of(group.substr(5), d);
  TITAN_INTERNAL_ASSERT(false, "predict: no placement for process group '", group, "'");
  return {};
}

// Latency steps of one collective over n ranks: NCCL's tree and PAT
// algorithms take about log2(n) steps where a ring would take n − 1 (the
// bytes are the ring's: verify/comm_count.hpp).
double latency_steps(verify::CommKind kind, int64_t n) {
  const double log_n = std::ceil(std::log2(static_cast<double>(std::max<int64_t>(n, 2))));
  switch (kind) {
    case verify::CommKind::AllReduce: return 2 * log_n;
    case verify::CommKind::PointToPoint: return 0.5;  // a send and its receive are two ops
    default: return log_n;
  }
}

// The seconds of one kind of traffic on a group.
double kind_seconds(verify::CommKind kind, const verify::CommVolume& v, const Placement& where, bool crosses,
                    const Cluster& c) {
  const double bandwidth = crosses ? c.inter_bandwidth
                                   : (kind == verify::CommKind::AllReduce ? c.intra_all_reduce_bandwidth
                                                                          : c.intra_bandwidth);
  const double latency = crosses ? c.inter_latency : c.intra_latency;
  return static_cast<double>(v.ops) * latency_steps(kind, where.size) * latency + v.bytes / bandwidth;
}

// What one pipeline rank's stages hold.
std::vector<ModelPart> parts_of_rank(const models::llama3::JobLayout& job, int pp_rank, std::vector<int>& stages,
                                     std::vector<int64_t>& checkpointed) {
  std::vector<ModelPart> parts;
  const std::vector<bool>& wrapped = job.parallelize.ac.blocks;
  auto count_wrapped = [&](int64_t begin, int64_t end) {
    int64_t n = 0;
    for (int64_t b = begin; b < end; ++b) n += wrapped.empty() ? 0 : wrapped[static_cast<size_t>(b)];
    return n;
  };
  if (!job.pipelined()) {
    stages = {0};
    parts.push_back({job.args.n_layers, true, true});
    checkpointed.push_back(count_wrapped(0, job.args.n_layers));
    return parts;
  }
  const models::llama3::PipelinePlan& plan = *job.parallelize.pipeline;
  stages = plan.spec.stages_of_rank(pp_rank);
  for (int s : stages) {
    const pp::LayerRange r = plan.layers[static_cast<size_t>(s)];
    parts.push_back({r.size(), s == 0, s + 1 == plan.spec.num_stages()});
    checkpointed.push_back(count_wrapped(r.begin, r.begin + r.size()));
  }
  return parts;
}

}  // namespace

StepPrediction predict_step(const models::llama3::JobLayout& job, const Cluster& cluster) {
  const parallel::ParallelDims& d = job.dims;
  const models::llama3::ParallelizeOptions& o = job.parallelize;
  if (o.float8.enable && !o.float8.emulate && cluster.peak_fp8 <= 0)
    throw Error("titan predict: [float8] enable_float8_linear on " + cluster.accelerator +
                ", which has no float8 tensor cores ([cluster] peak_fp8_tflops = 0)");
  StepPrediction p;
  p.cluster = cluster;
  p.world = d.world_size;
  p.nodes = (d.world_size + cluster.gpus_per_node - 1) / cluster.gpus_per_node;

  const estimate::JobEstimate memory = estimate::estimate_job(job);
  p.layout = memory.layout;
  p.tokens_per_step = memory.tokens_per_step;
  p.flops_per_token = memory.flops_per_token;

  // Micro-batches through each stage in a step, and the pipeline's shape.
  const int64_t accumulation = job.batches.accumulation_steps;
  const int64_t per_schedule = job.pipelined() ? o.pipeline->spec.microbatches : 1;
  const int64_t microbatches = accumulation * per_schedule;

  std::vector<RankPrediction> ranks;
  pp::ActionCosts costs{0, 0, 0, 0};  // the slowest stage's, for the schedule
  for (int r = 0; r < static_cast<int>(d.pp); ++r) {
    RankPrediction rp;
    rp.pp_rank = r;
    rp.microbatches = microbatches;
    std::vector<int64_t> checkpointed;
    const std::vector<ModelPart> parts = parts_of_rank(job, r, rp.stages, checkpointed);
    double stage_forward = 0, stage_backward = 0;
    for (size_t k = 0; k < parts.size(); ++k) {
      const ComputeCost c = microbatch_compute(job, cluster, parts[k], checkpointed[k]);
      rp.per_microbatch.forward += c.forward, rp.per_microbatch.backward += c.backward;
      rp.per_microbatch.recompute += c.recompute;
      rp.per_microbatch.gemm += c.gemm, rp.per_microbatch.attention += c.attention;
      rp.per_microbatch.memory_bound += c.memory_bound;
      stage_forward = std::max(stage_forward, c.forward);
      stage_backward = std::max(stage_backward, c.backward + c.recompute);
    }
    rp.compute = static_cast<double>(microbatches) * rp.per_microbatch.total();
    const estimate::RankMemory& mem = memory.ranks[static_cast<size_t>(r)];
    rp.peak_memory_gib = static_cast<double>(mem.peak) / kGiB;
    rp.optimizer = optimizer_seconds(mem.parameters / static_cast<int64_t>(c10::elementSize(o.param_storage_dtype)),
                                     cluster);

    // Communication, from the count of this pipeline rank's traffic.
    const verify::ExpectedComm count =
        verify::expected_step_comm(job, /*first_step=*/false, {.pp_rank = r, .layout_dtypes = true, .fsdp_apart = true});
    TITAN_INTERNAL_ASSERT(count.modelled, "predict: the count refused ", count.not_modelled_because);
    const ComputeCost& mb = rp.per_microbatch;
    const double m = static_cast<double>(microbatches);
    double pp_message = 0;  // seconds per message between stages
    for (const auto& [group, kinds] : count.comm) {
      GroupComm g;
      g.group = group;
      const Placement where = placement_of(group, d);
      g.size = where.size;
      g.crosses_nodes = where.size > 1 && where.size * where.stride > cluster.gpus_per_node;
      double p2p_seconds = 0, p2p_ops = 0, first_and_last = 0;
      for (const auto& [kind, v] : kinds) {
        const double s = kind_seconds(kind, v, where, g.crosses_nodes, cluster);
        g.bytes += v.bytes, g.seconds += s;
        if (kind == verify::CommKind::PointToPoint) p2p_seconds += s, p2p_ops += static_cast<double>(v.ops);
        // One unit's gather before the first compute and one reduction
        // after the last cannot hide.
        if (v.ops > 0 && (kind == verify::CommKind::AllGather || kind == verify::CommKind::ReduceScatter ||
                          kind == verify::CommKind::AllReduce))
          first_and_last += s / static_cast<double>(v.ops);
      }
      if (group.rfind("fsdp:", 0) == 0) {
        g.overlap = "prefetched and overlapped";
        g.exposed = std::max(0.0, g.seconds - rp.compute) + first_and_last;
      } else if (group == "dp_replicate") {
        g.overlap = "overlapped with backward";
        g.exposed = std::max(0.0, g.seconds - m * (mb.backward + mb.recompute)) + first_and_last / 2;
      } else if (group == "tp") {
        if (o.tp.async_tp) {
          g.overlap = "async: rings behind the GEMMs";
          g.exposed = std::max(0.0, p2p_seconds - m * mb.gemm) + (g.seconds - p2p_seconds);
        } else {
          g.overlap = "sync TP: on the critical path";
          g.exposed = g.seconds;
        }
      } else if (group == "cp") {
        if (o.cp_rotate == cp::RotateMethod::alltoall) {
          g.overlap = "ring behind the attention";
          g.exposed = std::max(0.0, p2p_seconds - m * mb.attention) + (g.seconds - p2p_seconds);
        } else {
          g.overlap = "all-gather of K and V: on the critical path";
          g.exposed = g.seconds;
        }
      } else if (group == "pp") {
        g.overlap = "messages in the schedule";
        pp_message = p2p_ops > 0 ? p2p_seconds / (p2p_ops / 2) : 0;
        g.exposed = g.seconds - p2p_seconds;  // the loss's broadcast and the norm's all-reduce
      } else {
        g.overlap = "the step's scalars: on the critical path";
        g.exposed = g.seconds;
      }
      // Where collectives share the compute's cores, nothing hides but
      // the pipeline's messages, which the schedule already charges.
      if (!cluster.overlaps_communication && group != "pp") g.exposed = g.seconds;
      rp.exposed_comm += g.exposed;
      rp.comm.push_back(g);
    }
    costs.forward = std::max(costs.forward, stage_forward + pp_message);
    costs.backward = std::max(costs.backward, stage_backward + pp_message);
    ranks.push_back(rp);
  }

  // The pipeline: the schedule played with the slowest stage's costs (its
  // split backward half input, half weight gradients).
  double pipeline_time = 0;
  if (job.pipelined()) {
    costs.backward_input = costs.backward_weight = costs.backward / 2;
    const pp::SimulatedRun run = pp::simulate(o.pipeline->spec, o.pipeline->actions(), costs);
    pipeline_time = static_cast<double>(accumulation) * run.makespan;
    for (RankPrediction& rp : ranks) rp.bubble = run.bubble[static_cast<size_t>(rp.pp_rank)];
  }
  for (RankPrediction& rp : ranks) {
    const double busy = job.pipelined() ? pipeline_time : rp.compute;
    rp.step = busy + rp.exposed_comm + rp.optimizer;
    p.step_seconds = std::max(p.step_seconds, rp.step);
    p.fits = p.fits && rp.peak_memory_gib <= cluster.hbm_capacity_gib;
  }
  p.ranks = std::move(ranks);
  p.tokens_per_second_per_gpu = static_cast<double>(p.tokens_per_step) / p.step_seconds / static_cast<double>(p.world);
  p.tflops_per_gpu = p.flops_per_token * p.tokens_per_second_per_gpu / 1e12;
  p.mfu_peak = compute_element_size(job) <= 2 || o.float8.enable ? cluster.peak_bf16 : cluster.peak_fp32;
  p.mfu_percent = 100 * p.tflops_per_gpu * 1e12 / p.mfu_peak;
  if (o.float8.enable) p.notes.push_back("float8: its amax all-reduces are not counted");
  if (job.args.attn_mask_type == "block_causal")
    p.notes.push_back("document masks: attention costed as causal over the whole window (an upper bound)");
  return p;
}

namespace {

std::string ms(double seconds) { return strprintf("%.1f ms", seconds * 1e3); }

// 12345.6 -> "12,346"
std::string thousands(double x) {
  std::string digits = strprintf("%.0f", x), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

std::string group_display_name(const std::string& group) {
  return group.rfind("fsdp:", 0) == 0 ? group.substr(5) + " FSDP" : group;
}

std::string prediction_line(const StepPrediction& p) {
  const char* per = p.cluster.preset == "cpu" ? "rank" : "GPU";
  // A GPU's hundreds of TFLOP/s to the unit; a CPU rank's fraction of one in 3 digits.
  const std::string tflops = p.tflops_per_gpu >= 10 ? strprintf("%.0f", p.tflops_per_gpu)
                                                    : strprintf("%.3g", p.tflops_per_gpu);
  return strprintf("predicted: step %.3f s, %s tokens/s per %s, %s TFLOP/s per %s, MFU %.1f %%\n", p.step_seconds,
                   thousands(p.tokens_per_second_per_gpu).c_str(), per, tflops.c_str(), per, p.mfu_percent);
}

std::string format_prediction(const StepPrediction& p) {
  const Cluster& c = p.cluster;
  const bool cpu = c.preset == "cpu";
  std::string out =
      cpu ? strprintf("titan predict: %lld rank(s) on this machine, [cluster] preset cpu\n",
                      static_cast<long long>(p.world))
          : strprintf("titan predict: %lld GPUs on %lld node(s), [cluster] preset %s\n", static_cast<long long>(p.world),
                      static_cast<long long>(p.nodes), c.preset.c_str());
  out += "  " + c.describe() + "\n";
  for (const std::string& o : c.overridden) out += "  " + o + "\n";
  out += "layout: " + p.layout + "\n";
  out += strprintf("a step: %s tokens, %.3g model FLOPs per token\n", thousands(static_cast<double>(p.tokens_per_step)).c_str(),
                   p.flops_per_token);
  for (const RankPrediction& r : p.ranks) {
    std::string stages;
    for (int s : r.stages) stages += (stages.empty() ? "" : ", ") + std::to_string(s);
    out += strprintf("\npp rank %d (stage %s), %lld micro-batch(es) per step\n", r.pp_rank, stages.c_str(),
                     static_cast<long long>(r.microbatches));
    const ComputeCost& m = r.per_microbatch;
    const double n = static_cast<double>(r.microbatches);
    out += strprintf("  %-16s forward %s, backward %s, recompute %s (GEMMs %s, attention %s, memory-bound %s)\n",
                     "compute", ms(n * m.forward).c_str(), ms(n * m.backward).c_str(), ms(n * m.recompute).c_str(),
                     ms(n * m.gemm).c_str(), ms(n * m.attention).c_str(), ms(n * m.memory_bound).c_str());
    out += strprintf("  %-16s %s\n", "optimizer", ms(r.optimizer).c_str());
    for (const GroupComm& g : r.comm) {
      const std::string name = group_display_name(g.group);
      out += strprintf("  %-16s %lld ranks %s, %s: %s, exposed %s (%s)\n", name.c_str(),
                       static_cast<long long>(g.size), g.crosses_nodes ? "across nodes" : "in a node",
                       metrics::human_bytes(g.bytes).c_str(), ms(g.seconds).c_str(), ms(g.exposed).c_str(),
                       g.overlap.c_str());
    }
    if (r.bubble > 0) out += strprintf("  %-16s %.1f %% of the pipeline's time idle\n", "bubble", 100 * r.bubble);
    out += strprintf("  %-16s %.3f s; estimated peak memory %.1f GiB of %.1f\n", "step", r.step, r.peak_memory_gib,
                     c.hbm_capacity_gib);
  }
  for (const std::string& note : p.notes) out += "note: " + note + "\n";
  out += cpu ? strprintf("MFU against %.1f GFLOP/s per rank (its share of the calibrated GEMM rate)\n",
                         p.mfu_peak / 1e9)
             : strprintf("MFU against %.0f TFLOP/s per GPU (%s)\n", p.mfu_peak / 1e12,
                         p.mfu_peak == c.peak_bf16 ? "the dense bf16 peak" : "the fp32 peak");
  out += prediction_line(p);
  return out;
}

}  // namespace titan::predict
