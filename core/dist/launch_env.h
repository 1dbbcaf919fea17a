// Where a data-parallel process stands: its rank and its peers' rendezvous, read from the variables PyTorch's
// launchers set (torchrun, `routelab-cli train --nproc`) or from Slurm's (srun). No Torch here.
#pragma once
#include <functional>
#include <optional>
#include <string>

namespace routelab {

struct DistEnv {
  int rank = 0;               ///< this process among all of them, 0 .. world_size - 1
  int world_size = 1;
  int local_rank = 0;         ///< this process among those of its node: it binds to GPU local_rank
  int local_world_size = 1;   ///< processes on this node (their CPU threads share its cores)
  std::string master_addr;    ///< host of the rendezvous store (rank 0's, or torchrun's agent's)
  int master_port = 0;
  /// torchrun's agent already serves the store at master_addr:master_port (TORCHELASTIC_USE_AGENT_STORE): every
  /// rank is a client; otherwise rank 0 serves it.
  bool agent_store = false;
  std::string launcher;       ///< "torchrun", "slurm", "routelab --nproc" or "environment"

  /// "rank 1 of 4 (local 1 of 2), rendezvous 10.0.0.1:29500, torchrun".
  std::string describe() const;
};

/// Reads a variable of the environment (nullopt when unset).
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

/// The data-parallel setting of a process, or nullopt when it was started alone (neither WORLD_SIZE nor a Slurm
/// step's task count is set). PyTorch's variables win over Slurm's: RANK, WORLD_SIZE, LOCAL_RANK (default: 0 on a
/// single node, else required), LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (both required). Under srun:
/// SLURM_PROCID, SLURM_STEP_NUM_TASKS (or SLURM_NTASKS), SLURM_LOCALID, SLURM_STEP_TASKS_PER_NODE's first count;
/// the rendezvous host defaults to the first host of SLURM_STEP_NODELIST (or SLURM_NODELIST), the port to 29500.
/// A missing or malformed value is a ConfigError naming the variable.
std::optional<DistEnv> dist_env_from(const EnvLookup& lookup);
/// dist_env_from over this process's environment.
std::optional<DistEnv> dist_env_from_process();

/// The first host of a Slurm host list: "gpu[003-006,9],login1" -> "gpu003"; "" for an empty list.
std::string first_slurm_host(const std::string& nodelist);

}  // namespace routelab
