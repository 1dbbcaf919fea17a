// A stored run made long without training it, for benchmarks of what grows with a run's length (the dashboard's
// reads): the rows of its last logged step, its last evaluation and its last probe are written again at later steps,
// with the run's own keys, layers and documents, values jittered around the stored ones and wall times at the run's
// own pace. No Qt, no Torch.
#pragma once
#include <cstdint>
#include <vector>

#include "core/store/run_store.h"

namespace routelab {

/// What LongRunExtender::extend_to wrote.
struct LongRunRows {
  std::int64_t metrics = 0, routing = 0, evals = 0, probes = 0;
  std::int64_t last_step = 0;  ///< the run's last logged step afterwards
};

class LongRunExtender {
 public:
  /// Reads the templates from run `run_id` of `store`: the rows of its last train/loss step (every key but the
  /// "val/" ones, and its routing rows), of its last evaluation (the "val/" metrics, the evaluation row, the probe
  /// at that step where one is stored). `log_every` and `eval_every` <= 0: the run's own spacing (its last two
  /// train/loss steps, its last two evaluations; else its config's train.log_every and train.eval_every). A run
  /// without a train/loss row or an evaluation is a StoreError naming the store and the run.
  LongRunExtender(const RunStore& store, std::int64_t run_id, std::int64_t log_every = 0,
                  std::int64_t eval_every = 0, std::uint64_t seed = 1);

  /// Writes the templates at every logged step (and every evaluation step) after the run's last one up to `last`,
  /// `steps_per_transaction` logged steps a transaction; the run's total_steps is not changed.
  LongRunRows extend_to(RunStore& store, std::int64_t last, std::int64_t steps_per_transaction = 2000);

  std::int64_t log_every() const { return log_every_; }
  std::int64_t eval_every() const { return eval_every_; }
  std::int64_t last_step() const { return last_log_; }

 private:
  std::int64_t run_ = 0;
  std::int64_t log_every_ = 0, eval_every_ = 0;
  std::int64_t template_log_ = 0, template_eval_ = 0;  ///< the steps the templates were read at
  std::int64_t last_log_ = 0, last_eval_ = 0;          ///< the last logged and evaluated steps written
  double seconds_per_step_ = 0;
  std::vector<MetricRow> log_rows_, eval_rows_;
  std::vector<RoutingRow> routing_rows_;
  EvalRow eval_;
  std::vector<ProbeRow> probe_;  ///< the probe of the last evaluation (none or one)
  std::uint64_t state_ = 0;      ///< the jitter's generator (splitmix64)
  double jitter(double value, double relative);
};

}  // namespace routelab
