// The launchers' variables, checked one by one so that a typo in a job script names the variable at fault.
#include "core/dist/launch_env.h"

#include <cstdlib>

#include "core/util/errors.h"

namespace routelab {
namespace {

/// The variable as a whole number in [min, max]; a ConfigError naming it otherwise.
int int_var(const std::string& name, const std::string& value, long min, long max) {
  std::size_t used = 0;
  long v = 0;
  try {
    v = std::stol(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size())
    throw ConfigError("environment " + name + "=" + value + ": not a whole number");
  if (v < min || v > max)
    throw ConfigError("environment " + name + "=" + value + ": outside " + std::to_string(min) + ".." +
                      std::to_string(max));
  return static_cast<int>(v);
}

std::string require(const EnvLookup& lookup, const std::string& name, const std::string& why) {
  const auto v = lookup(name);
  if (!v || v->empty()) throw ConfigError("environment " + name + " is not set; " + why);
  return *v;
}

/// The first count of a Slurm tasks-per-node list: "4(x2),3" -> 4.
std::optional<int> first_count(const std::optional<std::string>& list, const std::string& name) {
  if (!list || list->empty()) return std::nullopt;
  const auto end = list->find_first_not_of("0123456789");
  return int_var(name, list->substr(0, end), 1, 1 << 20);
}

std::optional<DistEnv> torch_style(const EnvLookup& lookup) {
  DistEnv env;
  env.world_size = int_var("WORLD_SIZE", *lookup("WORLD_SIZE"), 1, 1 << 20);
  env.rank = int_var("RANK", require(lookup, "RANK", "WORLD_SIZE is set, so each process needs its RANK"), 0,
                     env.world_size - 1);
  const auto local_world = lookup("LOCAL_WORLD_SIZE");
  env.local_world_size = local_world ? int_var("LOCAL_WORLD_SIZE", *local_world, 1, env.world_size) : env.world_size;
  if (const auto local = lookup("LOCAL_RANK"))
    env.local_rank = int_var("LOCAL_RANK", *local, 0, env.local_world_size - 1);
  else if (env.local_world_size == env.world_size)
    env.local_rank = env.rank;  // one node: the local rank is the rank
  else
    throw ConfigError("environment LOCAL_RANK is not set; with processes on several nodes each needs its LOCAL_RANK");
  const std::string why = "the ranks meet at MASTER_ADDR:MASTER_PORT (torchrun sets both)";
  env.master_addr = require(lookup, "MASTER_ADDR", why);
  env.master_port = int_var("MASTER_PORT", require(lookup, "MASTER_PORT", why), 1, 65535);
  const auto agent = lookup("TORCHELASTIC_USE_AGENT_STORE");
  env.agent_store = agent && (*agent == "True" || *agent == "true" || *agent == "1");
  if (lookup("ROUTELAB_LAUNCHER"))
    env.launcher = *lookup("ROUTELAB_LAUNCHER");
  else
    env.launcher = lookup("TORCHELASTIC_RUN_ID") ? "torchrun" : "environment";
  return env;
}

std::optional<DistEnv> slurm_style(const EnvLookup& lookup) {
  const auto tasks = lookup("SLURM_STEP_NUM_TASKS") ? lookup("SLURM_STEP_NUM_TASKS") : lookup("SLURM_NTASKS");
  const std::string tasks_name = lookup("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
  if (!tasks || !lookup("SLURM_PROCID") || !lookup("SLURM_STEP_ID")) return std::nullopt;  // not inside srun
  DistEnv env;
  env.launcher = "slurm";
  env.world_size = int_var(tasks_name, *tasks, 1, 1 << 20);
  env.rank = int_var("SLURM_PROCID", *lookup("SLURM_PROCID"), 0, env.world_size - 1);
  env.local_world_size = first_count(lookup("SLURM_STEP_TASKS_PER_NODE"), "SLURM_STEP_TASKS_PER_NODE")
                             .value_or(env.world_size);
  env.local_rank = lookup("SLURM_LOCALID") ? int_var("SLURM_LOCALID", *lookup("SLURM_LOCALID"), 0, 1 << 20) : 0;
  if (const auto addr = lookup("MASTER_ADDR"); addr && !addr->empty()) {
    env.master_addr = *addr;
  } else {
    const auto nodes = lookup("SLURM_STEP_NODELIST") ? lookup("SLURM_STEP_NODELIST") : lookup("SLURM_NODELIST");
    env.master_addr = nodes ? first_slurm_host(*nodes) : "";
    if (env.master_addr.empty())
      throw ConfigError("environment MASTER_ADDR is not set and SLURM_STEP_NODELIST names no host to meet at");
  }
  const auto port = lookup("MASTER_PORT");
  env.master_port = port ? int_var("MASTER_PORT", *port, 1, 65535) : 29500;
  return env;
}

}  // namespace

std::string DistEnv::describe() const {
  return "rank " + std::to_string(rank) + " of " + std::to_string(world_size) + " (local " +
         std::to_string(local_rank) + " of " + std::to_string(local_world_size) + "), rendezvous " + master_addr + ":" +
         std::to_string(master_port) + (agent_store ? " (agent's store)" : "") + ", " + launcher;
}

std::optional<DistEnv> dist_env_from(const EnvLookup& lookup) {
  if (lookup("WORLD_SIZE")) return torch_style(lookup);
  return slurm_style(lookup);
}

std::optional<DistEnv> dist_env_from_process() {
  return dist_env_from([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  });
}

std::string first_slurm_host(const std::string& nodelist) {
  // Hosts are separated by commas outside brackets; a bracket holds ranges of zero-padded numbers.
  const auto comma = nodelist.find(',');
  const auto bracket = nodelist.find('[');
  if (bracket == std::string::npos || (comma != std::string::npos && comma < bracket))
    return nodelist.substr(0, comma);
  const auto prefix = nodelist.substr(0, bracket);
  const auto end = nodelist.find_first_of(",-]", bracket + 1);
  return prefix + nodelist.substr(bracket + 1, end == std::string::npos ? std::string::npos : end - bracket - 1);
}

}  // namespace routelab
