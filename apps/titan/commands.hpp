#pragma once
// The subcommands of the `titan` program, one file each.

namespace titan::cli {

/// `titan run --nproc N [--master-port P] -- PROGRAM ARGS...`
int cmd_run(int argc, char** argv);
/// `titan collectives [--nproc N]`: every collective once, what each rank holds.
int cmd_collectives(int argc, char** argv);

}  // namespace titan::cli
