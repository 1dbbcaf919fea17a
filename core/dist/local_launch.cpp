// posix_spawn of the workers with the launch variables added to this process's environment; waitpid watches them.
#include "core/dist/local_launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <map>
#include <thread>

#include "core/util/errors.h"

extern char** environ;

namespace routelab {
namespace {

/// The stop signal (SIGINT, SIGTERM) the --nproc launcher received and has not passed on yet; 0 for none.
std::atomic<int> g_stop_signal{0};
extern "C" void note_stop_signal(int sig) { g_stop_signal.store(sig); }

/// This process's environment with `overrides` replacing or adding variables, as "KEY=VALUE" strings.
std::vector<std::string> environment_with(const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> out;
  for (char** e = environ; *e; ++e) {
    const std::string entry(*e);
    if (!overrides.count(entry.substr(0, entry.find('=')))) out.push_back(entry);
  }
  for (const auto& [key, value] : overrides) out.push_back(key + "=" + value);
  return out;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

/// The exit status of a waited-for child: its code, or 128 + the signal that ended it.
int exit_status(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

}  // namespace

int run_process(const std::vector<std::string>& argv, bool discard_output) {
  if (argv.empty()) throw Error("run_process: no program to run");
  auto args = argv;
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  if (discard_output) ::posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, args.front().c_str(), &actions, nullptr, pointers(args).data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw Error("cannot start " + args.front() + ": " + std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw Error("cannot wait for " + args.front() + ": " + std::strerror(errno));
  return exit_status(status);
}

int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw Error(std::string("cannot open a socket to find a free port: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  if (!ok) throw Error(std::string("cannot find a free port on 127.0.0.1: ") + std::strerror(errno));
  return ntohs(addr.sin_port);
}

DistEnv local_rank_env(int rank, int n, int port, const std::string& launcher) {
  DistEnv env;
  env.rank = env.local_rank = rank;
  env.world_size = env.local_world_size = n;
  env.master_addr = "127.0.0.1";
  env.master_port = port;
  env.launcher = launcher;
  return env;
}

struct LocalRanks::State {
  std::vector<std::string> argv;
  int n = 0, port = 0;
  std::string launcher;
  std::map<pid_t, int> rank_of;  ///< running ranks
};

LocalRanks::LocalRanks(int n, std::vector<std::string> argv, const std::string& launcher)
    : state_(std::make_unique<State>()) {
  if (n < 1) throw ConfigError("--nproc " + std::to_string(n) + ": needs at least 1 process");
  if (argv.empty()) throw Error("LocalRanks: no program to run");
  state_->argv = std::move(argv);
  state_->n = n;
  state_->port = free_local_port();
  state_->launcher = launcher;
}

LocalRanks::~LocalRanks() {
  for (const auto& [pid, rank] : state_->rank_of) ::kill(pid, SIGKILL);
  for (const auto& [pid, rank] : state_->rank_of) ::waitpid(pid, nullptr, 0);
}

int LocalRanks::port() const { return state_->port; }

void LocalRanks::start(int rank) {
  const auto env_of = local_rank_env(rank, state_->n, state_->port, state_->launcher);
  auto env = environment_with({{"RANK", std::to_string(rank)},
                               {"WORLD_SIZE", std::to_string(state_->n)},
                               {"LOCAL_RANK", std::to_string(rank)},
                               {"LOCAL_WORLD_SIZE", std::to_string(state_->n)},
                               {"MASTER_ADDR", env_of.master_addr},
                               {"MASTER_PORT", std::to_string(state_->port)},
                               {"ROUTELAB_LAUNCHER", state_->launcher}});
  auto args = state_->argv;
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, args.front().c_str(), nullptr, nullptr, pointers(args).data(), pointers(env).data());
  if (rc != 0) throw Error("cannot start rank " + std::to_string(rank) + " (" + args.front() + "): " + std::strerror(rc));
  state_->rank_of[pid] = rank;
}

int LocalRanks::wait(double grace_s, const std::function<void(const std::string&)>& say, bool grace_from_start,
                     bool pass_on_stops) {
  auto& rank_of = state_->rank_of;
  using Handler = void (*)(int);
  Handler previous_int = nullptr, previous_term = nullptr;
  if (pass_on_stops) {
    g_stop_signal.store(0);
    previous_int = std::signal(SIGINT, note_stop_signal);
    previous_term = std::signal(SIGTERM, note_stop_signal);
  }
  int first_failure = 0;
  bool grace = grace_from_start, killed = false;  // the grace period runs until `deadline`
  bool stopping = false;  // a stop was passed on: a rank's "stopped" status (130) is what was asked for
  int stop_status = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<long long>(grace_s * 1000));
  while (!rank_of.empty()) {
    int status = 0;
    // Polled while a grace period runs or signals are passed on (a handler does not interrupt a blocking wait).
    const bool poll = grace || pass_on_stops;
    const pid_t pid = ::waitpid(-1, &status, poll ? WNOHANG : 0);
    if (pid > 0 && rank_of.count(pid)) {
      const int code = exit_status(status);
      const int rank = rank_of[pid];
      rank_of.erase(pid);
      if (stopping && code == 130) stop_status = code;
      if (code != 0 && !(stopping && code == 130)) {
        say("rank " + std::to_string(rank) + " of " + std::to_string(state_->n) + " ended with exit status " +
            std::to_string(code) + (WIFSIGNALED(status) ? std::string(" (") + ::strsignal(WTERMSIG(status)) + ")" : ""));
        if (first_failure == 0) first_failure = code;
        if (!grace && !killed) {
          grace = true;
          deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<long long>(grace_s * 1000));
        }
      }
      continue;
    }
    if (pid < 0 && errno != EINTR) break;
    if (const int sig = g_stop_signal.exchange(0); pass_on_stops && sig != 0) {
      for (const auto& [p, rank] : rank_of) ::kill(p, sig);  // each rank stops after the same step, checkpointed
      stopping = true;
    }
    if (grace && std::chrono::steady_clock::now() >= deadline) {
      for (const auto& [p, rank] : rank_of) {
        say("rank " + std::to_string(rank) + " did not end within " + std::to_string(static_cast<int>(grace_s)) +
            " s: killed");
        ::kill(p, SIGKILL);
      }
      grace = false;  // now wait for the killed ones without a limit
      killed = true;
    } else if (poll) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  if (pass_on_stops) {
    std::signal(SIGINT, previous_int);
    std::signal(SIGTERM, previous_term);
  }
  return first_failure != 0 ? first_failure : stop_status;
}

int run_local_workers(int n, const std::vector<std::string>& argv, double grace_s,
                      const std::function<void(const std::string&)>& say) {
  LocalRanks ranks(n, argv, "routelab --nproc");
  for (int rank = 0; rank < n; ++rank) ranks.start(rank);
  return ranks.wait(grace_s, say, /*grace_from_start=*/false, /*pass_on_stops=*/true);
}

}  // namespace routelab
