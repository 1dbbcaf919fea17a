// Helpers shared by the suites that train runs: an observer that stops a run after a number of steps (its stop
// writes a checkpoint there) and records the steps and evaluations it saw, and the config of a short run of any
// registered architecture.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/config/experiment_config.h"
#include "core/models/registry.h"
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

/// A run of a few steps of `entry` with evaluations, probes and a checkpoint: a copy task for a language model,
/// the entailment task for a classifier.
inline ExperimentConfig short_run_config(const ArchitectureEntry& entry, int seed) {
  std::vector<std::string> sets = {"model.arch=" + entry.id, "model.n_embd=32", "model.n_head=4",
                                   "train.log_every=1", "train.warmup_steps=1", "run.threads=2",
                                   "run.seed=" + std::to_string(seed)};
  const std::vector<std::string> task =
      entry.task == Task::LanguageModel
          ? std::vector<std::string>{"model.n_layer=4", "data.source=copy", "train.batch_size=4", "train.steps=4",
                                     "train.eval_every=2", "train.checkpoint_every=4", "train.eval_batches=1"}
          : std::vector<std::string>{"model.n_layer=1", "data.source=entailment", "data.tokenizer=word",
                                     "data.context=48", "data.task_train_examples=64", "data.task_eval_examples=16",
                                     "train.batch_size=32", "train.epochs=1"};
  sets.insert(sets.end(), task.begin(), task.end());
  return resolve_config(nlohmann::json::object(), sets, "conformance");
}

}  // namespace routelab::test
