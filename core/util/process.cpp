// The restart happens before anything else runs, so nothing is done twice.
#include "core/util/process.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>

namespace routelab {

#ifdef ROUTELAB_PASSIVE_OPENMP
void relaunch_with_passive_openmp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("ROUTELAB_RELAUNCHED") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::setenv("ROUTELAB_RELAUNCHED", "1", 1);  // never twice, whatever happens to the variable
  ::execv("/proc/self/exe", argv);
  ::unsetenv("OMP_WAIT_POLICY");  // exec failed: go on as started, with the default policy
}
#else
void relaunch_with_passive_openmp(char**) {}  // this LibTorch keeps OpenMP's default (ROUTELAB_PASSIVE_OPENMP)
#endif

namespace {
std::atomic<int> g_reserved_cores{0};
}  // namespace

void reserve_cores(int n) { g_reserved_cores = std::max(0, n); }
int reserved_cores() { return g_reserved_cores.load(); }

int max_threads_from_environment() {
  const char* text = std::getenv("ROUTELAB_MAX_THREADS");
  if (text == nullptr) return 0;
  const int n = std::atoi(text);
  return n > 0 ? n : 0;
}

bool switched_off_in_environment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::string(value) == "0";
}

std::string openmp_wait_policy() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  if (policy == nullptr || *policy == '\0') return "default (active spinning)";
  std::string s = policy;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace routelab

namespace routelab {
namespace {

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

/// Field 22 of /proc/<pid>/stat (start time in ticks after boot); the command name in field 2 may hold spaces and
/// parentheses, so fields are counted after its last ')'. "" when the process does not exist.
std::string start_ticks(long long pid) {
  const std::string stat = first_line("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i)
    if (i == 22) return field;
  return "";
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

}  // namespace

ProcessIdentity this_process() {
  // Read from /proc once per process (a forked child has another pid, so it reads its own).
  static std::mutex mutex;
  static ProcessIdentity cached;
  const auto pid = static_cast<long long>(::getpid());
  std::lock_guard lock(mutex);
  if (cached.pid != pid) {
    cached.pid = pid;
    cached.host = host_name();
    cached.boot_id = first_line("/proc/sys/kernel/random/boot_id");
    cached.start = start_ticks(pid);
  }
  return cached;
}

Liveness liveness(const ProcessIdentity& process) {
  const ProcessIdentity me = this_process();
  if (process.host != me.host) return Liveness::Unknown;
  if (!process.boot_id.empty() && !me.boot_id.empty() && process.boot_id != me.boot_id) return Liveness::Gone;
  const std::string start = start_ticks(process.pid);
  if (start.empty()) return Liveness::Gone;
  if (!process.start.empty() && start != process.start) return Liveness::Gone;  // the pid was reused
  return Liveness::Alive;
}

}  // namespace routelab
