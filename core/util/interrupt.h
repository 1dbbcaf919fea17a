// A cooperative stop for work nobody wants any more (a GUI panel's figure replaced by a later request, or its window
// closed): while an InterruptScope is alive on a thread, interruption_point() there throws Interrupted once the
// scope's predicate holds. Long loops (a routing breakdown's batches, an evaluation's, a residual profile's) call it
// between steps, where nothing is half written. No Torch, no Qt.
#pragma once
#include <exception>
#include <functional>
#include <utility>

#include "core/util/thread_flag.h"

namespace routelab {

/// Thrown at an interruption point. Not an Error (nothing the user asked for failed), so no catch of RouteLab's typed
/// errors takes it on its way out to the scope's owner.
class Interrupted : public std::exception {
 public:
  const char* what() const noexcept override { return "interrupted: no longer wanted"; }
};

/// While alive, `requested` decides whether the calling thread's work is still wanted (it is called at every
/// interruption point: keep it cheap, e.g. an atomic load).
class InterruptScope {
 public:
  explicit InterruptScope(std::function<bool()> requested) : requested_(std::move(requested)), current_(*this) {}
  bool requested() const { return requested_ && requested_(); }

 private:
  std::function<bool()> requested_;
  ScopedThreadObject<const InterruptScope> current_;
};

/// Throws Interrupted where the innermost InterruptScope alive on this thread says its work is no longer wanted;
/// nothing without one.
inline void interruption_point() {
  const auto* scope = ScopedThreadObject<const InterruptScope>::current();
  if (scope && scope->requested()) throw Interrupted();
}

}  // namespace routelab
