// `--nproc N` and the launchers' environment, for the commands that train.
#include <unistd.h>

#include <climits>
#include <iostream>

#include "app/cli_commands.h"
#include "core/dist/local_launch.h"
#include "core/util/errors.h"

namespace routelab::cli {
namespace {

std::vector<std::string>& arguments() {
  static std::vector<std::string> args;
  return args;
}

/// This executable (argv[0] may be a bare name found on PATH).
std::string own_executable() {
  char path[PATH_MAX];
  const auto n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return arguments().empty() ? "routelab-cli" : arguments().front();
  return std::string(path, static_cast<std::size_t>(n));
}

}  // namespace

void remember_arguments(int argc, char** argv) { arguments().assign(argv, argv + argc); }

int run_nproc(int nproc) {
  std::vector<std::string> argv{own_executable()};
  const auto& args = arguments();
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--nproc") {
      ++i;  // and its value
      continue;
    }
    if (args[i].rfind("--nproc=", 0) == 0) continue;
    argv.push_back(args[i]);
  }
  std::cout << "routelab-cli: starting " << nproc << " local rank" << (nproc == 1 ? "" : "s") << std::endl;
  // A failed rank's peers learn it at their next collective and end themselves (rank 0 records the run's status);
  // the ones still running after a minute are killed.
  return run_local_workers(nproc, argv, /*grace_s=*/60.0,
                           [](const std::string& line) { std::cerr << "routelab-cli: " << line << "\n"; });
}

std::optional<DistEnv> launched_rank(int nproc) {
  auto env = dist_env_from_process();
  if (env && nproc > 0)
    throw ConfigError("--nproc " + std::to_string(nproc) + ": this process is already " + env->describe() +
                      "; give --nproc to a process started alone, or let the launcher start the ranks");
  return env;
}

}  // namespace routelab::cli
