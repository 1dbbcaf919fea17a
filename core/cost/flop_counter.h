// Counted work: the multiply-adds of the matrix products ATen actually executes, from the operand shapes that
// RecordFunction callbacks see at run time, and a per-op-class wall-clock profile of a forward (bench forward).
// No Torch in this header.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "core/bench/part_profile.h"

namespace routelab {

/// Counts, while alive, the matrix products run on the constructing thread: aten::mm, addmm, bmm, baddbmm, mv,
/// addmv, dot, the fused scaled-dot-product-attention kernels of LibTorch 2.x (4 B H Tq Tk hd FLOPs, the full
/// rectangle) and the custom CPU attention kernel, whose profiler event states its own. aten::matmul, aten::linear and aten::einsum are not counted themselves: they dispatch to the ops
/// above, and a counted op nested inside another counted op is skipped, so nothing is counted twice.
///
/// The callback is thread-local (at::addThreadLocalCallback), and ATen's OpenMP workers do not inherit it, so the
/// counter sets this thread's intra-op threads to 1 while it counts (restored on stop): every op of the forward
/// then runs, and is seen, here. Counting is for checks on small inputs, not for timing.
/// Counters nest: an inner counter's products are also counted by the outer one.
class FlopCounter {
 public:
  FlopCounter();
  ~FlopCounter();
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;

  /// Stops counting (idempotent; the destructor calls it).
  void stop();
  /// 2 FLOPs per multiply-add, as core/cost/flops.h.
  double flops() const;
  /// FLOPs by counted op name ("aten::addmm", ...).
  const std::map<std::string, double>& flops_by_op() const;
  /// Counted op calls.
  std::int64_t calls() const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

/// One top-level op name's share of an OpClassProfiler recording.
struct OpTally {
  std::int64_t calls = 0;
  double ms = 0;  ///< inclusive wall time of its calls
};

/// Wall-clock time of a forward by op class, from global RecordFunction callbacks on the profiling thread: each
/// top-level op's inclusive time goes to its class (matmul; the custom CPU attention kernel, whose per-head GEMMs
/// run in OpenMP workers; routing index ops: gather, scatter, index_*, sort, topk, nonzero, where, cat, ...;
/// elementwise and reductions: softmax, norms, activations, arithmetic; copies and allocation; other). Time spent
/// outside any op on this thread (host code) is reported as "outside ops" = wall - sum.
class OpClassProfiler {
 public:
  OpClassProfiler();
  ~OpClassProfiler();
  OpClassProfiler(const OpClassProfiler&) = delete;
  OpClassProfiler& operator=(const OpClassProfiler&) = delete;

  void stop();
  /// Milliseconds by class, "outside ops" included; wall_ms() is their sum.
  std::map<std::string, double> classes_ms() const;
  double wall_ms() const;
  /// Top-level ops dispatched on the profiling thread (what the host launches one by one; the autograd engine's
  /// backward included where it runs on this thread, as it does for CPU tensors).
  std::int64_t ops() const;
  /// The top-level ops by name ("aten::index_select", ...): what the host dispatched, one by one.
  const std::map<std::string, OpTally>& ops_by_name() const;
  /// The top-level ops' time by the part of the model or step they ran in (ROUTELAB_PART; the backward's by its
  /// forward op's part: part_profile.h).
  std::map<std::string, PartTime> parts_ms() const;
  /// parts_ms by top-level op name: part -> op -> time and calls.
  std::map<std::string, std::map<std::string, PartTime>> part_pieces() const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace routelab
