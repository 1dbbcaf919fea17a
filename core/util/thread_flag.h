// A switch that holds on one thread while a guard object is alive, restored (nesting included) when it goes: the
// shape of every "while alive on this thread" mode in the core. Tag makes each switch its own. No Torch here.
#pragma once

namespace routelab {

template <typename Tag>
class ScopedThreadFlag {
 public:
  ScopedThreadFlag() : previous_(on_) { on_ = true; }
  ~ScopedThreadFlag() { on_ = previous_; }
  ScopedThreadFlag(const ScopedThreadFlag&) = delete;
  ScopedThreadFlag& operator=(const ScopedThreadFlag&) = delete;

  /// Whether a guard of this switch is alive on the calling thread.
  static bool active() { return on_; }

 private:
  static inline thread_local bool on_ = false;
  bool previous_;
};

}  // namespace routelab
