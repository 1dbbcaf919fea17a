// The training-progress figures: "curves" (a metric against step, tokens, FLOPs or wall time, mean +- std over
// seeds, optionally smoothed) and "matched" (the metric at matched budgets), plus matched_budget_table().
#include "core/report/builders/catalog.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/report/builders/builder_detail.h"
#include "core/report/figure/curves.h"
#include "core/report/tables/table.h"
#include "core/run/smoothing.h"
#include "core/util/errors.h"

namespace routelab {
namespace figure_detail {
namespace {

// ---------------------------------------------------------------------------------------------------------------
// The x axes of curves

void check_x_axis(const std::string& x_axis) {
  if (x_axis != "step" && x_axis != "tokens" && x_axis != "flops" && x_axis != "wall")
    throw ConfigError("figure x_axis: unknown axis '" + x_axis + "' (known: step, tokens, flops, wall)");
}

std::string x_axis_label(const std::string& x_axis) {
  if (x_axis == "tokens") return "training tokens";
  if (x_axis == "flops") return "training FLOPs (layers)";
  if (x_axis == "wall") return "wall time (s)";
  return "step";
}

/// Maps a run's steps (and wall times) to the requested x axis.
///  tokens: step x train.batch_size x train.grad_accum x data.context (the nominal tokens of a step);
///  flops:  cumulative training FLOPs of the layers from the measured ratios (training_flops_axis, figures.h);
///  wall:   seconds since the run was created.
class XMap {
 public:
  XMap(const RunStore& store, std::int64_t run_id, const std::string& x_axis) : axis_(x_axis) {
    check_x_axis(x_axis);
    const auto run = run_record(store, run_id);
    created_at_ = run.created_at;
    if (axis_ == "tokens" || axis_ == "flops") {
      const auto config = run_config(store, run);
      const auto batch = sequences_per_step(store, run, config);
      const auto context = config_int(store, run, config, "data", "context");
      tokens_per_step_ = static_cast<double>(batch * context);
      if (axis_ == "flops") flops_ = training_flops_axis(store, run_id);
    }
  }

  double x(const MetricPoint& p) const {
    if (axis_ == "step") return static_cast<double>(p.step);
    if (axis_ == "tokens") return static_cast<double>(p.step) * tokens_per_step_;
    if (axis_ == "wall") return p.wall_time - (created_at_ > 0 ? created_at_ : p.wall_time);
    return cumulative_flops(p.step);
  }

  double cumulative_flops(std::int64_t step) const { return flops_.at(step); }

