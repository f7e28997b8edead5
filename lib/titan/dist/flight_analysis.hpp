#pragma once
/// @file
/// @brief Reading the flight recorder's dumps side by side: the first
/// collective where the ranks of a group disagree (a rank that never
/// entered it, mismatched op, sizes or dtype, one that never completed) and
/// the ranks behind — what torch's fr_trace analysis prints for NCCL dumps.
///
/// The dumps line up by (group, sequence number): the k-th collective of a
/// group is the same call on every member, whatever the clocks say.

#include <map>
#include <string>
#include <vector>

#include "titan/dist/flight_recorder.hpp"

namespace titan::dist {

/// @brief One rank's dump (FlightRecorder::to_json), as read back.
struct FlightDump {
  std::string path;
  int rank = 0;
  int world_size = 1;
  int64_t buffer_entries = 0;  ///< the ring's capacity
  int64_t entries_issued = 0;  ///< ops issued in all (more than the buffer holds: the oldest are gone)
  std::map<std::string, std::vector<int>> groups;  ///< name -> global ranks
  std::vector<FlightEntry> entries;
};

/// Reads one dump; a file that is not one gives a one-line titan::Error.
FlightDump load_flight_dump(const std::string& path);
/// Reads every *.json in `folder` (one per rank); errors when there is none.
std::vector<FlightDump> load_flight_dumps(const std::string& folder);

/// @brief What is wrong in one group, at its first disagreeing collective.
struct FlightFinding {
  enum class Kind {
    NeverEntered,  ///< some members issued it, others never did
    Mismatch,      ///< members issued different ops, sizes or dtypes under one number
    NeverCompleted ///< every member with a trace issued it; some never finished
  };
  Kind kind = Kind::NeverEntered;
  std::string group;
  int64_t seq = 0;
  std::string text;         ///< one line for a person
  std::vector<int> behind;  ///< the ranks to look at (never entered, the odd one out, no trace)
  int64_t step = 0;         ///< the training step when it was issued
};

/// @brief The verdict over all dumps of a job.
struct FlightAnalysis {
  int world_size = 0;
  std::vector<int> ranks_with_traces;
  std::vector<int> ranks_without_traces;  ///< dead, stopped or stuck where they could not dump
  std::vector<FlightFinding> findings;    ///< first in program order first
  std::vector<int> behind;                ///< union of the findings' ranks, ascending
  std::vector<std::string> pending_p2p;   ///< "rank 0: recv from rank 1 [4, 8] (pp::F3), never completed"
};

/// Compares the dumps group by group (collectives by sequence number, then
/// point-to-point ops still pending).
FlightAnalysis analyse_flight_traces(const std::vector<FlightDump>& dumps);
/// The report `titan flight-recorder` prints (several lines).
std::string format_flight_analysis(const FlightAnalysis& analysis);

}  // namespace titan::dist
