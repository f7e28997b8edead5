#pragma once
/// @file
/// @brief Pipeline schedules as CSV files, as torch.distributed.pipelining
/// writes and reads them in its "compute_only" format (torchtitan's
/// [parallelism] pipeline_parallel_schedule_csv): row r lists pipeline rank
/// r's compute actions in order, one per cell, in torch's spelling ("0F0",
/// "1B2", "0I1", "0W1"); an empty cell is a step where that rank idles
/// (torch's dumps align the ranks' rows in time that way). The sends and
/// receives are not in the file: add_communication() places them.

#include <string>
#include <vector>

#include "titan/parallel/pipeline/schedule.hpp"

namespace titan::pp {

/// @brief Every rank's compute actions read from the CSV at `path`, checked
/// against `spec` cell by cell: one row per pipeline rank, each action a
/// compute action (F, B, I, W) of a stage of its own rank and of a
/// micro-batch below spec.microbatches. A wrong file is one-line
/// titan::Error naming the file, row and cell. Whether the lists make a
/// schedule (every micro-batch through every stage once, no deadlock) is
/// simulate()'s check.
std::vector<RankActions> read_schedule_csv(const std::string& path, const ScheduleSpec& spec);

/// @brief The CSV text of `actions` (compute actions only; one row per
/// rank): what read_schedule_csv() reads back, and what torch's
/// _load_csv(format="compute_only") reads.
std::string schedule_csv(const std::vector<RankActions>& actions);

}  // namespace titan::pp
