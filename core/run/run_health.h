// Run health: the alerts a researcher wants at once about a run, from plain values fed in step order (Torch-free).
// A collapsed router (a routed layer at <= 1% or >= 99% of tokens for several evaluations in a row), a NaN or
// infinite loss, a diverging loss (the debiased EMA of the train loss well above its minimum) and a stalled live run
// (no step for far longer than usual). The dashboard feeds it live; assess_run feeds it a stored run, so
// `routelab-cli show` and `runs` report what the dashboard shows.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/run/smoothing.h"

namespace routelab {

class RunStore;
struct RunRecord;

struct HealthThresholds {
  double collapse_low = 0.01, collapse_high = 0.99;  ///< routed share at or beyond these counts as collapsed ...
  int collapse_evals = 3;                            ///< ... for this many evaluations in a row
  double diverge_ratio = 1.3;                        ///< smoothed train loss above this x its minimum ...
  double diverge_margin = 0.3;                       ///< ... and above the minimum by this many nats
  int diverge_min_points = 20;                       ///< train points before divergence is judged
  double diverge_smoothing = 0.9;                    ///< EMA weight of the smoothed train loss
  double stall_seconds = 60;                         ///< a live run without a step this long is stalled ...
  double stall_intervals = 20;                       ///< ... unless its typical step takes longer (x this)
};

struct HealthAlert {
  enum class Severity { Error, Warning };
  Severity severity = Severity::Warning;
  std::string kind;     ///< "non_finite", "router_collapse", "diverging", "stalled"
  std::string message;  ///< one line naming the layers, steps and numbers
};
std::string to_string(HealthAlert::Severity severity);  ///< "error", "warning"

class RunHealth {
 public:
  RunHealth() = default;
  explicit RunHealth(HealthThresholds thresholds) : t_(thresholds), ema_(thresholds.diverge_smoothing) {}

  void reset();
  void add_train_loss(double step, double loss);
  void add_validation_loss(double step, double loss);
  /// One evaluation's inference-mode routed share per layer, and which layers route (dense layers never collapse).
  void add_evaluation(double step, const std::vector<double>& routed_share, const std::vector<bool>& routed);
  /// Training reached `step` at `seconds` (any clock that the `now_seconds` of alerts() shares). Call it once per
  /// report (a batch of steps, a stored row): the time a step takes is the gap over the steps it covers.
  void note_progress(double seconds, double step);
  /// Live runs only: whether the stall check applies (a finished run never stalls).
  void set_live(bool live) { live_ = live; }

  /// Errors first, then warnings; `now_seconds` on note_progress's clock.
  std::vector<HealthAlert> alerts(double now_seconds) const;

 private:
  HealthThresholds t_;
  bool live_ = false;
  std::string non_finite_;
  DebiasedEma ema_{t_.diverge_smoothing};
  int train_points_ = 0;
  double ema_min_ = 0, ema_min_step_ = 0, ema_now_ = 0, last_train_step_ = 0;
  std::vector<int> low_run_, high_run_;  ///< per layer: consecutive evaluations at the low / high extreme
  double last_eval_step_ = -1;
  double last_progress_ = -1, last_progress_step_ = 0;
  std::vector<double> intervals_;   ///< the last 64 gaps between reports
  std::vector<double> step_times_;  ///< the last 64 seconds per step (a gap over the steps it covered)
};

/// The alerts of a stored run: its train and validation losses and the routing of its evaluations, in step order;
/// a run the store marks running is judged for a stall on the wall times of its train-loss rows against
/// `now_unix_seconds`. An evaluation that cannot be read is skipped with a warning in the log.
std::vector<HealthAlert> assess_run(const RunStore& store, const RunRecord& run, double now_unix_seconds,
                                    const HealthThresholds& thresholds = {});
/// The same for a run id (no such run: judged as not running).
std::vector<HealthAlert> assess_run(const RunStore& store, std::int64_t run_id, double now_unix_seconds,
                                    const HealthThresholds& thresholds = {});

}  // namespace routelab
