// The part of a model or of a training step (norm, attention, mlp, router, routing, head, loss, optimizer, and an
// architecture's own, such as DTRNet's bypass) that the ops inside a C++ scope belong to: a user-scope profiler
// event named "routelab.part/<part>" (at::RecordFunction), from which the profiles attribute time by part, the
// backward's included (core/bench/part_profile.h). Without a profiler recording, a scope costs one check.
#pragma once
#include <ATen/record_function.h>

namespace routelab {

/// A user-scope event for the lifetime of the object. `name` must outlive it (a string literal:
/// ROUTELAB_PART).
class PartScope {
 public:
  explicit PartScope(const char* name) : guard_(at::RecordScope::USER_SCOPE) {
    if (guard_.isActive()) ::at::detail::record_function_with_scope(guard_, name, c10::ArrayRef<const c10::IValue>{});
  }

 private:
  at::RecordFunction guard_;
};

}  // namespace routelab

/// The events' name prefix (part_profile.h strips it).
#define ROUTELAB_PART_PREFIX "routelab.part/"
/// Names the part that the rest of the enclosing C++ scope belongs to: ROUTELAB_PART("mlp").
#define ROUTELAB_PART(part) const ::routelab::PartScope routelab_part_scope_(ROUTELAB_PART_PREFIX part)
/// The value of an expression computed in a part: ROUTELAB_IN_PART("bypass", at::linear(x, w)).
#define ROUTELAB_IN_PART(part, ...) \
  [&] {                             \
    ROUTELAB_PART(part);            \
    return __VA_ARGS__;             \
  }()
