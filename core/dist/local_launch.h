// `routelab-cli train --nproc N`: the N processes of a data-parallel run on this machine, started and watched as
// torchrun --standalone does (no Torch here).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dist/launch_env.h"

namespace routelab {

/// Runs `argv` (the program first) in this process's environment and waits: its exit status (128 + signal). With
/// `discard_output` its standard output goes to /dev/null (its errors still reach this process's).
int run_process(const std::vector<std::string>& argv, bool discard_output = false);

/// A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick).
int free_local_port();

/// The launch environment of rank `rank` of `n` on this machine meeting at 127.0.0.1:`port`.
DistEnv local_rank_env(int rank, int n, int port, const std::string& launcher);

/// The processes of one data-parallel run on this machine: each started rank runs `argv` (the program first) with
/// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT (a free port, port()) and
/// ROUTELAB_LAUNCHER=`launcher` added to this process's environment. The GUI starts ranks 1.. and trains rank 0
/// itself; the destructor kills the ranks still running.
class LocalRanks {
 public:
  LocalRanks(int n, std::vector<std::string> argv, const std::string& launcher);
  ~LocalRanks();
  LocalRanks(const LocalRanks&) = delete;
  LocalRanks& operator=(const LocalRanks&) = delete;

  int port() const;
  void start(int rank);
  /// Waits for the started ranks. After a failure (or at once with `grace_from_start`) the others have `grace_s` to
  /// end before they are killed. With `pass_on_stops`, a SIGINT or SIGTERM this process receives meanwhile goes on
  /// to every rank (which stop after the same step) instead of ending it. `say` receives a line for each rank that
  /// failed or was killed. The first failure's exit status (128 + signal for a killed one), or 0.
  int wait(double grace_s, const std::function<void(const std::string&)>& say, bool grace_from_start,
           bool pass_on_stops = false);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// Runs `argv` (the program first) as `n` workers of one run: each gets RANK, WORLD_SIZE, LOCAL_RANK,
/// LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT and ROUTELAB_LAUNCHER. Waits for all of them. When
/// one fails, the others have `grace_s` to end on their own (their next collective tells them, and rank 0 records
/// the run's status) before they are killed. `say` receives a line for each worker that failed. Returns 0 when
/// every worker succeeded, else the first failure's exit status (128 + signal for a killed one). A SIGINT or
/// SIGTERM sent to this process goes on to the workers.
int run_local_workers(int n, const std::vector<std::string>& argv, double grace_s,
                      const std::function<void(const std::string&)>& say);

}  // namespace routelab
