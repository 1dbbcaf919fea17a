// How the process runs beside others and on its CPU: OpenMP's wait policy, the BLAS kernels (Torch-free, for every
// entry point).
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace routelab {

/// Settings a process takes only when it loads its libraries, so main() starts itself again with them (first thing
/// in main; returns unless it restarted, and it restarts once at most). Variables the user has set are never changed.
/// routelab-cli and routelab set them before their programs start (app/launcher_main.cpp), which then return here
/// at once: a restart loads LibTorch a second time.
/// - OMP_WAIT_POLICY=PASSIVE (Debian's LibTorch only): GNU OpenMP's threads spin at every barrier by default, and
///   with one other busy process on the machine (or the GUI beside a run) training ran ~5x slower; passive threads
///   sleep there (no cost measured on an idle AMD EPYC; 1.4x slower on the quick-start's small model on an idle
///   Intel Xeon, where a spin before sleeping slowed side-by-side processes on fixed threads 3x: README, Measured).
///   PyPI's LibTorch (MKL's threads) ran small models 11x slower with it, so it keeps the default.
/// - OPENBLAS_CORETYPE, where OpenBLAS (Debian's LibTorch's BLAS) chose kernels below what the CPU runs: OpenBLAS
///   0.3.21 does not know CPUs newer than itself and falls back to its generic Prescott (SSE3) kernels, on an Intel
///   Xeon of 2023 (family 6, model 207, AVX-512) 31 GFLOP/s against 146 for its SkylakeX kernels (one thread, 2048^3
///   sgemm), and RouteLab's training step ran 2.5x slower.
void relaunch_with_process_settings(char** argv);
/// The same restart for the BLAS kernels only (the test suites, whose OpenMP policy ctest sets).
void relaunch_with_native_blas(char** argv);

/// Variables to set (name, value) before a program loads its libraries.
using StartupSettings = std::vector<std::pair<std::string, std::string>>;
/// What the restart above sets where the user has not: OMP_WAIT_POLICY=PASSIVE where `passive_openmp`, and
/// OPENBLAS_CORETYPE (with ROUTELAB_OPENBLAS_CHOSE, for blas_kernels()) where OpenBLAS chose the kernels named
/// `openblas_chose` ("" where no OpenBLAS is loaded) below what the CPU runs. Empty: the process runs as it is.
StartupSettings startup_settings(bool passive_openmp, const std::string& openblas_chose);
/// Whether this build's programs wait passively (ROUTELAB_PASSIVE_OPENMP: Debian's LibTorch).
bool passive_openmp_build();
/// Starts `program` with `argv` in place of this process, `settings` and ROUTELAB_RELAUNCHED=1 set (so that it does
/// not restart itself again). Returns only where exec failed, with `settings` unset again.
void exec_with_settings(const std::string& program, char** argv, const StartupSettings& settings);

/// The OpenBLAS kernel family to ask for (OPENBLAS_CORETYPE) on a CPU of `cpu_level` (cpu_vector_level()) when
/// OpenBLAS chose the kernels named `chosen` (its openblas_get_corename(), any case): "" keeps them (they use the
/// widest vectors the CPU has, or are a family RouteLab does not rank); `avx512_bf16`: the CPU has AVX-512 BF16
/// (OpenBLAS's Cooperlake kernels, else SkylakeX).
std::string openblas_core_upgrade(const std::string& chosen, int cpu_level, bool avx512_bf16);
/// 3: AVX-512 (F, BW, DQ and VL), 2: AVX2 and FMA, 1: AVX, 0: less (or not x86).
int cpu_vector_level();
/// The BLAS kernels this process runs, for run descriptions and benchmark headers: "OpenBLAS SkylakeX kernels", with
/// "(set by RouteLab; OpenBLAS chose Prescott)" after a restart above; "" where no OpenBLAS is loaded (PyPI's
/// LibTorch brings MKL).
std::string blas_kernels();
/// "; " + blas_kernels() for a header that lists settings, "" where no OpenBLAS is loaded.
std::string blas_kernels_note();

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
/// Whether `name` is 1 in the environment: a diagnostic switched on (ROUTELAB_PACKED_ROWS). Callers read it once.
bool switched_on_in_environment(const char* name);

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
