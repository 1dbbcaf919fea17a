// Run health: running counters per alert; messages name the layer, step and numbers.
#include "core/run/run_health.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/run/evaluation_record.h"
#include "core/store/run_store.h"
#include "core/util/logging.h"

namespace routelab {
namespace {

std::string layer_list(const std::vector<int>& layers) {
  std::string names;
  for (const int l : layers) names += (names.empty() ? "" : ", ") + std::to_string(l);
  return (layers.size() == 1 ? "layer " : "layers ") + names;
}

/// `v` with `digits` decimals ("%.*f"); whole numbers (steps) without any.
std::string number(double v, int digits = 0) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

/// Two significant digits: a step of 3 ms reads "0.003", not "0.00".
std::string significant(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2g", v);
  return buf;
}

std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g%%", share * 100.0);
  return buf;
}

}  // namespace

std::string to_string(HealthAlert::Severity severity) {
  return severity == HealthAlert::Severity::Error ? "error" : "warning";
}

void RunHealth::reset() {
  non_finite_.clear();
  ema_.reset();
  train_points_ = 0;
  ema_min_ = ema_min_step_ = ema_now_ = last_train_step_ = 0;
  low_run_.clear();
  high_run_.clear();
  last_eval_step_ = -1;
  last_progress_ = -1;
  intervals_.clear();
}

void RunHealth::add_train_loss(double step, double loss) {
  if (step <= last_train_step_ && train_points_ > 0) return;
  last_train_step_ = step;
  if (!std::isfinite(loss)) {
    if (non_finite_.empty())
      non_finite_ =
          std::string("train loss is ") + (std::isnan(loss) ? "NaN" : "infinite") + " at step " + number(step);
    return;
  }
  ema_now_ = ema_.add(loss);
  if (++train_points_ == 1 || ema_now_ < ema_min_) {
    ema_min_ = ema_now_;
    ema_min_step_ = step;
  }
}

void RunHealth::add_validation_loss(double step, double loss) {
  if (!std::isfinite(loss) && non_finite_.empty())
    non_finite_ =
        std::string("validation loss is ") + (std::isnan(loss) ? "NaN" : "infinite") + " at step " + number(step);
}

void RunHealth::add_evaluation(double step, const std::vector<double>& routed_share, const std::vector<bool>& routed) {
  if (step <= last_eval_step_) return;
  last_eval_step_ = step;
  const auto layers = routed_share.size();
  low_run_.resize(layers, 0);
  high_run_.resize(layers, 0);
  for (std::size_t l = 0; l < layers; ++l) {
    const bool routes = l < routed.size() && routed[l];
    const double share = routed_share[l];
    low_run_[l] = routes && share <= t_.collapse_low ? low_run_[l] + 1 : 0;
    high_run_[l] = routes && share >= t_.collapse_high ? high_run_[l] + 1 : 0;
  }
}

void RunHealth::note_progress(double seconds, double step) {
  if (last_progress_ >= 0 && seconds > last_progress_ && step > last_progress_step_) {
    const auto keep = [](std::vector<double>& window, double value) {
      window.push_back(value);
      if (window.size() > 64) window.erase(window.begin());
    };
    keep(intervals_, seconds - last_progress_);
    keep(step_times_, (seconds - last_progress_) / (step - last_progress_step_));
  }
  last_progress_ = seconds;
  last_progress_step_ = step;
}

std::vector<HealthAlert> RunHealth::alerts(double now_seconds) const {
  std::vector<HealthAlert> out;
  using Severity = HealthAlert::Severity;
  if (!non_finite_.empty()) out.push_back({Severity::Error, "non_finite", non_finite_});
  std::vector<int> low, high;
  for (std::size_t l = 0; l < low_run_.size(); ++l) {
    if (low_run_[l] >= t_.collapse_evals) low.push_back(static_cast<int>(l));
    if (high_run_[l] >= t_.collapse_evals) high.push_back(static_cast<int>(l));
  }
  const std::string evals = " of tokens for the last " + std::to_string(t_.collapse_evals) + "+ evaluations";
  if (!low.empty())
    out.push_back({Severity::Warning, "router_collapse",
                   "router collapse: " + layer_list(low) + " routed ≤" + percent(t_.collapse_low) + evals});
  if (!high.empty())
    out.push_back({Severity::Warning, "router_collapse",
                   "router collapse: " + layer_list(high) + " routed ≥" + percent(t_.collapse_high) + evals});
  if (train_points_ >= t_.diverge_min_points && ema_now_ > ema_min_ * t_.diverge_ratio &&
      ema_now_ - ema_min_ > t_.diverge_margin)
    out.push_back({Severity::Warning, "diverging",
                   "loss diverging: smoothed train loss " + number(ema_now_, 3) + " at step " +
                       number(last_train_step_) + ", minimum " + number(ema_min_, 3) + " at step " +
                       number(ema_min_step_)});
  if (live_ && last_progress_ >= 0) {
    const auto median = [](std::vector<double> values) {
      std::sort(values.begin(), values.end());
      return values.empty() ? 0.0 : values[values.size() / 2];
    };
    const double limit = std::max(t_.stall_seconds, t_.stall_intervals * median(intervals_));
    const double quiet = now_seconds - last_progress_;
    if (quiet > limit)
      out.push_back({Severity::Warning, "stalled",
                     "stalled: no training step for " + number(quiet) + " s" +
                         (step_times_.empty() ? std::string()
                                              : " (a step usually takes " + significant(median(step_times_)) + " s)")});
  }
  return out;
}

std::vector<HealthAlert> assess_run(const RunStore& store, const RunRecord& run, double now_unix_seconds,
                                    const HealthThresholds& thresholds) {
  RunHealth health(thresholds);
  for (const auto& p : store.metric(run.id, "train/loss")) {
    health.add_train_loss(static_cast<double>(p.step), p.value);
    health.note_progress(p.wall_time, static_cast<double>(p.step));
  }
  for (const auto& p : store.metric(run.id, "val/loss"))
    health.add_validation_loss(static_cast<double>(p.step), p.value);
  std::vector<std::string> unreadable;
  for (const auto& e : read_evaluations(store, run.id, &unreadable))
    health.add_evaluation(static_cast<double>(e.step), e.routed_fractions(), e.routed_layers());
  for (const auto& message : unreadable) logger("store")->warn("{}", message);
  health.set_live(run.status == RunStatus::Running);
  return health.alerts(now_unix_seconds);
}

std::vector<HealthAlert> assess_run(const RunStore& store, std::int64_t run_id, double now_unix_seconds,
                                    const HealthThresholds& thresholds) {
  auto run = store.run(run_id);
  if (!run) {
    run.emplace();
    run->id = run_id;
    run->status = RunStatus::Finished;
  }
  return assess_run(store, *run, now_unix_seconds, thresholds);
}

}  // namespace routelab
