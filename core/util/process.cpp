// The restart happens before anything else runs, so nothing is done twice.
#include "core/util/process.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <utility>
#include <vector>

namespace routelab {

namespace {

#ifdef ROUTELAB_PASSIVE_OPENMP
constexpr bool kPassiveOpenMP = true;
#else
constexpr bool kPassiveOpenMP = false;  // this LibTorch keeps OpenMP's default (ROUTELAB_PASSIVE_OPENMP)
#endif

/// OpenBLAS's name for the kernels it runs, where this process has OpenBLAS loaded ("" otherwise).
std::string openblas_corename() {
  using Corename = char* (*)();
  const auto get = reinterpret_cast<Corename>(::dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  const char* name = get ? get() : nullptr;
  return name ? name : "";
}

std::string lowercase_ascii(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

/// The vector level of an OpenBLAS kernel family (as cpu_vector_level()); -1 for families not ranked here.
int openblas_core_level(const std::string& chosen) {
  static const std::vector<std::pair<const char*, int>> levels = {
      {"sapphirerapids", 3}, {"cooperlake", 3}, {"skylakex", 3}, {"haswell", 2},     {"zen", 2},
      {"excavator", 2},      {"sandybridge", 1}, {"bulldozer", 1}, {"piledriver", 1}, {"steamroller", 1},
      {"prescott", 0},       {"core2", 0},      {"penryn", 0},     {"dunnington", 0}, {"nehalem", 0},
      {"atom", 0},           {"barcelona", 0},  {"opteron", 0},    {"nano", 0},       {"katmai", 0},
      {"coppermine", 0},     {"northwood", 0},  {"banias", 0}};
  const auto name = lowercase_ascii(chosen);
  for (const auto& [family, level] : levels)
    if (name == family) return level;
  return -1;
}

/// This program's file, so the restarted process keeps its name in ps and top (exec of /proc/self/exe names it
/// "exe"); /proc/self/exe itself where the file is gone (rebuilt or deleted while it runs).
std::string executable_path() {
  char path[4096];
  const auto n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  const std::string resolved = n > 0 ? std::string(path, static_cast<std::size_t>(n)) : "";
  const std::string deleted = " (deleted)";
  if (resolved.empty() || (resolved.size() > deleted.size() &&
                           resolved.compare(resolved.size() - deleted.size(), deleted.size(), deleted) == 0))
    return "/proc/self/exe";
  return resolved;
}

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

void relaunch(char** argv, bool passive_openmp) {
  if (std::getenv("ROUTELAB_RELAUNCHED") != nullptr) return;
  const auto settings = startup_settings(passive_openmp, openblas_corename());
  if (!settings.empty()) exec_with_settings(executable_path(), argv, settings);  // returns where exec failed
}

}  // namespace

StartupSettings startup_settings(bool passive_openmp, const std::string& openblas_chose) {
  StartupSettings settings;
  if (passive_openmp && std::getenv("OMP_WAIT_POLICY") == nullptr) settings.emplace_back("OMP_WAIT_POLICY", "PASSIVE");
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr && !openblas_chose.empty()) {
    if (const auto core = openblas_core_upgrade(openblas_chose, cpu_vector_level(), cpu_has_avx512_bf16());
        !core.empty()) {
      settings.emplace_back("OPENBLAS_CORETYPE", core);
      settings.emplace_back("ROUTELAB_OPENBLAS_CHOSE", openblas_chose);  // for blas_kernels()
    }
  }
  return settings;
}

bool passive_openmp_build() { return kPassiveOpenMP; }

void exec_with_settings(const std::string& program, char** argv, const StartupSettings& settings) {
  for (const auto& [name, value] : settings) ::setenv(name.c_str(), value.c_str(), 1);
  ::setenv("ROUTELAB_RELAUNCHED", "1", 1);  // never twice, whatever happens to the variables
  ::execv(program.c_str(), argv);
  for (const auto& setting : settings) ::unsetenv(setting.first.c_str());  // exec failed: go on as started
}

void relaunch_with_process_settings(char** argv) { relaunch(argv, kPassiveOpenMP); }
void relaunch_with_native_blas(char** argv) { relaunch(argv, false); }

std::string openblas_core_upgrade(const std::string& chosen, int cpu_level, bool avx512_bf16) {
  const int level = openblas_core_level(chosen);
  if (level < 0 || level >= cpu_level) return "";
  if (cpu_level >= 3) return avx512_bf16 ? "Cooperlake" : "SkylakeX";
  if (cpu_level == 2) return "Haswell";
  return "Sandybridge";
}

int cpu_vector_level() {
#if defined(__x86_64__) || defined(__i386__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return 3;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 2;
  if (__builtin_cpu_supports("avx")) return 1;
#endif
  return 0;
}

std::string blas_kernels() {
  const auto name = openblas_corename();
  if (name.empty()) return "";
  std::string text = "OpenBLAS " + name + " kernels";
  const char* chose = std::getenv("ROUTELAB_OPENBLAS_CHOSE");
  const char* set = std::getenv("OPENBLAS_CORETYPE");
  if (chose != nullptr && set != nullptr) text += std::string(" (set by RouteLab; OpenBLAS chose ") + chose + ")";
  return text;
}

std::string blas_kernels_note() {
  const auto blas = blas_kernels();
  return blas.empty() ? "" : "; " + blas;
}

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

bool switched_on_in_environment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::string(value) == "1";
}

std::string openmp_wait_policy() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  if (policy == nullptr || *policy == '\0') return "default (active spinning)";
  return lowercase_ascii(policy);
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
