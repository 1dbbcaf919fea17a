#include "core/store/long_run.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/run/run_config.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

bool is_eval_key(const std::string& key) { return key.rfind("val/", 0) == 0; }

/// The rows of `key` at `step` (the series' rows from `step` on, cut there).
std::vector<MetricPoint> rows_at(const RunStore& store, std::int64_t run, const std::string& key, std::int64_t step) {
  auto rows = store.metric(run, key, step - 1);
  rows.erase(std::find_if(rows.begin(), rows.end(), [step](const MetricPoint& p) { return p.step != step; }),
             rows.end());
  return rows;
}

/// The spacing of the last two of `steps` (0 where there are fewer than two).
std::int64_t last_spacing(const std::vector<std::int64_t>& steps) {
  return steps.size() < 2 ? 0 : steps.back() - steps[steps.size() - 2];
}

std::int64_t config_interval(const RunRecord& run, const std::string& store_path, const char* key) {
  try {
    return stored_config(run, store_path).at("train").value(key, std::int64_t{0});
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

LongRunExtender::LongRunExtender(const RunStore& store, std::int64_t run_id, std::int64_t log_every,
                                 std::int64_t eval_every, std::uint64_t seed)
    : run_(run_id), state_(seed) {
  const auto record = store.run(run_id);
  const std::string where = store.path() + ": run " + std::to_string(run_id);
  if (!record) throw StoreError(where + ": no such run");
  const auto losses = store.metric(run_id, "train/loss");
  if (losses.empty()) throw StoreError(where + ": no train/loss row to repeat");
  const auto evals = store.evals(run_id);
  if (evals.empty()) throw StoreError(where + ": no evaluation to repeat");
  last_log_ = template_log_ = losses.back().step;
  last_eval_ = template_eval_ = evals.back().step;
  eval_ = evals.back();

  std::vector<std::int64_t> log_steps, eval_steps;
  for (const MetricPoint& p : losses) log_steps.push_back(p.step);
  for (const EvalRow& e : evals) eval_steps.push_back(e.step);
  log_every_ = log_every > 0 ? log_every : last_spacing(log_steps);
  if (log_every_ <= 0) log_every_ = config_interval(*record, store.path(), "log_every");
  eval_every_ = eval_every > 0 ? eval_every : last_spacing(eval_steps);
  if (eval_every_ <= 0) eval_every_ = config_interval(*record, store.path(), "eval_every");
  if (log_every_ <= 0 || eval_every_ <= 0)
    throw StoreError(where + ": no spacing of its logged steps or evaluations to repeat (give log_every, eval_every)");
  if (losses.size() >= 2 && losses.back().step > losses.front().step)
    seconds_per_step_ = (losses.back().wall_time - losses.front().wall_time) /
                        static_cast<double>(losses.back().step - losses.front().step);

  for (const std::string& key : store.metric_keys(run_id)) {
    const bool eval = is_eval_key(key);
    for (const MetricPoint& p : rows_at(store, run_id, key, eval ? last_eval_ : last_log_))
      (eval ? eval_rows_ : log_rows_).push_back({key, p.step, p.wall_time, p.value});
  }
  for (const RoutingRow& row : store.routing(run_id, last_log_ - 1))
    if (row.step == last_log_) routing_rows_.push_back(row);
  for (ProbeRow& probe : store.probes(run_id))
    if (probe.step == last_eval_) probe_.push_back(std::move(probe));
}

double LongRunExtender::jitter(double value, double relative) {
  // splitmix64: a uniform draw in [-1, 1) scales the relative change.
  std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const double u = static_cast<double>(z >> 11) / static_cast<double>(1ull << 53) * 2.0 - 1.0;
  return std::isfinite(value) ? value * (1.0 + relative * u) : value;
}

LongRunRows LongRunExtender::extend_to(RunStore& store, std::int64_t last, std::int64_t steps_per_transaction) {
  LongRunRows written;
  const auto wall = [this](const double template_wall, std::int64_t from, std::int64_t step) {
    return template_wall + seconds_per_step_ * static_cast<double>(step - from);
  };
  std::int64_t step = last_log_ + log_every_;
  while (step <= last) {
    std::vector<MetricRow> metrics;
    std::vector<RoutingRow> routing;
    const std::int64_t batch = std::max<std::int64_t>(1, steps_per_transaction);
    const std::int64_t batch_end = std::min(last, step + log_every_ * (batch - 1));
    for (; step <= batch_end; step += log_every_) {
      for (const MetricRow& row : log_rows_)
        metrics.push_back({row.key, step, wall(row.wall_time, template_log_, step), jitter(row.value, 0.01)});
      for (RoutingRow row : routing_rows_) {
        row.step = step;
        row.routed_fraction = std::clamp(jitter(row.routed_fraction, 0.02), 0.0, 1.0);
        row.gate_mean = std::clamp(jitter(row.gate_mean, 0.02), 0.0, 1.0);
        routing.push_back(row);
      }
    }
    std::vector<std::int64_t> eval_steps;
    for (std::int64_t e = last_eval_ + eval_every_; e < step; e += eval_every_) eval_steps.push_back(e);
    store.transaction([&] {
      store.insert_metrics(run_, metrics);
      store.insert_routing(run_, routing);
      std::vector<MetricRow> eval_metrics;
      for (const std::int64_t e : eval_steps) {
        for (const MetricRow& row : eval_rows_)
          eval_metrics.push_back({row.key, e, wall(row.wall_time, template_eval_, e), jitter(row.value, 0.01)});
        EvalRow eval = eval_;
        eval.step = e;
        store.insert_eval(run_, eval);
        for (const ProbeRow& probe : probe_) store.insert_probe(run_, {e, probe.json});
      }
      store.insert_metrics(run_, eval_metrics);
      written.metrics += static_cast<std::int64_t>(eval_metrics.size());
    });
    written.metrics += static_cast<std::int64_t>(metrics.size());
    written.routing += static_cast<std::int64_t>(routing.size());
    written.evals += static_cast<std::int64_t>(eval_steps.size());
    written.probes += static_cast<std::int64_t>(eval_steps.size() * probe_.size());
    if (!eval_steps.empty()) last_eval_ = eval_steps.back();
  }
  last_log_ = std::max(last_log_, step - log_every_);  // a later call goes on from here
  written.last_step = last_log_;
  return written;
}

}  // namespace routelab
