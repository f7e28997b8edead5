#pragma once
/// @file
/// @brief Heartbeats through the job's store: a background thread on every
/// rank bumps a counter under `titan/heartbeat/<rank>` once a second, so
/// that a rank whose collective failed can tell a peer that is *gone*
/// (killed, stopped, its host lost: its counter stands still) from one that
/// is alive but has not reached the collective.
///
/// The thread talks to the store over its own connection (TCPStore::clone):
/// a store client serialises its calls, and a thread blocked in a `get`
/// (the checkpoint writer waiting for a peer's record, say) must not hold
/// the heartbeat back. Under torchrun the elastic agent serves the store,
/// so it outlives any rank; under `titan run` and Slurm rank 0 serves it,
/// and a rank 0 that dies takes it along (the error then says that).

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "titan/util/periodic_thread.hpp"

namespace c10d {
class Store;
}

namespace titan::dist {

/// @brief How often a rank bumps its counter.
inline constexpr std::chrono::milliseconds kHeartbeatInterval{1000};

/// @brief The peers' counters at one moment.
struct HeartbeatReading {
  std::map<int, int64_t> counts;  ///< rank -> counter (-1: never beat)
  std::chrono::steady_clock::time_point at;
  bool store_reachable = true;  ///< false when the store did not answer
};

/// @brief This rank's heartbeat: started by init_distributed on a job of
/// more than one rank, stopped when the World goes.
class Heartbeat {
 public:
  /// Beats for `rank` through a clone of `store` every `interval`.
  Heartbeat(const c10::intrusive_ptr<c10d::Store>& store, int rank,
            std::chrono::milliseconds interval = kHeartbeatInterval);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  /// @brief Reads the counters of `ranks` (never blocks on a missing key).
  HeartbeatReading read(const std::vector<int>& ranks) const;

  /// @brief The ranks of `before` whose counter has not moved since, read
  /// once at least `window` after `before` was taken (sleeping the rest).
  /// nullopt when the store cannot be reached (nobody can be judged then).
  std::optional<std::vector<int>> silent_since(const HeartbeatReading& before,
                                               std::chrono::milliseconds window) const;

  /// @brief The window that tells a stopped counter from a slow one.
  std::chrono::milliseconds judging_window() const { return interval_ * 5 / 2; }

  /// @brief How often this rank beats.
  std::chrono::milliseconds interval() const { return interval_; }

  /// @brief Leaves `message` on the FailureBoard for this rank as a
  /// knock-on failure, over the heartbeat's own connection (the job's main
  /// one may be held by a thread blocked in a get). Best effort.
  void report_knock_on_failure(const std::string& message) const;

  /// @brief What `ranks` left on the FailureBoard ("rank 2 failed: ..."),
  /// their own failures named before knock-on ones, read now over the
  /// heartbeat's own connection; empty when none did.
  std::string failure_reports(const std::vector<int>& ranks) const;

 private:
  void beat();

  c10::intrusive_ptr<c10d::Store> store_;  ///< this heartbeat's own connection
  int rank_;
  std::chrono::milliseconds interval_;
  mutable std::mutex store_mu_;  ///< readers and the beating thread share the connection
  int64_t count_ = 0;
  std::unique_ptr<PeriodicThread> beating_;  ///< last: stopped first, started once the store is cloned
};

/// @brief The running heartbeat of this process, or null (one rank, or
/// before init_distributed / after shutdown).
const Heartbeat* current_heartbeat();

namespace detail {
/// @brief Set by the World that owns it.
void set_current_heartbeat(const Heartbeat* heartbeat);
}  // namespace detail

}  // namespace titan::dist
