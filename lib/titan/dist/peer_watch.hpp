#pragma once
/// @file
/// @brief The peer watch: a thread that names a dead peer while this rank
/// is blocked where no titan collective can fail for it (NCCL).
///
/// On Gloo a collective with a dead peer fails (connection reset, or its
/// timeout) and ProcessGroup::fail names the peer from the heartbeats. On
/// NCCL the host does not wait in collectives: a dead peer leaves this rank
/// blocked in the next device synchronisation (a loss's `.item()`) until
/// ProcessGroupNCCL's watchdog aborts the process at the collective
/// timeout, with a message that names no rank. The peer watch reads the
/// heartbeat counter of the next rank round the ring once per heartbeat
/// interval; when it has stood still for `window`, it leaves word on the
/// FailureBoard, dumps the flight recorder and ends this rank with a
/// one-line error naming that peer — with what the FailureBoard already
/// holds, when a rank failed on its own before it stopped beating (a rank
/// whose exit hangs in its teardown, say). One rank notices each dead peer; every
/// launcher turns that rank's exit into the end of the job (titan run and
/// torchrun stop the other ranks, srun with --kill-on-bad-exit).
///
/// Each rank reads one key per interval, so the store's load grows with
/// the number of ranks, not with its square.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "titan/util/periodic_thread.hpp"

namespace titan::dist {

class Heartbeat;

/// @brief Whether init_distributed starts a peer watch: TITAN_PEER_WATCH=1
/// or 0 decides; unset, on where collectives do not block the host (a CUDA
/// device: NCCL) and off on Gloo, whose collectives fail on their own.
bool peer_watch_wanted(bool device_is_cuda);

/// @brief How long a peer's counter may stand still before the watch calls
/// it gone: half the collective timeout (so that it speaks before NCCL's
/// watchdog), at least three heartbeat intervals, at most 60 s.
std::chrono::milliseconds peer_watch_window(std::chrono::milliseconds collective_timeout,
                                            std::chrono::milliseconds heartbeat_interval);

/// @brief The watch of one peer (the next rank round the ring). When the
/// peer is judged gone it prints this rank's one-line error (quoting the
/// FailureBoard's words of any rank), leaves word on the FailureBoard,
/// dumps the flight recorder and exits 1.
class PeerWatch {
 public:
  /// Starts watching rank (rank + 1) % world_size through `heartbeat`,
  /// which must outlive the watch.
  PeerWatch(const Heartbeat& heartbeat, int rank, int world_size, std::chrono::milliseconds window);
  ~PeerWatch();

 private:
  // One look at the peer's counter, on `thread`'s time.
  bool look(const PeriodicThread& thread);
  [[noreturn]] void gone(const std::string& message);

  using Clock = std::chrono::steady_clock;
  const Heartbeat& heartbeat_;
  int peer_;
  std::vector<int> others_;  // every rank but this one, the peer first: whose board words to quote
  std::chrono::milliseconds window_;
  int64_t last_count_ = -2;  // no reading yet
  Clock::time_point last_change_ = Clock::now();
  Clock::time_point store_answered_ = Clock::now();
  std::unique_ptr<PeriodicThread> looking_;  // last: stopped first
};

}  // namespace titan::dist
