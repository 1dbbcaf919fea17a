// How the process runs beside others: OpenMP's wait policy (Torch-free, for every entry point).
#pragma once
#include <string>

namespace routelab {

/// GNU OpenMP (LibTorch's thread pool) reads OMP_WAIT_POLICY once, when the process loads it, and by default its
/// threads spin at every barrier: with one other busy process on the machine (or the GUI beside a run) training ran
/// ~5x slower. Where the user has not set the variable, the process starts itself again with PASSIVE (threads sleep
/// at barriers; no cost measured on an idle machine). Call first thing in main; returns unless it restarted.
/// Only with Debian's LibTorch: PyPI's (MKL's threads) ran small models 11x slower with it on an idle machine.
void relaunch_with_passive_openmp(char** argv);

/// Cores a run started with run.threads = 0 ("every core") leaves free: the GUI reserves one on machines with four
/// or more, so its plots and store reads stay responsive beside a run. An explicit run.threads is never changed.
void reserve_cores(int n);
int reserved_cores();

/// ROUTELAB_MAX_THREADS, when set to a positive number: no run uses more Torch threads (the test suites run once
/// with 1 and once with 2 to catch results that depend on the thread count). 0 when unset.
int max_threads_from_environment();

/// Whether `name` is 0 in the environment: how a GPU path of RouteLab's own is turned off for a comparison with
/// LibTorch's (ROUTELAB_FUSED_NORM, ROUTELAB_FUSED_ROPE, ROUTELAB_VARLEN_ATTENTION). Callers read it once.
bool switched_off_in_environment(const char* name);

/// OMP_WAIT_POLICY as this process runs with it, lower case ("passive"; "default (active spinning)" when unset).
std::string openmp_wait_policy();

}  // namespace routelab

namespace routelab {

/// What identifies a process across hosts and reboots: a run's lease names its writer by this.
struct ProcessIdentity {
  long long pid = 0;
  std::string host;     ///< gethostname()
  std::string boot_id;  ///< /proc/sys/kernel/random/boot_id ("" where the system has none)
  std::string start;    ///< the process's start time in clock ticks after boot (/proc/<pid>/stat), "" if unknown
};

/// This process.
ProcessIdentity this_process();

enum class Liveness {
  Alive,    ///< this host, running (or stopped by a signal: a paused process is alive)
  Gone,     ///< this host and boot, and no such process (or the pid now belongs to a newer process); or rebooted
  Unknown,  ///< another host: nothing here can prove it gone
};
Liveness liveness(const ProcessIdentity& process);

}  // namespace routelab
