#pragma once
/// @file
/// @brief Runs a schedule on paper: every action gets a start and end time
/// from fixed costs and its dependencies, so a schedule can be checked
/// (every micro-batch passes every stage once, no rank waits forever) and
/// its ideal bubble compared with the one a real run measures.

#include <string>
#include <vector>

#include "titan/parallel/pipeline/schedule.hpp"

namespace titan::pp {

/// @brief When every compute action of every rank ran.
struct SimulatedRun {
  std::vector<std::vector<double>> start, end;  ///< [rank][compute action index]
  double makespan = 0;                          ///< the step's length
  std::vector<double> busy;                     ///< compute time per rank
  /// Idle fraction per rank: 1 − busy / makespan.
  std::vector<double> bubble;
  /// The largest number of micro-batches whose activations a rank holds at
  /// once (forward done, last backward not yet), per rank.
  std::vector<int> peak_in_flight;
  /// Mean of `bubble` over the ranks.
  double mean_bubble() const;
};

/// @brief Checks `compute` (per-rank compute actions; communication
/// entries are ignored) against `spec` and simulates it. Throws a one-line
/// titan::Error when an action is on the wrong rank, a (stage, micro-batch)
/// misses its F, its B (or I and W) or has two, the ranks deadlock
/// (naming a blocked action of each waiting rank). It also asserts that the
/// runtime's messages (add_communication) leave each rank in the order its
/// peer receives them: NCCL pairs two ranks' sends and receives by order,
/// not by tag.
SimulatedRun simulate(const ScheduleSpec& spec, const std::vector<RankActions>& compute, const ActionCosts& costs = {});

/// @brief Plays lists with their communication as PipelineRuntime posts
/// them (each run of consecutive communication actions one batch, a rank's
/// batches one after another) with every send waiting until the peer has
/// posted its receive, as an NCCL send larger than NCCL's buffers does.
/// Returns "" when every rank gets to its end, else the batch each stuck
/// rank waits in ("rank 0 in [2SEND_B0], rank 1 in [3SEND_B1 1RECV_F2]").
/// `forward_only` plays an eval step: forwards and their messages only.
/// simulate() asserts it for add_communication's lists, both ways.
std::string blocking_send_deadlock(const ScheduleSpec& spec, const std::vector<RankActions>& with_comm,
                                   bool forward_only);

}  // namespace titan::pp
