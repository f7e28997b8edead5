#pragma once
/// @file
/// @brief The entry point every titan program shares: `--nproc N`
/// self-launch, one-line errors, failure reports to peers, clean shutdown.

#include <functional>
#include <exception>
#include <optional>
#include <string>

namespace titan {

/// @brief If the arguments hold `--nproc N` (or `--nproc=N`) and no launcher
/// started this process, starts N copies of this program through
/// launch::launch_local without that flag and returns their exit code.
/// Under a launcher (RANK set) the flag is removed and must equal
/// WORLD_SIZE. `--master-port P` is taken the same way. Removes the flags it
/// reads from argc/argv. `before_launch`, when given, runs first with the
/// remaining arguments and N: it checks the job once, in this process, and
/// a titan::Error it throws starts no rank.
std::optional<int> maybe_self_launch(int& argc, char** argv,
                                     const std::function<void(int, char**, int)>& before_launch = {});

/// @brief Runs `body` as a titan program's main.
///
/// Handles `--nproc` (see maybe_self_launch); on success leaves the job with
/// dist::shutdown() and returns body's code; on any exception prints
/// "error: <one line>" (with the rank when not under our launcher), tells
/// the peers through the FailureBoard, and exits 1 at once — without the
/// destructors that could wait on a stuck collective. `before_launch`: see
/// maybe_self_launch (`titan train` checks its config there, so that a bad
/// one is one line, not one per rank).
int run_main(int argc, char** argv, const std::function<int(int, char**)>& body,
             const std::function<void(int, char**, int)>& before_launch = {});

/// @brief The first line of `e`'s message (c10::Error without its backtrace).
std::string error_message(const std::exception& e);

}  // namespace titan
