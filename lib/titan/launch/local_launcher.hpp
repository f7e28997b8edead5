#pragma once
/// @file
/// @brief The local launcher behind `titan run` and every program's
/// `--nproc N`: torchrun's standalone mode for one machine.

#include <string>
#include <vector>

namespace titan::launch {

/// @brief What to launch and how.
struct LaunchOptions {
  int nproc = 1;               ///< ranks to start (WORLD_SIZE)
  int master_port = 0;         ///< rendezvous port; 0 picks a free one
  std::vector<std::string> command;  ///< program and its arguments
  bool prefix_output = true;   ///< prefix every output line with "[rank k] "
  double grace_seconds = 5.0;  ///< after a failure, SIGTERM then SIGKILL after this
  /// Stop the other ranks when one fails (torchrun's behaviour). Off, the
  /// launcher waits for every rank to end on its own: the fault tests use it
  /// to see that surviving ranks stop by themselves and name the failed one.
  bool stop_on_failure = true;
};

/// @brief Starts `nproc` copies of `command` with torchrun's environment
/// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1,
/// MASTER_PORT, and OMP_NUM_THREADS = cores / nproc unless set), relays their
/// output, and waits. When a rank exits non-zero or dies by a signal the
/// others are stopped and the launcher prints which rank failed and how.
/// Ctrl-C (SIGINT/SIGTERM) is passed on to every rank.
/// @return 0 when every rank exited 0; otherwise the failed rank's exit
/// status (128+signal for a signal), or 1.
int launch_local(const LaunchOptions& options);

/// @brief A TCP port on 127.0.0.1 that was free a moment ago, drawn below
/// the kernel's ephemeral range (ip_local_port_range) so that no outgoing
/// connection takes it before the job binds it.
int pick_free_port();

}  // namespace titan::launch
