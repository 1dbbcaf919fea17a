// Time by part of a model or of a training step (issue 18: which part of a routed layer costs what). The model code
// names its parts with ROUTELAB_PART (core/models/blocks/part_scope.h: user-scope profiler events); a profile
// (OpClassProfiler on the host, KernelProfiler on a GPU) hands this class those spans, the backward's node events,
// the ops that created the nodes, and the work to attribute: a top-level op's host time, a kernel's device time.
// Work goes to the innermost part open on its thread when it was launched; work inside the backward goes to the part
// in which the forward op that created its autograd node ran (matched by the node's sequence number: the last op
// numbered at most the node's number on the forward's thread), so a part's backward is its own. No Torch here.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace routelab {

inline constexpr const char* kNoPart = "(outside every part)";
inline constexpr const char* kUnmatchedBackward = "(backward of no recorded forward op)";
inline constexpr const char* kUnlinkedWork = "(kernels launched by no recorded op)";

struct PartTime {
  double forward_ms = 0;   ///< outside the backward: the forward, and steps such as the optimizer's
  double backward_ms = 0;  ///< inside the backward, attributed to the forward op's part
  /// the pieces of work (top-level ops, kernels) counted in forward_ms and backward_ms
  double forward_calls = 0, backward_calls = 0;
  double total() const { return forward_ms + backward_ms; }
  double calls() const { return forward_calls + backward_calls; }
};

class PartAttribution {
 public:
  /// A span of the part `name` (without ROUTELAB_PART_PREFIX) on `thread`, times in ns on one clock.
  void part(std::uint64_t thread, std::uint64_t start, std::uint64_t end, std::string name);
  /// An autograd node evaluated on `thread` over [start, end]: the node created by the op numbered `seq` on
  /// `forward_thread` (the forward's sequence numbers count per thread).
  void backward(std::uint64_t thread, std::uint64_t start, std::uint64_t end, std::int64_t seq,
                std::uint64_t forward_thread);
  /// The autograd engine's evaluation of a node on `thread` ("autograd::engine::evaluate_function: ..."): the node's
  /// span and the engine's own work around it (summing the gradients a tensor receives from several uses, reducing
  /// broadcast gradients), which goes to the node's part.
  void evaluation(std::uint64_t thread, std::uint64_t start, std::uint64_t end);
  /// An op started at `start` on `thread` with the sequence number `seq` of the node it would create (ignored when
  /// negative or inside a backward node: only forward ops create the nodes).
  void op(std::uint64_t thread, std::uint64_t start, std::int64_t seq);
  /// `ms` of work launched at `at` on `thread`; `what`: its name (a kernel's, a top-level op's) for pieces().
  void work(std::uint64_t thread, std::uint64_t at, double ms, std::string what = {});
  /// `ms` of work no recorded op launched.
  void unlinked(double ms, std::string what = {});

  /// Milliseconds by part name, kNoPart for work outside every part, kUnmatchedBackward for backward nodes whose
  /// forward op was not recorded (gradient accumulation into the leaves: no number; nodes made before the
  /// recording).
  std::map<std::string, PartTime> parts() const;
  /// The same attribution by what the work was: part -> work's name -> its time and calls in that part.
  std::map<std::string, std::map<std::string, PartTime>> pieces() const;

 private:
  struct Span {
    std::uint64_t start = 0, end = 0;
    std::string name;          // parts
    std::int64_t seq = -1;     // backward nodes
    std::uint64_t forward_thread = 0;
  };
  struct Op {
    std::uint64_t thread = 0, start = 0;
    std::int64_t seq = -1;
  };
  struct Work {
    std::uint64_t thread = 0, at = 0;
    double ms = 0;
    std::string what;
  };
  /// Calls visit(part, backward, work) for every piece of work, unlinked work included (kUnlinkedWork, forward).
  template <typename Visit>
  void attribute(Visit&& visit) const;
  std::map<std::uint64_t, std::vector<Span>> parts_, backward_, evaluations_;
  std::vector<Op> ops_;
  std::vector<Work> work_, unlinked_;
};

/// Where one profiled call (a forward, a training step) goes: kernel time by class on a GPU (Kineto), else the host's
/// time by op class; what the call launches (GPU kernels, copies and fills, or top-level ops on the host); its longest
/// kernels (a GPU) or every top-level op by name (the host); and its time by part of the model and step. Medians over
/// the profiled calls, but for the lists by name, which are the last call's.
struct CallProfile {
  struct Kernel {
    std::string name;
    double ms = 0;
    std::int64_t calls = 0;
  };
  std::vector<std::pair<std::string, double>> classes_ms;
  double launches = 0;
  std::vector<Kernel> top_kernels;
  std::vector<Kernel> host_ops;
  /// ms by part of the model and step (forward and backward each): kernel time on a GPU, top-level ops' host time
  /// elsewhere
  std::map<std::string, PartTime> parts_ms;
  /// With a `top` N > 0: each part's kernels (a GPU) or top-level ops (the host), longest first: what a part's time
  /// is made of
  struct Piece {
    std::string name;
    double forward_ms = 0, backward_ms = 0, calls = 0;
  };
  std::map<std::string, std::vector<Piece>> part_pieces;
};

/// Each part of `p` (largest total first) and its `top` longest pieces as text rows: "ms forward / backward, calls,
/// name", with `other`'s time and calls for the same name in the same part where given (e.g. dense's). `indent`
/// spaces before each part's line.
std::string part_pieces_table(const CallProfile& p, int top, const CallProfile* other = nullptr,
                              const std::string& other_name = {}, int indent = 6);

/// Parts as text rows, largest total first: "part  forward  backward  total  calls" in ms (and calls) divided by
/// `per`, beside `other`'s total and calls (e.g. dense's) where given.
std::string parts_table(const std::map<std::string, PartTime>& parts, double per,
                        const std::map<std::string, PartTime>* other = nullptr, const std::string& other_name = {});

}  // namespace routelab
