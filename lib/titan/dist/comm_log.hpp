#pragma once
/// @file
/// @brief Communication accounting: every collective a ProcessGroup runs is
/// recorded here (op, bytes, group, start and end time), and the analytic
/// per-rank volumes of the standard algorithms live next to the records so a
/// program can print measured against expected.

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace titan::dist {

/// @brief Kinds of communication a ProcessGroup performs.
enum class CommOp { AllReduce, AllGather, ReduceScatter, AllToAll, Broadcast, Reduce, Send, Recv, Barrier };

/// @brief Name of an op as printed in tables and errors ("all_reduce", ...).
const char* comm_op_name(CommOp op);

/// @brief One collective as it happened on this rank.
struct CommRecord {
  CommOp op;
  std::string group;         ///< ProcessGroup name, e.g. "world", "dp_shard"
  int group_size = 1;
  int64_t payload_bytes = 0; ///< S in the formulas: the full buffer (see comm_payload)
  int64_t wire_bytes = 0;    ///< bytes this rank sends under the analytic algorithm
  double start_us = 0;       ///< microseconds since the log's epoch (process start)
  double end_us = 0;
  int64_t step = 0;          ///< the step number current when it ran
  std::vector<int64_t> flight_ids;  ///< its FlightRecorder entries (none when the recorder is off)
};

/// @name Analytic per-rank send volumes (bytes), as nccl-tests defines them.
/// S is the payload: all-reduce and broadcast the tensor, all-gather the
/// gathered output, reduce-scatter the unreduced input, all-to-all the input.
/// @{
/// Ring all-reduce: reduce-scatter then all-gather, 2(n−1)/n·S per rank.
double ring_all_reduce_bytes(double S, int n);
/// Ring all-gather: (n−1)/n·S per rank.
double all_gather_bytes(double S, int n);
/// Ring reduce-scatter: (n−1)/n·S per rank.
double reduce_scatter_bytes(double S, int n);
/// Pairwise all-to-all: every rank keeps 1/n and sends (n−1)/n·S.
double all_to_all_bytes(double S, int n);
/// The per-rank volume of `op` on a payload S over n ranks.
double analytic_bytes(CommOp op, double S, int n);
/// Bus bandwidth factor (nccl-tests): busbw = algbw × factor.
double bus_bandwidth_factor(CommOp op, int n);
/// @}

/// @brief Totals of one kind of op over a window of records.
struct CommTotals {
  int64_t count = 0;
  int64_t payload_bytes = 0;
  int64_t wire_bytes = 0;
  double time_us = 0;
};

/// @brief Thread-safe log of the collectives this process ran.
///
/// Programs call begin_step(k) at the start of step k and read step_totals()
/// or records() afterwards; tests use the start/end times to show overlap.
/// It keeps the last kMaxRecords records (a training job runs for days).
class CommLog {
 public:
  static constexpr size_t kMaxRecords = size_t{1} << 18;

  /// The process-wide log every ProcessGroup writes to.
  static CommLog& instance();

  void record(CommRecord r);
  /// Marks the start of step `step`; later records carry that step number.
  void begin_step(int64_t step);
  int64_t current_step() const;
  /// Microseconds since the log's epoch, the clock of CommRecord times.
  double now_us() const;
  /// A copy of all records (optionally only those of `step`).
  std::vector<CommRecord> records() const;
  std::vector<CommRecord> records_of_step(int64_t step) const;
  /// Totals per op name over the records of `step` ("all" sums every op).
  std::map<std::string, CommTotals> step_totals(int64_t step) const;
  void clear();
  /// Turns recording on or off (on by default); benches turn it off.
  void set_enabled(bool on);

 private:
  CommLog();
  mutable std::mutex mu_;
  std::deque<CommRecord> records_;
  int64_t step_ = 0;
  bool enabled_ = true;
  std::chrono::steady_clock::time_point epoch_;
};

}  // namespace titan::dist
