// How busy the other processes keep this machine's cores (Torch-free; Linux /proc).
#pragma once
#include <optional>

namespace routelab {

/// Cumulative CPU time, in clock ticks: all cores together (/proc/stat) and this process's threads (/proc/self/stat).
struct CpuTimes {
  long long busy = 0;   ///< every core: user, nice, system, irq, softirq, steal
  long long total = 0;  ///< every core: busy plus idle and iowait
  long long self = 0;   ///< this process: user plus system time of all its threads
};

/// Now; nullopt where /proc cannot be read (then nothing adapts).
std::optional<CpuTimes> read_cpu_times();

/// Cores the other processes kept busy between two readings: (busy - own) / (wall ticks per core), 0 when no time
/// passed. This process's threads, spinning ones included, are its own and never count.
double other_busy_cores(const CpuTimes& before, const CpuTimes& after, int cores);

/// Threads a run that asked for "every core" should use beside that load: the cores it may use (`available`, the
/// reserved ones already taken off) less the other processes' busy cores rounded to the nearest whole one, at least 1.
/// OpenMP threads that outnumber the free cores wait on each other at every barrier (issue 19 measured a step 2.6x
/// slower beside one busy process on two cores); a thread each on the free cores does not.
int threads_beside_load(int available, double other_cores);

}  // namespace routelab
