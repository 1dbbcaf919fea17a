// Helpers shared by the suites that train runs: an observer that stops a run after a number of steps (its stop
// writes a checkpoint there) and records the steps and evaluations it saw.
#pragma once
#include <atomic>
#include <cstdint>
#include <vector>

#include "core/train/trainer.h"

namespace routelab::test {

/// Sets the cancel flag once a step at or after `stop_after` has been read back.
class StopAfter : public TrainObserver {
 public:
  StopAfter(std::atomic<bool>& flag, std::int64_t stop_after) : flag_(flag), stop_after_(stop_after) {}
  void on_step(const StepMetrics& m) override {
    steps_seen.push_back(m.step);
    if (m.step >= stop_after_) flag_ = true;
  }
  void on_eval(const EvalMetrics& e) override { evals_seen.push_back(e.step); }
  std::vector<std::int64_t> steps_seen, evals_seen;

 private:
  std::atomic<bool>& flag_;
  std::int64_t stop_after_;
};

}  // namespace routelab::test
