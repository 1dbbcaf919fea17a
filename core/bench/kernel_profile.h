// Where a GPU's time goes (issue 18): the kernels a device ran between two points of a benchmark, from PyTorch's
// profiler (Kineto, LibTorch 2.4+), summed by kernel and by class (matrix products, attention, RouteLab's kernels,
// routing index ops, copies, norms and reductions, elementwise, the optimizer), with the time the device sat idle
// waiting for the host. The host-side view (time per ATen op on the calling thread) is OpClassProfiler's. No Torch
// in this header.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/bench/part_profile.h"

namespace routelab {

/// One kernel (or memcpy/memset) the device ran: its name as the profiler reports it and its interval.
struct KernelEvent {
  std::string name;
  std::uint64_t start_ns = 0, end_ns = 0;
};

struct KernelSummary {
  std::string name;  ///< kernel_display_name of the kernel
  std::string kernel_class;
  std::int64_t calls = 0;
  double ms = 0;
};

inline constexpr const char* kKernelIdleClass = "idle (the device waiting for the host)";

struct KernelProfile {
  double wall_ms = 0;  ///< host time from the start of recording to its stop
  double busy_ms = 0;  ///< time at least one kernel ran (overlapping kernels counted once)
  std::vector<KernelSummary> kernels;  ///< by total time, longest first
  /// Kernel time by the part of the model or step whose op launched it (ROUTELAB_PART); in a CPU recording, the
  /// top-level ops' time (as OpClassProfiler::parts_ms)
  std::map<std::string, PartTime> parts;
  /// `parts` by what the work was: part -> kernel (display name; in a CPU recording, top-level op) -> time, calls
  std::map<std::string, std::map<std::string, PartTime>> part_pieces;

  /// From the recorded events: kernels grouped by display name, busy time as the union of their intervals.
  static KernelProfile from_events(const std::vector<KernelEvent>& events, double wall_ms);
  /// Milliseconds by kernel class, with kKernelIdleClass = max(0, wall - busy).
  std::map<std::string, double> classes_ms() const;
  /// The classes and the `top` longest kernels as text, times divided by `per` (e.g. per training step).
  std::string to_table(int top, double per, const std::string& unit) const;
};

/// A kernel's name without "void ", anonymous namespaces and its parameter list (template arguments kept).
std::string kernel_display_name(std::string_view name);
/// The class of a kernel by its name: cuBLAS/CUTLASS products, flash/cuDNN/efficient attention, RouteLab's own,
/// index ops, copies and fills, norms and reductions, elementwise, the optimizer's multi-tensor kernels, other.
const char* kernel_class(std::string_view name);

/// Why kernel profiling cannot run with this build ("" when it can): it needs LibTorch 2.4+ (Kineto).
std::string kernel_profiling_unavailable();

/// Records the kernels a CUDA device runs from construction to stop() (cuda = false: the ATen ops the CPU runs,
/// nested ops overlapping their callers, used by the tests). One recording per process at a time. Throws ConfigError
/// where kernel_profiling_unavailable() says why.
class KernelProfiler {
 public:
  explicit KernelProfiler(bool cuda);
  ~KernelProfiler();
  KernelProfiler(const KernelProfiler&) = delete;
  KernelProfiler& operator=(const KernelProfiler&) = delete;

  /// Stops recording (the caller synchronises the device first); trace_path, when given, receives the whole
  /// recording as a Chrome trace (host ops and kernels).
  KernelProfile stop(const std::string& trace_path = {});

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace routelab
