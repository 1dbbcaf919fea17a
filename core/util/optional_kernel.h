// A faster kernel path that a device or a LibTorch may lack (flash attention's kernels on an older GPU): tried
// while it works, given up for the whole process after its first failure, with one warning naming what runs instead.
#pragma once
#include <atomic>
#include <optional>
#include <string>
#include <utility>

#include <torch/torch.h>

#include "core/util/logging.h"
#include "core/util/process.h"

namespace routelab {

class OptionalKernel {
 public:
  /// `env_switch` set to 0 turns the path off from the start (switched_off_in_environment, read here once).
  OptionalKernel(const char* env_switch, std::string what, std::string instead)
      : switched_off_(switched_off_in_environment(env_switch)), what_(std::move(what)), instead_(std::move(instead)) {}

  /// Neither switched off nor failed yet.
  bool usable() const { return !switched_off_ && !failed_.load(); }

  /// run()'s result, or nothing where it threw a c10::Error: the path is then given up (one warning).
  template <class Run>
  std::optional<torch::Tensor> attempt(Run&& run) {
    try {
      return std::forward<Run>(run)();
    } catch (const c10::Error& e) {
      if (!failed_.exchange(true))
        logger("core")->warn("{} failed ({}); {} from now on", what_, e.what_without_backtrace(), instead_);
      return std::nullopt;
    }
  }

 private:
  bool switched_off_;
  std::atomic<bool> failed_{false};
  std::string what_, instead_;
};

}  // namespace routelab