 private:
  std::string axis_;
  double created_at_ = 0, tokens_per_step_ = 0;
  CumulativeFlops flops_;
};

/// A run's metric as a curve on the requested x axis, sorted by x.
Curve metric_curve(const RunStore& store, std::int64_t run_id, const std::string& metric, const std::string& x_axis) {
  const XMap map(store, run_id, x_axis);
  std::vector<std::pair<double, double>> points;
  for (const auto& p : read_metric(store, run_id, metric)) points.emplace_back(map.x(p), p.value);
  std::stable_sort(points.begin(), points.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  Curve c;
  for (const auto& [x, y] : points) c.x.push_back(x), c.y.push_back(y);
  return c;
}

void check_smoothing(double smoothing) {
  if (!(smoothing >= 0 && smoothing <= 0.999))
    throw ConfigError("figure smoothing: " + number_text(smoothing) + " must be in [0, 0.999]");
}

/// The sorted, distinct x values of `curves` inside the range every curve covers.
std::vector<double> common_grid(const std::vector<Curve>& curves) {
  double lo = -INFINITY, hi = INFINITY;
  for (const auto& c : curves) {
    if (c.x.empty()) return {};
    lo = std::max(lo, c.x.front());
    hi = std::min(hi, c.x.back());
  }
  std::set<double> xs;
  for (const auto& c : curves)
    for (double x : c.x)
      if (x >= lo && x <= hi) xs.insert(x);
  std::vector<double> grid(xs.begin(), xs.end());
  if (grid.size() > 1000) grid = make_grid(lo, hi, 1000);
  return grid;
}

/// One group's curves as a series: the run's own points, or mean +- std over the seeds on their common grid.
FigureSeries group_series(const std::vector<Curve>& curves, const std::string& label) {
  FigureSeries s;
  s.label = label;
  if (curves.size() == 1) {
    s.x = curves.front().x;
    s.y = curves.front().y;
    return s;
  }
  const auto band = mean_band(curves, common_grid(curves));
  s.x = band.x;
  s.y = band.mean;
  for (std::size_t i = 0; i < band.x.size(); ++i) {
    s.y_lo.push_back(band.mean[i] - band.std[i]);
    s.y_hi.push_back(band.mean[i] + band.std[i]);
  }
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// curves

Figure build_curves(const RunStore& store, const FigureRequest& request) {
  check_x_axis(request.x_axis);
  check_smoothing(request.smoothing);
  require_metric_somewhere(store, request, "curves");
  const bool smooth = request.smoothing > 0 && request.metric.rfind("train/", 0) == 0;
  FigurePanel panel;
  panel.x_label = x_axis_label(request.x_axis);
  panel.y_label = request.metric;
  for (const auto& g : styled_groups(store, request)) {
    std::vector<Curve> raw, smoothed;
    for (auto id : g.group.run_ids) {
      auto c = metric_curve(store, id, request.metric, request.x_axis);
      if (c.x.empty()) continue;
      if (smooth) smoothed.push_back({c.x, debiased_ema(c.y, request.smoothing)});
      raw.push_back(std::move(c));
    }
    if (raw.empty()) continue;
    if (smooth) {
      auto faint = group_series(raw, "");
      faint.y_lo.clear();
      faint.y_hi.clear();
      faint.faint = true;
      faint.color = g.color;
      faint.dash = g.dash;
      panel.series.push_back(std::move(faint));
    }
    auto s = group_series(smooth ? smoothed : raw, g.group.label);
    s.color = g.color;
    s.dash = g.dash;
    panel.series.push_back(std::move(s));
  }
  Figure f;
  f.panels.push_back(std::move(panel));
  f.meta["smoothing"] = smooth ? request.smoothing : 0.0;
  return f;
}

// ---------------------------------------------------------------------------------------------------------------
// matched budgets

namespace {

struct MatchedValues {
  std::vector<double> budgets;
  std::vector<StyledGroup> groups;
  std::vector<std::vector<std::vector<double>>> values;  ///< [group][run][budget]
};

MatchedValues matched_values(const RunStore& store, const FigureRequest& request) {
  check_x_axis(request.x_axis);
  require_metric_somewhere(store, request, "matched");
  MatchedValues m;
  m.groups = styled_groups(store, request);
  std::vector<std::vector<Curve>> curves;
  double lo = -INFINITY, hi = INFINITY;
  for (const auto& g : m.groups) {
    curves.emplace_back();
    for (auto id : g.group.run_ids) {
      auto c = metric_curve(store, id, request.metric, request.x_axis);
      if (!c.x.empty()) lo = std::max(lo, c.x.front()), hi = std::min(hi, c.x.back());
      curves.back().push_back(std::move(c));
    }
  }
  m.budgets = request.budgets;
  if (m.budgets.empty()) {
    // Five budgets over the range every run covers, from its first positive value on.
    lo = std::max(lo, 0.0);
    if (!(hi > lo))
      throw ConfigError("matched: the runs share no range of " + request.x_axis + " to match at; give budgets");
    m.budgets = make_grid(lo + (hi - lo) / 5, hi, 5);
  }
  for (double b : m.budgets)
    if (!std::isfinite(b)) throw ConfigError("matched budgets: " + number_text(b) + " is not a finite number");
  for (const auto& group_curves : curves) {
    m.values.emplace_back();
    for (const auto& c : group_curves) m.values.back().push_back(interpolate(c, m.budgets));
  }
  return m;
}

std::string budget_header(double b, const std::string& x_axis) {
  if (x_axis == "step") return std::to_string(static_cast<long long>(std::llround(b)));
  return number_text(b, 3);
}

}  // namespace

Figure build_matched(const RunStore& store, const FigureRequest& request) {
  const auto m = matched_values(store, request);
  FigurePanel panel;
  panel.x_label = x_axis_label(request.x_axis);
  panel.y_label = request.metric + " at matched " + (request.x_axis == "flops" ? "FLOPs" : request.x_axis);
  for (std::size_t g = 0; g < m.groups.size(); ++g) {
    FigureSeries s;
    s.label = m.groups[g].group.label;
    s.color = m.groups[g].color;
    s.dash = m.groups[g].dash;
    s.marked = true;
    const bool band = m.values[g].size() > 1;
    for (std::size_t b = 0; b < m.budgets.size(); ++b) {
      std::vector<double> at;
      for (const auto& run : m.values[g]) at.push_back(run[b]);
      const auto cell = summarize(at);
      s.x.push_back(m.budgets[b]);
      s.y.push_back(cell ? cell->mean : kNaN);
      if (band) {
        s.y_lo.push_back(cell ? cell->mean - cell->std : kNaN);
        s.y_hi.push_back(cell ? cell->mean + cell->std : kNaN);
      }
    }
    panel.series.push_back(std::move(s));
  }
  Figure f;
  f.panels.push_back(std::move(panel));
  f.meta["budgets"] = m.budgets;
  return f;
}

}  // namespace figure_detail

ReportTable matched_budget_table(const RunStore& store, const FigureRequest& request) {
  using namespace figure_detail;
  if (request.run_ids.empty()) throw ConfigError("matched table: no run given");
  const auto m = matched_values(store, request);
  ReportTable table;
  const std::string axis = request.x_axis == "flops" ? "training FLOPs" : x_axis_label(request.x_axis);
  table.caption = request.metric + " at matched " + axis + " (linear interpolation between stored points; mean " +
                  "+- std over seeds; a dash where a run does not reach the budget).";
  table.label = "tab:matched-" + request.x_axis;
  table.row_header = "Run";
  const Better better = higher_is_better(request.metric) ? Better::Higher : Better::Lower;
  for (double b : m.budgets)
    table.columns.push_back({"@ " + budget_header(b, request.x_axis), "", better, 4, 1.0});
  for (std::size_t g = 0; g < m.groups.size(); ++g) {
    TableRow row{m.groups[g].group.label, {}};
    for (std::size_t b = 0; b < m.budgets.size(); ++b) {
      std::vector<double> at;
      for (const auto& run : m.values[g]) at.push_back(run[b]);
      row.cells.push_back(summarize(at));
    }
    table.rows.push_back(std::move(row));
  }
  return table;
}

}  // namespace routelab
