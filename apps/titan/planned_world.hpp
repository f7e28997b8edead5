#pragma once
// The world of a job that a command plans without launching it (`titan
// estimate`, `titan predict`): --nproc N names the ranks as `titan train
// --nproc N` does, but nothing may be launched.

#include <cstdint>
#include <string>

namespace titan::cli {

/// What rename_nproc_for_planning renames --nproc to.
extern const char* const kPlannedNproc;

/// Renames each --nproc in argv[2..] to kPlannedNproc, so that run_main's
/// self-launch does not see it. Returns the one-line error for a joined
/// "--nproc=N" ("" when there is none): the caller prints it and exits 2,
/// as run_main would report it.
std::string rename_nproc_for_planning(int argc, char** argv, const std::string& command);

/// A positive rank count from `flag` (--nproc, --world_size, WORLD_SIZE);
/// titan::Error "titan COMMAND: FLAG wants a positive number of ranks" otherwise.
int64_t parse_planned_world(const std::string& command, const std::string& flag, const std::string& value);

}  // namespace titan::cli
