#pragma once
/// @file
/// @brief Reads where this process sits in a job from torchrun's or Slurm's
/// environment variables.

#include <map>
#include <string>

namespace titan::dist {

/// @brief This process's place in the job, as a launcher described it.
struct LaunchEnv {
  int rank = 0;              ///< global rank, 0 ≤ rank < world_size
  int world_size = 1;        ///< number of processes in the job
  int local_rank = 0;        ///< rank on this node (picks the GPU)
  int local_world_size = 1;  ///< processes on this node
  std::string master_addr = "127.0.0.1";  ///< host of the rendezvous store (rank 0)
  int master_port = 29500;   ///< port of the rendezvous store
  std::string source = "none";  ///< "torchrun", "slurm" or "none" (a single process)
};

/// @brief Parses a LaunchEnv from `vars` (the process environment by default).
///
/// torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
/// MASTER_ADDR, MASTER_PORT) win over Slurm's (SLURM_PROCID, SLURM_NTASKS,
/// SLURM_LOCALID, SLURM_NTASKS_PER_NODE, first host of SLURM_JOB_NODELIST);
/// with neither it is a world of one. Throws titan::Error naming the variable
/// for any value that is missing, not a number or out of range.
LaunchEnv parse_launch_env(const std::map<std::string, std::string>& vars);

/// @brief parse_launch_env over the real process environment.
LaunchEnv read_launch_env();

/// @brief The place a fake rank plays ([comm] mode = "fake_backend"): rank
/// `rank` of `world_size`, alone on its node (its GPU is the first visible
/// one). `launched` is where the launcher put this process: a world of one,
/// else titan::Error in one line (the fake backend plays one rank in one
/// process; N processes would each play the same).
LaunchEnv fake_launch_env(const LaunchEnv& launched, int rank, int world_size);

/// @brief What a rank's one-line error starts with: "rank N: " under
/// torchrun (RANK set; its log interleaves the ranks' lines), "" alone or
/// under titan's launcher (TITAN_LAUNCHER set: it prefixes each line itself).
std::string error_line_prefix();

}  // namespace titan::dist
