#pragma once
/// @file
/// @brief `titan predict`: the step time, tokens/s per GPU and MFU of a
/// job's layout on a cluster, from what titan already knows of it — the
/// model's FLOPs and bytes per op (compute_cost.hpp), every collective's
/// bytes per mesh dimension (`titan verify`'s count, verify/comm_count.hpp,
/// in the layout's dtypes), the pipeline schedule played by its simulator
/// with per-action costs, and the memory estimate. Nothing is built but
/// the layout; a rank of each pipeline stage is computed once (the ranks
/// that share a role are alike).
///
/// Communication: an alpha-beta cost per collective, the mesh placed on
/// the nodes as torchtitan orders it (pp, dp_replicate, dp_shard, cp, tp:
/// TP innermost), a group that spans nodes running at the inter-node rate.
/// What is hidden behind compute, per technique (docs/predict.md):
/// FSDP's all-gathers are prefetched and its reduce-scatters overlap the
/// backward, all but one unit's of each; DDP's and HSDP's all-reduces
/// overlap the backward, all but the last bucket's; sync TP is exposed,
/// async TP's rings hide behind the GEMMs; CP's all-gather is exposed,
/// its all-to-all ring hides behind the attention; PP's messages lengthen
/// the schedule's actions, whose bubble the simulator gives.

#include <cstdint>
#include <string>
#include <vector>

#include "titan/predict/cluster.hpp"
#include "titan/predict/compute_cost.hpp"

namespace titan::models::llama3 {
struct JobLayout;
}

namespace titan::predict {

/// @brief One process group's traffic in a step on one rank, and its cost.
struct GroupComm {
  std::string group;          ///< "dp_shard", "tp", "pp", ...
  int64_t size = 1;           ///< ranks in the group
  bool crosses_nodes = false; ///< its ranks are on more than one node
  double bytes = 0;           ///< wire bytes this rank sends in the step
  double seconds = 0;         ///< the collectives' time, alpha + bytes / beta
  double exposed = 0;         ///< the part not hidden behind compute (pp's messages: in the schedule)
  std::string overlap;        ///< how it overlaps ("prefetched", "exposed", "in the schedule", ...)
};

/// @brief One pipeline rank's step (every rank of the stage alike).
struct RankPrediction {
  int pp_rank = 0;
  std::vector<int> stages;
  int64_t microbatches = 1;        ///< through each of its stages per step
  ComputeCost per_microbatch;      ///< all its stages, one micro-batch
  double compute = 0;              ///< all micro-batches: forward, backward, recompute
  double optimizer = 0;            ///< AdamW and clipping over its shards
  std::vector<GroupComm> comm;
  double exposed_comm = 0;         ///< sum of comm[].exposed
  double bubble = 0;               ///< fraction of the pipeline's time this rank idles (0 without PP)
  double step = 0;                 ///< this rank's step time
  double peak_memory_gib = 0;      ///< the memory estimate's peak
};

/// @brief The prediction for a job.
struct StepPrediction {
  Cluster cluster;
  std::string layout;               ///< the memory estimate's description of it
  int64_t world = 1;
  int64_t nodes = 1;
  std::vector<RankPrediction> ranks;  ///< one per pipeline rank
  int64_t tokens_per_step = 0;      ///< global
  double flops_per_token = 0;       ///< model FLOPs (as MFU counts them)
  double step_seconds = 0;          ///< the slowest rank's
  double tokens_per_second_per_gpu = 0;
  double tflops_per_gpu = 0;        ///< model TFLOP/s per GPU
  double mfu_percent = 0;           ///< against the bf16 peak (float8 runs too, as torchtitan reports them)
  double mfu_peak = 0;              ///< that peak, FLOP/s
  bool fits = true;                 ///< every rank's estimated peak within the cluster's memory
  std::vector<std::string> notes;   ///< what the prediction leaves out for this job
};

/// @brief Predicts one optimizer step of `layout` on `cluster`. Throws a
/// one-line titan::Error for what it cannot model (float8 on a cluster
/// without float8, a layout whose world does not fit the cluster's nodes).
StepPrediction predict_step(const models::llama3::JobLayout& layout, const Cluster& cluster);

/// @brief The prediction as a table per pipeline rank and the final line
/// "predicted: step S s, T tokens/s per GPU, F TFLOP/s per GPU, MFU M %".
std::string format_prediction(const StepPrediction& p);

/// @brief A group's name as the tables print it: "dp_shard FSDP" for the
/// count's "fsdp:dp_shard" (FSDP's traffic apart from its group's other).
std::string group_display_name(const std::string& group);

/// @brief Only the final line.
std::string prediction_line(const StepPrediction& p);

}  // namespace titan::predict
