// A switch that holds on one thread while a guard object is alive, restored (nesting included) when it goes: the
// shape of every "while alive on this thread" mode in the core. Tag makes each switch its own. The same for an object
// (a cache) that code deep in a call reaches without a parameter. No Torch here.
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

/// While alive, `object` is the calling thread's current T, the previous one restored when it goes.
template <typename T>
class ScopedThreadObject {
 public:
  explicit ScopedThreadObject(T& object) : previous_(current_) { current_ = &object; }
  ~ScopedThreadObject() { current_ = previous_; }
  ScopedThreadObject(const ScopedThreadObject&) = delete;
  ScopedThreadObject& operator=(const ScopedThreadObject&) = delete;

  /// The object of the innermost guard alive on the calling thread, or null.
  static T* current() { return current_; }

 private:
  static inline thread_local T* current_ = nullptr;
  T* previous_;
};

}  // namespace routelab
