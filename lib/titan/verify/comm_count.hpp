#pragma once
/// @file
/// @brief The analytic count of what one training step of a layout sends,
/// per mesh dimension: `titan verify` sets it beside what the CommLog
/// measured, so a layout that gathers twice, forgets a reduce-scatter or
/// sends whole tensors where shards would do is named even when its
/// numbers agree with one process.
///
/// The count is derived from the algorithms, for rank 0 of the job or the
/// first rank of another pipeline rank (its pipeline stages, the first
/// rank of every other dimension), in fp32 (CountOptions: or the layout's
/// own dtypes), on
/// the CommLog's wire volumes (dist/comm_log.hpp: ring all-reduce
/// 2(n−1)/n·S, all-gather and reduce-scatter (n−1)/n·S, a send its bytes,
/// a receive none). With M the micro-batches of the step (gradient
/// accumulation, or the pipeline's), a micro-batch of b sequences of T/cp
/// tokens and A = b·(T/cp)·dim·4 bytes of residual stream:
///
/// - **FSDP** (dp_shard, or dp_shard × cp): per unit (each block, and the
///   root: the embedding, final norm and output of this rank's stages)
///   one all-gather of its weights, each padded on dim 0 to a multiple of
///   the shard count, per forward, and again for backward where the block
///   was freed after forward (reshard_after_forward: a checkpointed
///   block's recompute then gathers; without it the block keeps its
///   weights for the recompute); the root never frees. One reduce-scatter per unit per micro-batch; under PP one
///   per schedule step (gradient sync is off but on the last micro-batch),
///   with the weights gathered once per schedule step, or as the schedule's
///   actions free them (gathers_of_stage_unit: "always", the reduction per
///   micro-batch, a checkpointed block's forward without autograd under
///   "always").
/// - **HSDP**: each reduce-scattered shard is then all-reduced over
///   dp_replicate. **DDP**: every gradient all-reduced once per step (under
///   PP once per schedule step), in replicate()'s buckets: at most 25 MiB
///   each, filled in reverse registration order, per stage part.
/// - **TP** (sequence parallel), per micro-batch: per block 4 all-gathers
///   and 4 reduce-scatters of A (attention and FFN, forward and backward),
///   2 + 2 more where the block is recomputed; the embedding's output and
///   the output's input once each way; the norms' weight gradients
///   all-reduced (2 per block, the final norm); without loss parallel the
///   logits all-gathered (b·T/cp·vocab·4), with it 3 all-reduces of
///   b·T/cp·4. Without sequence parallelism: 4 all-reduces of A per block
///   (2 more recomputed), 1 for the embedding, 1 for the output. **Async
///   TP**: each block's gathers and reduce-scatters (the recompute's too)
///   are rings of n−1 sends of A/n (the same bytes), and a zero-bubble W
///   step gathers its two fused gather-matmuls' inputs again by ring;
///   per-op AC keeps the matmuls' outputs, so its recompute runs the two
///   gather rings only.
/// - **CP** (ring attention), per micro-batch and block, with P one rank's
///   K (or V) piece b·(kv_heads/tp)·(T/cp)·head_dim·4: "allgather" gathers
///   K and V forward, again backward, and reduce-scatters dK and dV (the
///   recompute gathers again); "alltoall" sends 2(cp−1) pieces forward,
///   2(cp−1) + 2·cp backward (the recompute: forward's again).
/// - **PP**, per schedule step: each of this rank's stages sends its
///   output per micro-batch (b·T/cp(/tp under SP)·dim·4) to the next
///   stage's rank and receives its input's gradient, and the reverse on
///   the input side; stages on the same rank hand over without sending.
///   The last stage broadcasts the loss (8 bytes). Before the first step
///   every sender tells its receiver the shape (6 int64).
/// - **The step's scalars**: the count of targets, the loss sum and its
///   tokens, the largest loss (8, 16 and 8 bytes over data × context
///   parallel ranks), and the gradient norm's partial sum (8 bytes over
///   each dimension gradients are sharded on: FSDP's, tp, pp).
///
/// Not modelled (the layout check then says so and compares nothing):
/// float8 (its amax all-reduces and float8 all-gathers), mixed precision
/// other than fp32, and per-op AC told to recompute block matmuls
/// (per_op_sac_force_recompute_mm_shapes_by_fqns).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "titan/dist/comm_log.hpp"

namespace titan::models::llama3 {
struct JobLayout;
}

namespace titan::verify {

/// @brief The kinds of traffic the count distinguishes.
enum class CommKind { AllGather, ReduceScatter, AllReduce, PointToPoint, Broadcast, Other };

/// @brief "all_gather", "reduce_scatter", "all_reduce", "send/recv", "broadcast", "other".
const char* comm_kind_name(CommKind kind);

/// @brief Ops and the bytes this rank sent for one kind on one dimension.
struct CommVolume {
  int64_t ops = 0;   ///< sends and receives both count under PointToPoint
  double bytes = 0;  ///< wire bytes this rank sent
};

/// @brief A step's traffic: process group name → kind → volume.
using StepComm = std::map<std::string, std::map<CommKind, CommVolume>>;

/// @brief What the CommLog recorded in `step`, as a StepComm.
StepComm measured_step_comm(int64_t step);

/// @brief The analytic count, or why there is none.
struct ExpectedComm {
  bool modelled = false;
  std::string not_modelled_because;  ///< e.g. "float8 linears"
  StepComm comm;
};

/// @brief Whose traffic the count is, and in which element sizes.
struct CountOptions {
  /// The pipeline rank counted (its stages; the first rank of every other
  /// dimension). `titan verify` checks rank 0; the predictor asks for each.
  int pp_rank = 0;
  /// Count a mixed-precision or float8 layout in its own element sizes
  /// (FSDP gathers in its param dtype, float8 gathers in one byte, reduces
  /// in its reduce dtype, activations in the dtype the blocks compute in)
  /// instead of refusing it. For the predictor: no CommLog has checked
  /// these sizes yet, so `titan verify` leaves it off.
  bool layout_dtypes = false;
  /// Count FSDP's gathers and reduce-scatters under "fsdp:" + its group's
  /// name ("fsdp:cp"), apart from the other traffic of that group (CP's
  /// ring, when FSDP shards over cp alone): the predictor overlaps them
  /// differently. `titan verify` compares process groups, so leaves it off.
  bool fsdp_apart = false;
};

/// @brief The count for one optimizer step of a job of `layout` (the
/// trainer's own reading of its config, models/llama3/job_layout.hpp), for
/// the rank `options` names (rank 0 by default). `first_step`: the
/// pipeline's shape handshake is part of it.
ExpectedComm expected_step_comm(const models::llama3::JobLayout& layout, bool first_step,
                                const CountOptions& options = {});

/// @brief One line per (group, kind) where `measured` and `expected`
/// differ in ops or in bytes (by more than a byte per op of rounding):
/// "dp_shard all_gather: 12 ops, 20.5 MiB measured; 11 ops, 18.8 MiB by the count".
/// Empty when they agree.
std::vector<std::string> comm_differences(const StepComm& measured, const StepComm& expected);

/// @brief All bytes of one group's traffic.
double total_bytes(const std::map<CommKind, CommVolume>& group);

}  // namespace titan::verify
