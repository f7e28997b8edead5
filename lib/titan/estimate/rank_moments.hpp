#pragma once
/// @file
/// @brief One pipeline rank's walk through a step for the memory estimate
/// (memory_estimate.hpp): the moments of backward, whose largest is the
/// rank's peak. The job-level estimate works out the units, dtypes and
/// activation sizes; this file only adds up what is alive when.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "titan/estimate/activations.hpp"

namespace titan::estimate {

/// @brief One FSDP unit's (or, without FSDP, one group's) sizes on a rank.
struct UnitBytes {
  int64_t shard_numel = 0;            ///< this rank's (padded) shard elements
  int64_t gathered_numel = 0;         ///< the unsharded, padded elements
  int64_t output_and_norm_numel = 0;  ///< root unit only: the parameters whose gradients come first
};

/// @brief The root parameters a stage holds: the embedding on the first,
/// norm and output on the last.
struct RootShare {
  int64_t shard_numel = 0, gathered_numel = 0, output_and_norm_numel = 0;
};

/// @brief What every rank of the job shares.
struct StepFacts {
  bool fsdp = false;
  bool offload = false;  ///< FSDP's CPU offload: shards and gradients off the device
  bool on_gpu = false;   ///< NCCL (no copy of a reduce-scatter's input, unlike Gloo)
  /// FSDP frees a block's gathered weights after its forward.
  bool blocks_reshard = false;
  /// PP x FSDP: every micro-batch's backward reduce-scatters (no
  /// unsharded sums over the step); false without FSDP or PP.
  bool reduce_per_microbatch = false;
  /// Without PP: several micro-steps, the later ones starting with every
  /// gradient there.
  bool accumulating = false;
  /// [optimizer] early_step_in_backward (refused with PP and DDP): in the
  /// step's last backward each gradient is applied and freed once final (a
  /// plain parameter's at once; an FSDP shard's when its reduction is
  /// waited, at the next unit's issue). Without accumulation a finished
  /// block leaves no gradient behind; with it, the accumulated ones go as
  /// their blocks finish.
  bool early = false;
  bool ac_per_op = false;     ///< selective AC per op: checkpointed blocks keep their matmul outputs
  int64_t storage_bytes = 4;  ///< [training] dtype: weights, gradients, Adam's moments
  int64_t param_bytes = 4;    ///< FSDP's gathered weights (mixed_precision_param)
  int64_t reduce_bytes = 4;   ///< FSDP's reductions (mixed_precision_reduce)
  /// Bytes of a weight's autocast copy (0: no autocast, or weights stored
  /// in the autocast dtype already).
  double amp_bytes = 0;
  double tokens = 0;  ///< tokens per micro-batch on a rank (after CP's split)
  int num_stages = 1;
  BlockActivations block;  ///< per token
  HeadActivations head;    ///< per token
};

/// @brief A transformer block a rank holds.
struct RankBlock {
  std::string name;  ///< "layers.<id>"
  UnitBytes unit;
  bool wrapped = false;  ///< under activation checkpointing
  int stage = 0;
};

/// @brief What one pipeline rank holds, and how its schedule runs.
struct RankUnits {
  std::vector<int> stages;        ///< global stage ids (one, {0}, without PP)
  std::vector<RankBlock> blocks;  ///< in forward order
  RootShare root;
  bool has_last = false;  ///< holds the last stage (the norm, the LM head and the loss)
  /// Per stage: the most micro-batches forwarded and not yet freed by
  /// their backward, and (zero bubble) between their I and their W.
  std::map<int, int64_t> in_flight, awaiting_w;
};

/// @brief The elements of every shard a rank holds (its blocks' and its
/// root share's).
int64_t shard_numel_of(const RankUnits& units);

/// @brief A moment of the step: what is alive besides the persistent
/// states (parameters, optimizer state, DDP buckets).
struct Moment {
  std::string phase;
  double activations = 0, gathered = 0, grads = 0, transient = 0;
  double total(double persistent) const { return persistent + activations + gathered + grads + transient; }
};

/// @brief A pipeline rank's moments: the steady state of several
/// micro-batches in flight, and what the FSDP options add.
/// `most_in_flight` receives the most micro-batches a stage holds at once.
std::vector<Moment> pipelined_moments(const StepFacts& facts, const RankUnits& units, int64_t& most_in_flight);

/// @brief A rank's moments without PP: the start of backward, each block's
/// backward (last to first), the end of backward.
std::vector<Moment> unpipelined_moments(const StepFacts& facts, const RankUnits& units);

}  // namespace titan::estimate
