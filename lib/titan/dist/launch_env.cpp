#include "titan/dist/launch_env.hpp"

#include <unistd.h>  // environ (declared under _GNU_SOURCE, which g++ defines)

#include <cstdlib>
#include <string>

#include "titan/util/error.hpp"

namespace titan::dist {
namespace {

using Vars = std::map<std::string, std::string>;

const std::string* find(const Vars& vars, const std::string& key) {
  auto it = vars.find(key);
  return it == vars.end() || it->second.empty() ? nullptr : &it->second;
}

int to_int(const Vars& vars, const std::string& key, long lo, long hi) {
  const std::string* value = find(vars, key);
  TITAN_CHECK(value != nullptr, "environment variable ", key, " is not set");
  char* end = nullptr;
  long v = std::strtol(value->c_str(), &end, 10);
  TITAN_CHECK(end != value->c_str() && *end == '\0', "environment variable ", key, "='", *value,
              "' is not an integer");
  TITAN_CHECK(v >= lo && v <= hi, "environment variable ", key, "=", v, " is out of range [", lo,
              ", ", hi, "]");
  return static_cast<int>(v);
}

int to_int_or(const Vars& vars, const std::string& key, int fallback, long lo, long hi) {
  return find(vars, key) ? to_int(vars, key, lo, hi) : fallback;
}

// "node[01-04],other" -> "node01"; "a,b" -> "a"; "host" -> "host".
std::string first_slurm_host(const std::string& list) {
  std::string first = list.substr(0, list.find(','));
  auto bracket = list.find('[');
  if (bracket == std::string::npos || bracket > list.find(',')) return first;
  std::string prefix = list.substr(0, bracket);
  std::string inside = list.substr(bracket + 1);
  std::string token = inside.substr(0, inside.find_first_of(",-]"));
  return prefix + token;
}

}  // namespace

LaunchEnv parse_launch_env(const Vars& vars) {
  LaunchEnv env;
  constexpr long kMaxWorld = 1 << 20;
  if (find(vars, "RANK") || find(vars, "WORLD_SIZE")) {
    env.source = "torchrun";
    env.world_size = to_int(vars, "WORLD_SIZE", 1, kMaxWorld);
    env.rank = to_int(vars, "RANK", 0, env.world_size - 1);
    env.local_world_size = to_int_or(vars, "LOCAL_WORLD_SIZE", env.world_size, 1, env.world_size);
    env.local_rank = to_int_or(vars, "LOCAL_RANK", env.rank % env.local_world_size, 0,
                               env.local_world_size - 1);
    if (env.world_size > 1) {
      TITAN_CHECK(find(vars, "MASTER_ADDR"), "environment variable MASTER_ADDR is not set (RANK=",
                  env.rank, ", WORLD_SIZE=", env.world_size, ")");
      env.master_addr = *find(vars, "MASTER_ADDR");
      env.master_port = to_int(vars, "MASTER_PORT", 1, 65535);
    }
  } else if (find(vars, "SLURM_PROCID") && find(vars, "SLURM_NTASKS")) {
    env.source = "slurm";
    env.world_size = to_int(vars, "SLURM_NTASKS", 1, kMaxWorld);
    env.rank = to_int(vars, "SLURM_PROCID", 0, env.world_size - 1);
    // SLURM_NTASKS_PER_NODE may read "4(x2)"; the leading number is what we need.
    int per_node = env.world_size;
    if (const std::string* s = find(vars, "SLURM_NTASKS_PER_NODE")) per_node = std::atoi(s->c_str());
    env.local_world_size = per_node > 0 ? per_node : env.world_size;
    env.local_rank = to_int_or(vars, "SLURM_LOCALID", env.rank % env.local_world_size, 0,
                               env.local_world_size - 1);
    if (const std::string* addr = find(vars, "MASTER_ADDR")) {
      env.master_addr = *addr;
    } else if (const std::string* nodes = find(vars, "SLURM_JOB_NODELIST")) {
      env.master_addr = first_slurm_host(*nodes);
    } else {
      TITAN_CHECK(env.world_size == 1, "under Slurm set MASTER_ADDR or SLURM_JOB_NODELIST");
    }
    env.master_port = to_int_or(vars, "MASTER_PORT", 29500, 1, 65535);
  }
  return env;
}

LaunchEnv read_launch_env() {
  Vars vars;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return parse_launch_env(vars);
}

LaunchEnv fake_launch_env(const LaunchEnv& launched, int rank, int world_size) {
  TITAN_CHECK(launched.world_size == 1, "[comm] mode = \"fake_backend\" plays one rank in one process, but this "
              "process was launched as rank ", launched.rank, " of ", launched.world_size, " (", launched.source,
              "): run it alone, and pick the rank with [comm] fake_rank");
  TITAN_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "[comm] fake_rank = ", rank,
              " is outside [0, [comm] fake_world_size = ", world_size, ")");
  LaunchEnv played = launched;
  played.rank = rank;
  played.world_size = world_size;
  played.local_rank = 0;
  played.local_world_size = 1;
  played.source = "fake_backend";
  return played;
}

std::string error_line_prefix() {
  const char* rank = std::getenv("RANK");
  if (rank && !std::getenv("TITAN_LAUNCHER")) return std::string("rank ") + rank + ": ";
  return "";
}

}  // namespace titan::dist
