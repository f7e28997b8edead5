#pragma once
/// @file
/// @brief Ctrl-C as a request, not a kill: the first SIGINT (or SIGTERM)
/// sets a flag that the training loop reads between steps, so a run stops
/// after a whole optimizer step, with its summary (and, later, its
/// checkpoint). A second Ctrl-C kills the process as usual.

namespace titan::train {

/// @brief While alive, SIGINT and SIGTERM set a flag instead of killing the
/// process; the previous handlers come back on destruction. One instance at
/// a time (the flag is process-wide, as signals are).
class StopSignal {
 public:
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  /// @brief True once a signal arrived.
  bool requested() const;
  /// @brief The signal that arrived (SIGINT, SIGTERM), or 0.
  int signal_number() const;
  /// @brief Forgets an earlier signal (tests).
  void reset();
};

}  // namespace titan::train
