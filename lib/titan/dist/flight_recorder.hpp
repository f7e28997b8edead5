#pragma once
/// @file
/// @brief The flight recorder: a ring buffer of the last collectives and
/// point-to-point ops this rank issued, written to one JSON file per rank
/// when something goes wrong, so that the ranks' files side by side show
/// which rank never arrived where (torch's NCCL Flight Recorder, for every
/// backend titan runs on).
///
/// Every ProcessGroup op enters the buffer when it is issued to the backend
/// ("scheduled"), is marked "started" when this rank begins to wait for it,
/// and "completed" when that wait returns — or, where the wait returns
/// before the work is done (NCCL), when the work reports itself completed. (torch's recorder marks "started"
/// when the GPU kernel begins, which titan's backends do not report; what
/// it tells about a hang is the same: a "started" entry that never
/// completed is the op this rank is stuck in, while a "scheduled" one was
/// issued ahead, e.g. FSDP's prefetched all-gather, and not yet needed.) A rank dumps its buffer
/// when one of its collectives fails or times out (ProcessGroup::fail), on
/// a fatal signal, and on SIGUSR1 (`kill -USR1 PID` on a hung job). The
/// dumps are read by analyse_flight_traces (flight_analysis.hpp) and by
/// `titan flight-recorder FOLDER`.
///
/// Sequence numbers are per group and per kind, as torch's: the k-th
/// collective of group "dp_shard" has the same number on every member, so
/// the files line up by (group, seq) without a clock. Point-to-point ops
/// count separately (pairs, not the whole group, take part in them).

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "titan/dist/comm_log.hpp"

namespace titan::dist {

/// @brief One op in the flight recorder's buffer.
struct FlightEntry {
  int64_t id = -1;       ///< issue order on this rank (0, 1, ...)
  std::string group;     ///< ProcessGroup name
  int64_t seq = 0;       ///< per group: collectives 1, 2, ...; P2P ops their own 1, 2, ...
  bool p2p = false;      ///< send/recv (seq counts P2P ops of the group)
  CommOp op = CommOp::AllReduce;
  int peer = -1;                        ///< P2P: the other side, a global rank; else -1
  std::vector<int64_t> input_sizes;     ///< the tensor handed in
  std::vector<int64_t> output_sizes;    ///< the tensor filled (empty when in place)
  std::string dtype;                    ///< e.g. "float32"
  std::string context;  ///< the caller's innermost TITAN_PROFILE_RANGE ("fsdp::all_gather layers.3")
  int64_t step = 0;     ///< the training step when issued (FlightRecorder::set_step)
  bool started = false;    ///< this rank began to wait for it
  bool completed = false;  ///< its wait returned
  double scheduled_us = 0;  ///< CommLog clock
  double started_us = 0;
  double completed_us = 0;
  /// "scheduled", "started" or "completed".
  const char* state() const { return completed ? "completed" : started ? "started" : "scheduled"; }
};

/// @brief Process-wide ring buffer of FlightEntry (thread-safe).
class FlightRecorder {
 public:
  /// The one recorder of this process (never destroyed: a signal may dump
  /// it while statics are torn down).
  static FlightRecorder& instance();

  /// Keeps the last `entries` ops ([comm] trace_buf_size); 0 turns the
  /// recorder off. Clears the buffer.
  void configure(int64_t entries);
  bool enabled() const { return capacity_.load() > 0; }

  /// Where dump_to_target() writes: `folder`/`prefix`RANK.json. Until this
  /// is called, dumps on failure go nowhere.
  void set_dump_target(std::string folder, std::string prefix, int rank, int world_size);

  /// Registers a group's members (global ranks) for the dumps.
  void register_group(const std::string& name, const std::vector<int>& global_ranks);

  /// Records an op as issued; returns its id (−1 when off), for completed().
  int64_t scheduled(const std::string& group, CommOp op, bool p2p, int peer, const at::Tensor& input,
                    const at::Tensor& output);
  /// Marks entry `id` started: this rank waits for it now (a no-op if the
  /// buffer has moved past it).
  void started(int64_t id);
  /// Marks entry `id` completed (a no-op if the buffer has moved past it).
  void completed(int64_t id);
  /// Marks entry `id` completed once `done()` returns true: for a work
  /// whose wait returned before it finished (NCCL's wait makes the stream
  /// wait, not the host). The recorder asks `done` whenever it records a
  /// new op and before it reads or dumps its buffer (not from a signal
  /// handler); the completion time is when it first saw true. Forgotten
  /// once the buffer has moved past the entry. A group's ops complete in
  /// issue order (ProcessGroup's probes are events on the compute stream,
  /// recorded in issue order), so while one is pending the later ones of
  /// its group are not asked.
  void completes_when(int64_t id, std::function<bool()> done);
  /// The entry `id` while it is still in the buffer; nullptr otherwise
  /// (a copy is written into `out`).
  bool find(int64_t id, FlightEntry& out) const;

  /// The training step later entries carry (the trainer sets it).
  void set_step(int64_t step) { step_ = step; }

  /// The buffer, oldest first.
  std::vector<FlightEntry> entries() const;
  /// The dump as JSON text: {"version", "rank", "world_size", "groups",
  /// "entries": [...]} — the format analyse_flight_traces reads.
  std::string to_json() const;
  /// Writes to_json() to the dump target (atomically: a temporary file,
  /// then rename). Returns the path written, "" when off, without target,
  /// or when the file cannot be written (it never throws: it runs while an
  /// error is on its way). `blocking` false gives up when the buffer's lock
  /// is taken (from a signal handler).
  std::string dump_to_target(bool blocking = true) const;

  /// Installs handlers that dump the buffer on SIGUSR1 (the job goes on)
  /// and on SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT (best effort,
  /// then the default action). Idempotent.
  void install_signal_dumps();

 private:
  FlightRecorder() = default;
  std::string to_json_locked() const;
  // Asks the pending completes_when() probes (mu_ held).
  void poll_locked() const;

  mutable std::mutex mu_;
  std::atomic<int64_t> capacity_{0};
  std::atomic<int64_t> step_{0};
  // Slot id % capacity. Mutable: reading the buffer first polls the
  // completes_when() probes, whose answers are part of what is read.
  mutable std::vector<FlightEntry> ring_;
  int64_t next_id_ = 0;
  std::vector<std::pair<std::string, int64_t>> seq_;  // (group + "/c" or "/p", last seq)
  std::vector<std::pair<std::string, std::vector<int>>> groups_;
  // Entries waiting for completes_when()'s probe, oldest first.
  mutable std::vector<std::pair<int64_t, std::function<bool()>>> probes_;
  std::string folder_, prefix_;
  int rank_ = 0, world_size_ = 1;
};

}  // namespace titan::dist
