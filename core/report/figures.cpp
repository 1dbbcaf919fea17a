// The figure catalogue and the generic comparison figures (curves, matched budgets, Pareto trade-off, routed
// tokens per layer, cost versus sequence length, per-token routing maps), plus the renderer-free files of a
// figure bundle: tidy CSV, a pgfplots picture reading that CSV, and the JSON sidecar.
#include "core/report/figures.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/config/options.h"
#include "core/cost/flops_model.h"
#include "core/models/dense_transformer.h"
#include "core/models/registry.h"
#include "core/report/curves.h"
#include "core/report/run_tables.h"
#include "core/report/seed_figures.h"
#include "core/report/table.h"
#include "core/store/run_store.h"
#include "core/util/errors.h"
#include "core/util/version.h"

namespace routelab {
namespace {

using nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------------------------------------------------------
// Small helpers

std::string number_text(double v, int precision = 4) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", precision, v);
  return buf;
}

bool higher_is_better(const std::string& metric) {
  return metric.find("accuracy") != std::string::npos || metric.find("f1") != std::string::npos ||
         metric.find("per_s") != std::string::npos || metric.find("saved") != std::string::npos;
}

std::string run_label(const RunStore& store, std::int64_t id) {
  const auto run = store.run(id);
  if (!run) throw StoreError(store.path() + ": no run " + std::to_string(id));
  return run->name.empty() ? "run " + std::to_string(id) : run->name;
}

RunRecord run_record(const RunStore& store, std::int64_t id) {
  auto run = store.run(id);
  if (!run) throw StoreError(store.path() + ": no run " + std::to_string(id));
  return *run;
}

json run_config(const RunStore& store, const RunRecord& run) {
  try {
    auto doc = json::parse(run.config_json);
    if (!doc.is_object()) throw ConfigError("not an object");
    return doc;
  } catch (const std::exception& e) {
    throw ConfigError(store.path() + ": run " + std::to_string(run.id) + ": stored config is not a JSON object (" +
                      e.what() + ")");
  }
}

/// `config.section.key` as an integer, or a ConfigError naming the run and the key.
std::int64_t config_int(const RunStore& store, const RunRecord& run, const json& config, const char* section,
                        const char* key) {
  const std::string path = std::string(section) + "." + key;
  if (!config.contains(section) || !config.at(section).is_object() || !config.at(section).contains(key) ||
      !config.at(section).at(key).is_number_integer())
    throw ConfigError(store.path() + ": run " + std::to_string(run.id) + ": the stored config has no integer " + path);
  return config.at(section).at(key).get<std::int64_t>();
}

/// The model section with the architecture's defaults filled in (stored configs are resolved; this keeps partial
/// ones usable).
json full_model(const RunStore& store, const RunRecord& run, const json& config) {
  if (!config.contains("model") || !config.at("model").is_object() || !config.at("model").contains("arch"))
    throw ConfigError(store.path() + ": run " + std::to_string(run.id) + ": the stored config has no model.arch");
  const auto& model = config.at("model");
  const auto arch = model.at("arch").get<std::string>();
  json full = schema_defaults(architecture(arch).options);
  for (const auto& [k, v] : model.items()) full[k] = v;
  full["arch"] = arch;
  return full;
}

/// One colour per architecture (first seen first), one dash per variant within an architecture.
struct Styler {
  std::map<std::string, int> colour_of;
  std::map<std::string, int> variants;
  std::pair<int, int> next(const std::string& arch) {
    const auto [it, inserted] = colour_of.try_emplace(arch, static_cast<int>(colour_of.size()));
    const int dash = variants[arch]++ % 4;
    return {it->second % static_cast<int>(figure_palette().size()), dash};
  }
};

struct StyledGroup {
  RunGroup group;
  std::string arch;
  int color = 0, dash = 0;
};

std::vector<StyledGroup> styled_groups(const RunStore& store, const FigureRequest& request) {
  Styler styler;
  std::vector<StyledGroup> out;
  for (auto& g : group_runs(store, request.run_ids, request.by_seed)) {
    StyledGroup s;
    s.arch = run_record(store, g.run_ids.front()).arch;
    std::tie(s.color, s.dash) = styler.next(s.arch);
    s.group = std::move(g);
    out.push_back(std::move(s));
  }
  return out;
}

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
///  tokens: step x train.batch_size x data.context (the nominal tokens of a step);
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
      const auto batch = config_int(store, run, config, "train", "batch_size");
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
  for (const auto& p : store.metric(run_id, metric)) points.emplace_back(map.x(p), p.value);
  std::stable_sort(points.begin(), points.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  Curve c;
  for (const auto& [x, y] : points) c.x.push_back(x), c.y.push_back(y);
  return c;
}

/// Debiased exponential moving average (weight `w` on the past): s_t = w s_{t-1} + (1 - w) y_t, shown as
/// s_t / (1 - w^t) over the t finite values so far; NaN values stay NaN and do not enter the average.
std::vector<double> debiased_ema(const std::vector<double>& y, double w) {
  std::vector<double> out(y.size(), kNaN);
  double s = 0, weight = 1;
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) continue;
    s = w * s + (1 - w) * y[i];
    weight *= w;
    out[i] = s / (1 - weight);
  }
  return out;
}

void check_smoothing(double smoothing) {
  if (!(smoothing >= 0 && smoothing < 1))
    throw ConfigError("figure smoothing: " + number_text(smoothing) + " must be in [0, 1)");
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

void require_metric_somewhere(const RunStore& store, const FigureRequest& request, const std::string& figure) {
  for (auto id : request.run_ids)
    if (!store.metric(id, request.metric).empty()) return;
  std::string keys;
  for (const auto& k : store.metric_keys(request.run_ids.front())) keys += (keys.empty() ? "" : ", ") + k;
  throw ConfigError(figure + ": none of the runs stores metric '" + request.metric + "' (run " +
                    std::to_string(request.run_ids.front()) + " has: " + keys + ")");
}

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

// ---------------------------------------------------------------------------------------------------------------
// Evaluations and probes

EvalRow eval_at(const RunStore& store, std::int64_t run_id, std::int64_t step, const std::string& figure) {
  const auto evals = store.evals(run_id);
  if (evals.empty())
    throw DataError(figure + ": " + store.path() + ": run " + std::to_string(run_id) + " has no evaluation");
  if (step == 0) return evals.back();
  std::string steps;
  for (const auto& e : evals) {
    if (e.step == step) return e;
    steps += (steps.empty() ? "" : ", ") + std::to_string(e.step);
  }
  throw DataError(figure + ": run " + std::to_string(run_id) + " has no evaluation at step " + std::to_string(step) +
                  " (evaluated at: " + steps + ")");
}

json eval_layers(const RunStore& store, std::int64_t run_id, const EvalRow& eval, const std::string& figure) {
  json extra;
  try {
    extra = json::parse(eval.extra_json);
  } catch (const json::exception& e) {
    throw DataError(figure + ": " + store.path() + ": run " + std::to_string(run_id) + " step " +
                    std::to_string(eval.step) + ": evaluation extra is not JSON: " + e.what());
  }
  if (!extra.is_object() || !extra.contains("layers") || !extra.at("layers").is_array() || extra.at("layers").empty())
    throw DataError(figure + ": run " + std::to_string(run_id) + " step " + std::to_string(eval.step) +
                    ": the evaluation stores no per-layer routing (extra.layers)");
  return extra.at("layers");
}

double json_number(const json& object, const char* key, double fallback) {
  if (!object.is_object() || !object.contains(key) || !object.at(key).is_number()) return fallback;
  return object.at(key).get<double>();
}

bool json_flag(const json& object, const char* key, bool fallback) {
  if (!object.is_object() || !object.contains(key) || !object.at(key).is_boolean()) return fallback;
  return object.at(key).get<bool>();
}

// ---------------------------------------------------------------------------------------------------------------
// pareto

/// The run's FLOPs ratio at its evaluation: the last val/flops_ratio, else the last evaluation's extra.flops_ratio.
double run_cost(const RunStore& store, std::int64_t run_id) {
  const auto points = store.metric(run_id, "val/flops_ratio");
  for (auto it = points.rbegin(); it != points.rend(); ++it)
    if (std::isfinite(it->value)) return it->value;
  const auto evals = store.evals(run_id);
  for (auto it = evals.rbegin(); it != evals.rend(); ++it) {
    try {
      const auto extra = json::parse(it->extra_json);
      const double r = json_number(extra, "flops_ratio", kNaN);
      if (std::isfinite(r)) return r;
    } catch (const json::exception&) {
    }
  }
  return kNaN;
}

double last_finite(const RunStore& store, std::int64_t run_id, const std::string& metric) {
  const auto points = store.metric(run_id, metric);
  for (auto it = points.rbegin(); it != points.rend(); ++it)
    if (std::isfinite(it->value)) return it->value;
  return kNaN;
}

Figure build_pareto(const RunStore& store, const FigureRequest& request) {
  require_metric_somewhere(store, request, "pareto");
  const bool higher = higher_is_better(request.metric);
  FigurePanel panel;
  panel.x_label = "FLOPs ratio (vs dense)";
  panel.y_label = request.metric;
  std::vector<TradeoffPoint> points;
  std::vector<std::string> labels;
  for (const auto& g : styled_groups(store, request)) {
    std::vector<double> costs, qualities;
    for (auto id : g.group.run_ids) {
      costs.push_back(run_cost(store, id));
      qualities.push_back(last_finite(store, id, request.metric));
    }
    const auto cost = summarize(costs), quality = summarize(qualities);
    if (!cost || !quality) continue;
    FigureSeries s;
    s.label = g.group.label;
    s.kind = SeriesKind::Points;
    s.color = g.color;
    s.dash = g.dash;
    s.x = {cost->mean};
    s.y = {quality->mean};
    if (quality->n > 1) {
      s.y_lo = {quality->mean - quality->std};
      s.y_hi = {quality->mean + quality->std};
    }
    panel.series.push_back(std::move(s));
    points.push_back({cost->mean, quality->mean});
    labels.push_back(g.group.label);
  }
  if (points.empty())
    throw DataError("pareto: no run has both '" + request.metric + "' and a FLOPs ratio (val/flops_ratio or an "
                    "evaluation's flops_ratio)");
  FigureSeries front;
  front.label = "Pareto front";
  front.kind = SeriesKind::Line;
  front.color = 7;
  front.dash = 1;
  front.marked = true;
  json on_front = json::array();
  for (auto i : pareto_front(points, higher)) {
    front.x.push_back(points[i].cost);
    front.y.push_back(points[i].quality);
    on_front.push_back(labels[i]);
  }
  panel.series.push_back(std::move(front));
  Figure f;
  f.panels.push_back(std::move(panel));
  f.meta["higher_is_better"] = higher;
  f.meta["pareto_front"] = on_front;
  return f;
}

// ---------------------------------------------------------------------------------------------------------------
// routed-layers

Figure build_routed_layers(const RunStore& store, const FigureRequest& request) {
  FigurePanel panel;
  panel.x_label = "layer";
  panel.y_label = "routed tokens (%)";
  struct GroupLayers {
    StyledGroup group;
    std::vector<std::vector<double>> fractions;  ///< [run][layer]
    std::vector<bool> routed;                    ///< per layer, from the group's first run
  };
  std::vector<GroupLayers> groups;
  std::size_t n_layers = 0;
  for (const auto& g : styled_groups(store, request)) {
    GroupLayers gl{g, {}, {}};
    for (auto id : g.group.run_ids) {
      const auto layers = eval_layers(store, id, eval_at(store, id, request.step, "routed-layers"), "routed-layers");
      std::vector<double> fractions;
      std::vector<bool> routed;
      for (const auto& l : layers) {
        fractions.push_back(json_number(l, "routed_fraction", kNaN));
        routed.push_back(json_flag(l, "routed", false));
      }
      if (gl.routed.empty()) gl.routed = routed;
      n_layers = std::max(n_layers, fractions.size());
      gl.fractions.push_back(std::move(fractions));
    }
    groups.push_back(std::move(gl));
  }
  for (std::size_t l = 0; l < n_layers; ++l) panel.bars.categories.push_back("L" + std::to_string(l));
  for (const auto& gl : groups) {
    FigureBars::Member routed_member, dense_member;
    routed_member.label = gl.group.group.label;
    routed_member.color = dense_member.color = gl.group.color;
    dense_member.label = gl.group.group.label + " (dense layers)";
    dense_member.hatched = true;
    const bool spread = gl.fractions.size() > 1;
    bool any_dense = false, any_routed = false;
    for (std::size_t l = 0; l < n_layers; ++l) {
      std::vector<double> at;
      for (const auto& run : gl.fractions) at.push_back(l < run.size() ? 100.0 * run[l] : kNaN);
      const auto cell = summarize(at);
      const bool exists = l < gl.routed.size();
      const bool routed = exists && gl.routed[l];
      routed_member.values.push_back(routed && cell ? cell->mean : kNaN);
      if (spread) routed_member.errors.push_back(routed && cell ? cell->std : kNaN);
      // A layer that does not route runs every token: a hatched full bar.
      dense_member.values.push_back(exists && !routed ? (cell ? cell->mean : 100.0) : kNaN);
      any_dense = any_dense || (exists && !routed);
      any_routed = any_routed || routed;
    }
    if (any_routed) panel.bars.members.push_back(std::move(routed_member));
    if (any_dense) panel.bars.members.push_back(std::move(dense_member));
  }
  Figure f;
  f.panels.push_back(std::move(panel));
  f.meta["eval_step"] = request.step;
  return f;
}

// ---------------------------------------------------------------------------------------------------------------
// cost-length

/// KV entries per token of one layer under the evaluation's routing, by kind, as core/inference/kv_cache.h's
/// analytic_kv_entries counts them: dense, TSA and early-exit layers keep every token (early exit copies the
/// exited tokens' states); DRR keeps every token plus its memory entries (stats short_entries + long_entries per
/// sequence, held fixed); the other routed kinds keep the tokens on the attention path (the routed fraction;
/// Radial Networks: executions per token).
double kv_entries(const json& layer, double seq) {
  const auto kind = layer.value("kind", std::string("dense"));
  const bool routed = json_flag(layer, "routed", false);
  if (kind == "drr") {
    const json stats = layer.value("stats", json::object());
    return seq + json_number(stats, "short_entries", 0) + json_number(stats, "long_entries", 0);
  }
  if (!routed || kind == "dense" || kind == "tsa" || kind == "early-exit") return seq;
  const double f = json_number(layer, "routed_fraction", 1.0);
  return (std::isfinite(f) ? f : 1.0) * seq;
}

std::vector<std::int64_t> cost_lengths(const FigureRequest& request, std::int64_t longest_context) {
  if (!request.lengths.empty()) {
    for (auto t : request.lengths)
      if (t < 1) throw ConfigError("cost-length lengths: " + std::to_string(t) + " must be at least 1");
    auto out = request.lengths;
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }
  std::vector<std::int64_t> out;
  const auto limit = std::max<std::int64_t>(8192, 4 * longest_context);
  for (std::int64_t t = 64; t <= limit; t *= 2) out.push_back(t);
  return out;
}

Figure build_cost_length(const RunStore& store, const FigureRequest& request) {
  struct RunCost {
    RunRecord run;
    json model, layers;
    std::vector<double> fractions;
    double entry_bytes = 0;  ///< K and V of one token in one layer
    std::int64_t n_layer = 0, context = 0;
    std::int64_t eval_step = 0;
  };
  std::vector<RunCost> runs;
  std::int64_t longest = 0;
  for (auto id : request.run_ids) {
    RunCost rc;
    rc.run = run_record(store, id);
    const auto config = run_config(store, rc.run);
    rc.model = full_model(store, rc.run, config);
    rc.context = config_int(store, rc.run, config, "data", "context");
    longest = std::max(longest, rc.context);
    const auto eval = eval_at(store, id, request.step, "cost-length");
    rc.eval_step = eval.step;
    rc.layers = eval_layers(store, id, eval, "cost-length");
    std::vector<MeasuredLayer> measured;
    for (const auto& l : rc.layers) {
      MeasuredLayer m;
      m.routed_fraction = json_number(l, "routed_fraction", 1.0);
      if (l.contains("stats")) m.active_share = json_number(l.at("stats"), "active_share", -1.0);
      measured.push_back(m);
    }
    rc.fractions = fractions_from_trace(rc.run.arch, measured);
    try {
      const auto options = transformer_options_from_json(rc.model, 256, rc.context);
      rc.n_layer = options.n_layer();
      const bool bf16 = config.contains("train") && config.at("train").value("precision", std::string()) == "bf16";
      rc.entry_bytes = 2.0 * static_cast<double>(layer_shape(options).d_kv) * (bf16 ? 2.0 : 4.0);
    } catch (const json::exception& e) {
      throw ConfigError(store.path() + ": run " + std::to_string(id) + ": no Transformer shape in model (" + e.what() +
                        ")");
    }
    runs.push_back(std::move(rc));
  }
  const auto lengths = cost_lengths(request, longest);
  FigurePanel flops_panel, kv_panel;
  flops_panel.title = "Forward FLOPs";
  flops_panel.x_label = kv_panel.x_label = "sequence length";
  flops_panel.y_label = "FLOPs ratio (vs dense)";
  kv_panel.title = "KV cache";
  kv_panel.y_label = "KV cache (MiB)";
  flops_panel.log_x = kv_panel.log_x = kv_panel.log_y = true;
  const double mib = 1024.0 * 1024.0;

  FigureSeries dense_ratio;
  dense_ratio.label = "dense";
  dense_ratio.color = 7;
  dense_ratio.dash = 1;
  for (auto t : lengths) dense_ratio.x.push_back(static_cast<double>(t)), dense_ratio.y.push_back(1.0);
  flops_panel.series.push_back(dense_ratio);

  Styler styler;
  std::map<std::pair<std::int64_t, double>, bool> dense_kv_drawn;  // (layers, entry bytes) -> drawn
  json sources = json::array();
  for (const auto& rc : runs) {
    const auto [color, dash] = styler.next(rc.run.arch);
    const auto label = rc.run.name.empty() ? "run " + std::to_string(rc.run.id) : rc.run.name;
    FigureSeries ratio, kv;
    ratio.label = kv.label = label;
    ratio.color = kv.color = color;
    ratio.dash = kv.dash = dash;
    for (auto t : lengths) {
      FlopsQuery q;
      q.seq = t;
      q.fractions = rc.fractions;
      double r = kNaN;
      try {
        r = estimate_flops(rc.model, 256, q).layer_ratio();
      } catch (const ConfigError& e) {
        throw ConfigError("cost-length: run " + std::to_string(rc.run.id) + ": " + e.what());
      }
      ratio.x.push_back(static_cast<double>(t));
      ratio.y.push_back(r);
      double entries = 0;
      for (const auto& l : rc.layers) entries += kv_entries(l, static_cast<double>(t));
      kv.x.push_back(static_cast<double>(t));
      kv.y.push_back(entries * rc.entry_bytes / mib);
    }
    flops_panel.series.push_back(std::move(ratio));
    const auto shape = std::make_pair(static_cast<std::int64_t>(rc.layers.size()), rc.entry_bytes);
    if (!dense_kv_drawn[shape]) {
      dense_kv_drawn[shape] = true;
      FigureSeries dense_kv;
      dense_kv.label = "dense";
      dense_kv.color = 7;
      dense_kv.dash = 1;
      for (auto t : lengths) {
        dense_kv.x.push_back(static_cast<double>(t));
        dense_kv.y.push_back(static_cast<double>(shape.first) * static_cast<double>(t) * rc.entry_bytes / mib);
      }
      kv_panel.series.push_back(std::move(dense_kv));
    }
    kv_panel.series.push_back(std::move(kv));
    sources.push_back({{"run", rc.run.id}, {"eval_step", rc.eval_step}, {"fractions", rc.fractions}});
  }
  if (dense_kv_drawn.size() > 1)
    for (auto& s : kv_panel.series)
      if (s.label == "dense") s.label = "dense (" + number_text(s.y.back() / lengths.back() * mib, 6) + " B/token)";
  Figure f;
  f.panels = {std::move(flops_panel), std::move(kv_panel)};
  f.columns = 2;
  f.meta["routing"] = sources;
  return f;
}

// ---------------------------------------------------------------------------------------------------------------
// token-maps

struct ProbeMap {
  std::string title;
  std::vector<std::string> tokens;
  FigureHeatmap map;
};

ProbeMap probe_map(const RunStore& store, std::int64_t run_id, std::int64_t step, bool decisions) {
  const auto probes = store.probes(run_id);
  if (probes.empty())
    throw DataError("token-maps: " + store.path() + ": run " + std::to_string(run_id) + " has no probe");
  const ProbeRow* row = &probes.back();
  if (step != 0) {
    row = nullptr;
    std::string steps;
    for (const auto& p : probes) {
      if (p.step == step) row = &p;
      steps += (steps.empty() ? "" : ", ") + std::to_string(p.step);
    }
    if (!row)
      throw DataError("token-maps: run " + std::to_string(run_id) + " has no probe at step " + std::to_string(step) +
                      " (probed at: " + steps + ")");
  }
  json doc;
  try {
    doc = json::parse(row->json);
  } catch (const json::exception& e) {
    throw DataError("token-maps: run " + std::to_string(run_id) + " step " + std::to_string(row->step) +
                    ": probe is not JSON: " + e.what());
  }
  if (!doc.is_object() || !doc.contains("tokens") || !doc.at("tokens").is_array() || !doc.contains("layers") ||
      !doc.at("layers").is_array())
    throw DataError("token-maps: run " + std::to_string(run_id) + " step " + std::to_string(row->step) +
                    ": the probe has no tokens or layers");
  ProbeMap m;
  m.title = run_label(store, run_id) + " (step " + std::to_string(row->step) + ")";
  for (const auto& t : doc.at("tokens")) m.tokens.push_back(t.is_string() ? t.get<std::string>() : t.dump());
  const auto& layers = doc.at("layers");
  m.map.rows = layers.size();
  m.map.cols = m.tokens.size();
  m.map.values.assign(m.map.rows * m.map.cols, kNaN);
  m.map.col_labels = m.tokens;
  m.map.colour_label = decisions ? "decision" : "gate";
  for (std::size_t r = 0; r < layers.size(); ++r) {
    const auto& l = layers[r];
    m.map.row_labels.push_back("L" + std::to_string(l.value("layer", static_cast<int>(r))));
    const char* key = decisions ? "decision" : "gate";
    if (!l.contains(key) && !decisions) key = "decision";  // a layer with hard decisions only
    if (!l.contains(key) || !l.at(key).is_array()) continue;
    const auto& values = l.at(key);
    for (std::size_t c = 0; c < m.map.cols && c < values.size(); ++c)
      if (values[c].is_number()) m.map.values[r * m.map.cols + c] = values[c].get<double>();
  }
  return m;
}

Figure build_token_maps(const RunStore& store, const FigureRequest& request) {
  const bool decisions = request.metric == "decision";
  auto a = probe_map(store, request.run_ids[0], request.step, decisions);
  auto b = probe_map(store, request.run_ids[1], request.step, decisions);
  if (a.tokens != b.tokens)
    throw DataError("token-maps: runs " + std::to_string(request.run_ids[0]) + " and " +
                    std::to_string(request.run_ids[1]) + " probed different texts (" + std::to_string(a.tokens.size()) +
                    " and " + std::to_string(b.tokens.size()) + " tokens); their maps cannot be subtracted");
  FigureHeatmap diff;
  diff.rows = std::max(a.map.rows, b.map.rows);
  diff.cols = a.map.cols;
  diff.values.assign(diff.rows * diff.cols, kNaN);
  diff.row_labels = a.map.rows >= b.map.rows ? a.map.row_labels : b.map.row_labels;
  diff.col_labels = a.tokens;
  diff.diverging = true;
  diff.colour_label = "difference";
  double largest = 0;
  for (std::size_t r = 0; r < std::min(a.map.rows, b.map.rows); ++r)
    for (std::size_t c = 0; c < diff.cols; ++c) {
      const double d = a.map.values[r * diff.cols + c] - b.map.values[r * diff.cols + c];
      diff.values[r * diff.cols + c] = d;
      if (std::isfinite(d)) largest = std::max(largest, std::abs(d));
    }
  diff.lo = largest > 0 ? -largest : -1.0;
  diff.hi = largest > 0 ? largest : 1.0;
  Figure f;
  f.columns = 3;
  for (auto* m : {&a, &b}) {
    FigurePanel p;
    p.title = m->title;
    p.x_label = "probe token";
    p.y_label = "layer";
    p.legend = false;
    p.heatmap = std::move(m->map);
    f.panels.push_back(std::move(p));
  }
  FigurePanel d;
  d.title = "difference (first - second)";
  d.x_label = "probe token";
  d.y_label = "layer";
  d.legend = false;
  d.heatmap = std::move(diff);
  f.panels.push_back(std::move(d));
  f.meta["map"] = decisions ? "decision" : "gate";
  return f;
}

// ---------------------------------------------------------------------------------------------------------------
// CSV and pgfplots

std::string csv_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

/// Rows of the tidy CSV in the order figure_to_csv writes them; pgfplots reads ranges of them by row index.
struct CsvRow {
  std::size_t panel;
  std::string kind, series, category;
  double x, y;
  std::optional<double> lo, hi, value;
};

/// Per panel: the first row and row count of each series, each bar member and the heat map.
struct CsvLayout {
  std::vector<std::vector<std::pair<std::size_t, std::size_t>>> series, members;
  std::vector<std::pair<std::size_t, std::size_t>> heatmap;
};

std::vector<CsvRow> csv_rows(const Figure& figure, CsvLayout* layout) {
  std::vector<CsvRow> rows;
  if (layout) *layout = {};
  for (std::size_t p = 0; p < figure.panels.size(); ++p) {
    const auto& panel = figure.panels[p];
    if (layout) layout->series.emplace_back(), layout->members.emplace_back();
    for (std::size_t k = 0; k < panel.series.size(); ++k) {
      const auto& s = panel.series[k];
      const auto first = rows.size();
      const bool band = !s.y_lo.empty();
      for (std::size_t i = 0; i < s.x.size(); ++i)
        rows.push_back({p, to_string(s.kind), s.label, "", s.x[i], s.y[i], band ? std::optional(s.y_lo[i]) : std::nullopt,
                        band ? std::optional(s.y_hi[i]) : std::nullopt, std::nullopt});
      if (layout) layout->series.back().emplace_back(first, rows.size() - first);
    }
    for (const auto& m : panel.bars.members) {
      const auto first = rows.size();
      const bool errors = !m.errors.empty();
      for (std::size_t c = 0; c < m.values.size(); ++c) {
        const double v = m.values[c];
        const std::string category = c < panel.bars.categories.size() ? panel.bars.categories[c] : "";
        rows.push_back({p, "bar", m.label, category, static_cast<double>(c), v,
                        errors ? std::optional(v - m.errors[c]) : std::nullopt,
                        errors ? std::optional(v + m.errors[c]) : std::nullopt, std::nullopt});
      }
      if (layout) layout->members.back().emplace_back(first, rows.size() - first);
    }
    const auto& h = panel.heatmap;
    const auto first = rows.size();
    for (std::size_t r = 0; r < h.rows; ++r)
      for (std::size_t c = 0; c < h.cols; ++c)
        rows.push_back({p, "cell", r < h.row_labels.size() ? h.row_labels[r] : "",
                        c < h.col_labels.size() ? h.col_labels[c] : "", static_cast<double>(c), static_cast<double>(r),
                        std::nullopt, std::nullopt, h.values[r * h.cols + c]});
    if (layout) layout->heatmap.emplace_back(first, rows.size() - first);
  }
  return rows;
}

std::string tex_colour_name(int color) {
  const auto n = static_cast<int>(figure_palette().size());
  return "routelab" + std::string(1, static_cast<char>('A' + ((color % n) + n) % n));
}

const char* tex_dash(int dash) {
  switch (dash) {
    case 1: return "dashed";
    case 2: return "dotted";
    case 3: return "dashdotted";
    default: return "solid";
  }
}

/// Plain text for a pgfplots label: LaTeX specials escaped, control characters shown as escapes, braces
/// balanced by construction.
std::string tex_text(const std::string& text) {
  // pdflatex knows few characters beyond ASCII: the tokenizers' marks for a line break and a tab become escapes,
  // anything else beyond ASCII (or a control character) a '?'.
  std::string printable;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto ch = static_cast<unsigned char>(text[i]);
    if (text.compare(i, 3, "\u23CE") == 0) {  // ⏎
      printable += "\\n";
      i += 2;
    } else if (text.compare(i, 3, "\u21E5") == 0) {  // ⇥
      printable += "\\t";
      i += 2;
    } else if (ch == '\n') {
      printable += "\\n";
    } else if (ch == '\t') {
      printable += "\\t";
    } else if (ch < 0x20 || ch == 0x7F) {
      printable += '?';
    } else if (ch >= 0x80) {
      printable += '?';
      while (i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80) ++i;  // one code point
    } else {
      printable += static_cast<char>(ch);
    }
  }
  auto escaped = latex_escape(printable);
  // Spaces at the ends of a token are invisible: show them.
  if (!escaped.empty() && escaped.front() == ' ') escaped = "\\textvisiblespace{}" + escaped.substr(1);
  if (escaped.size() > 1 && escaped.back() == ' ') escaped = escaped.substr(0, escaped.size() - 1) + "\\textvisiblespace{}";
  if (escaped == " ") escaped = "\\textvisiblespace{}";
  return escaped;
}

std::string tex_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string row_range(std::pair<std::size_t, std::size_t> range) {
  return "restrict expr to domain={\\coordindex}{" + std::to_string(range.first) + ":" +
         std::to_string(range.first + range.second - 1) + "}";
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) throw Error("cannot write " + path);
}

}  // namespace

// -------------------------------------------------------------------------------------------------------------------

double training_step_dense_flops(const RunStore& store, std::int64_t run_id) {
  const auto run = run_record(store, run_id);
  const auto config = run_config(store, run);
  FlopsQuery q;
  q.batch = config_int(store, run, config, "train", "batch_size");
  q.seq = config_int(store, run, config, "data", "context");
  try {
    return 3.0 * estimate_flops(full_model(store, run, config), 256, q).dense_layer_flops();
  } catch (const ConfigError& e) {
    throw ConfigError(store.path() + ": run " + std::to_string(run_id) + ": " + e.what());
  }
}

std::pair<std::vector<std::int64_t>, std::vector<double>> training_flops_ratios(const RunStore& store,
                                                                                 std::int64_t run_id) {
  auto points = store.metric(run_id, "train/flops_ratio");
  if (points.empty()) points = store.metric(run_id, "val/flops_ratio");
  std::pair<std::vector<std::int64_t>, std::vector<double>> out;
  for (const auto& p : points)
    if (std::isfinite(p.value)) out.first.push_back(p.step), out.second.push_back(p.value);
  return out;
}

CumulativeFlops training_flops_axis(const RunStore& store, std::int64_t run_id) {
  const double dense_step = training_step_dense_flops(store, run_id);
  auto [steps, ratios] = training_flops_ratios(store, run_id);
  if (ratios.empty())
    throw DataError(store.path() + ": run " + std::to_string(run_id) +
                    " stores neither train/flops_ratio nor val/flops_ratio: no FLOPs axis");
  return CumulativeFlops(dense_step, std::move(steps), std::move(ratios));
}

const std::vector<FigureInfo>& figure_catalog() {
  static const std::vector<FigureInfo> catalog = [] {
    std::vector<FigureInfo> c = {
        {"curves", "Metric versus training progress",
         "`metric` (default val/loss) against `x_axis`: step, tokens (step x train.batch_size x data.context), flops "
         "(cumulative training FLOPs of the layers: 3 x the FLOPs model's dense forward per step x the measured "
         "train/flops_ratio) or wall (seconds since the run started). With `by_seed`, runs differing only in their "
         "seed become one mean +- std line over the x range all of them cover. `smoothing` in (0, 1) on a train/* "
         "metric draws a debiased EMA over a faint raw line. One colour per architecture, one dash per variant.",
         1, build_curves},
        {"matched", "Quality at matched budgets",
         "`metric` linearly interpolated at `budgets` on `x_axis` (the CLI defaults to flops here; no extrapolation: "
         "a budget outside a run's range is missing for that run), points and lines per group, mean +- std over "
         "seeds. Empty `budgets`: five evenly spaced budgets up to the largest value every run reaches. The same "
         "numbers as a table: matched_budget_table().",
         1, build_matched},
        {"pareto", "Quality versus cost",
         "`metric`'s last value against the FLOPs ratio at evaluation (last val/flops_ratio, else the last "
         "evaluation's flops_ratio), one point per group (mean over seeds, std as error), and the Pareto front "
         "(higher is better for accuracy, F1, throughput and 'saved' metrics, else lower).",
         1, build_pareto},
        {"routed-layers", "Routed tokens per layer",
         "Per layer, the percentage of tokens on the routed path in the inference-mode evaluation at `step` (0: the "
         "last one), grouped bars with std over seeds as error bars; layers that do not route are hatched full bars "
         "(seed 000 Figure 5).",
         1, build_routed_layers},
        {"cost-length", "FLOPs ratio and KV cache versus sequence length",
         "From the FLOPs model with each run's routed fractions measured at evaluation `step` (0: the last): the "
         "layers' FLOPs ratio to a dense model and the KV cache in MiB of one sequence, per length in `lengths` "
         "(default 64 .. max(8192, 4 x context), powers of two), one line per run, the dense reference dashed "
         "(seed 000 Figures 4 and 6).",
         1, build_cost_length},
        {"token-maps", "Per-token routing of the probe text",
         "Heat maps (layers x probe tokens) of the first two runs' probe at `step` (0: the last): the gate, or the "
         "binary decision when `metric` is 'decision' (a layer without a gate shows its decision), and their "
         "difference on a diverging scale. Both runs must have probed the same text.",
         2, build_token_maps},
    };
    for (auto& f : seed_figures()) c.push_back(std::move(f));
    return c;
  }();
  return catalog;
}

const FigureInfo& figure_info(const std::string& name) {
  std::string known;
  for (const auto& info : figure_catalog()) {
    if (info.name == name) return info;
    known += (known.empty() ? "" : ", ") + info.name;
  }
  throw ConfigError("unknown figure '" + name + "' (known: " + known + ")");
}

Figure build_figure(const RunStore& store, const FigureRequest& request) {
  const auto& info = figure_info(request.name);
  if (request.run_ids.size() < info.min_runs)
    throw ConfigError("figure '" + info.name + "' needs at least " + std::to_string(info.min_runs) + " run" +
                      (info.min_runs == 1 ? "" : "s") + ", got " + std::to_string(request.run_ids.size()));
  for (auto id : request.run_ids)
    if (!store.run(id)) throw StoreError(store.path() + ": no run " + std::to_string(id));
  if (!(request.width_cm > 0) || !(request.height_cm > 0) || !(request.font_pt > 0))
    throw ConfigError("figure '" + info.name + "': width, height and font size must be > 0");
  Figure figure = info.build(store, request);
  figure.name = info.name;
  if (figure.title.empty()) figure.title = info.title;
  figure.width_cm = request.width_cm;
  figure.height_cm = request.height_cm;
  figure.font_pt = request.font_pt;
  if (!figure.meta.is_object()) figure.meta = json::object();
  figure.meta["run_ids"] = request.run_ids;
  figure.meta["request"] = {{"name", request.name},         {"run_ids", request.run_ids},
                            {"metric", request.metric},     {"x_axis", request.x_axis},
                            {"smoothing", request.smoothing}, {"by_seed", request.by_seed},
                            {"budgets", request.budgets},   {"step", request.step},
                            {"lengths", request.lengths},   {"width_cm", request.width_cm},
                            {"height_cm", request.height_cm}, {"font_pt", request.font_pt}};
  figure.meta["routelab_version"] = ROUTELAB_VERSION;
  figure.meta["store"] = store.path();
  return figure;
}

ReportTable matched_budget_table(const RunStore& store, const FigureRequest& request) {
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

std::string figure_to_csv(const Figure& figure) {
  // Numbers first, text last: pgfplots' table reader ignores surplus trailing columns, so a label holding a
  // (quoted) comma cannot shift the numbers it reads.
  std::string out = "panel,x,y,y_lo,y_hi,value,kind,series,category\n";
  // A number that does not apply to a row's kind is written as nan too: pgfplots evaluates expressions on every
  // row it reads, and an empty cell is no number.
  const auto optional_number = [](const std::optional<double>& v) { return csv_number(v ? *v : kNaN); };
  for (const auto& r : csv_rows(figure, nullptr)) {
    out += std::to_string(r.panel) + "," + csv_number(r.x) + "," + csv_number(r.y) + "," + optional_number(r.lo) + "," +
           optional_number(r.hi) + "," + optional_number(r.value) + "," + r.kind + "," + csv_field(r.series) + "," +
           csv_field(r.category) + "\n";
  }
  return out;
}

std::string figure_to_pgfplots(const Figure& figure, const std::string& csv_file) {
  CsvLayout layout;
  csv_rows(figure, &layout);
  const auto n_panels = figure.panels.size();
  const std::size_t columns = figure.columns > 0 ? static_cast<std::size_t>(figure.columns) : std::max<std::size_t>(1, n_panels);
  const std::size_t rows = n_panels == 0 ? 1 : (n_panels + columns - 1) / columns;
  const double panel_w = figure.width_cm / static_cast<double>(std::min(columns, std::max<std::size_t>(1, n_panels)));
  const double panel_h = figure.height_cm / static_cast<double>(rows);
  const std::string font = "\\fontsize{" + tex_number(figure.font_pt) + "}{" + tex_number(1.2 * figure.font_pt) +
                           "}\\selectfont";
  const std::string table_opts = "col sep=comma, x=x, y=y";

  std::ostringstream t;
  t << "% RouteLab figure '" << figure.name << "': " << figure.title << "\n"
    << "% Data: " << csv_file << " (tidy CSV: panel,x,y,y_lo,y_hi,value,kind,series,category; each plot reads its\n"
    << "% rows by index). \\input this file in a document that loads pgfplots with\n"
    << "% \\usepgfplotslibrary{groupplots,fillbetween} and \\usetikzlibrary{patterns}, or compile it alone.\n"
    << "\\makeatletter\n"
    << "\\ifx\\documentclass\\@twoclasseserror\\def\\routelabStandalone{0}\\else\\def\\routelabStandalone{1}\\fi\n"
    << "\\makeatother\n"
    << "\\if1\\routelabStandalone\n"
    << "\\documentclass{article}\n"
    << "\\usepackage[T1]{fontenc}\n"
    << "\\usepackage{pgfplots}\n"
    << "\\usepgfplotslibrary{groupplots,fillbetween}\n"
    << "\\usetikzlibrary{patterns}\n"
    << "\\pgfplotsset{compat=1.16}\n"
    << "\\pagestyle{empty}\n"
    << "\\begin{document}\n"
    << "\\fi\n";
  const auto& palette = figure_palette();
  for (std::size_t i = 0; i < palette.size(); ++i)
    t << "\\definecolor{" << tex_colour_name(static_cast<int>(i)) << "}{HTML}{" << palette[i].substr(1) << "}\n";
  t << "\\pgfplotsset{colormap={routelabdiverging}{rgb255=(33,102,172) rgb255=(247,247,247) rgb255=(178,24,43)}}\n";
  t << "\\begin{tikzpicture}[font=" << font << "]\n";
  const bool grouped = n_panels > 1;
  const std::string common = "width=" + tex_number(panel_w) + "cm, height=" + tex_number(panel_h) +
                             "cm, unbounded coords=jump, legend style={font=" + font +
                             ", draw=none, fill=none}, label style={font=" + font + "}, tick label style={font=" +
                             font + "}, title style={font=" + font + "}";
  if (grouped) {
    // Colour bars sit right of their panel: leave them room.
    const bool colour_bars = std::any_of(figure.panels.begin(), figure.panels.end(),
                                         [](const FigurePanel& p) { return !p.heatmap.values.empty(); });
    t << "\\begin{groupplot}[group style={group size=" << columns << " by " << rows
      << ", horizontal sep=" << (colour_bars ? "3.2cm" : "1.6cm") << ", vertical sep=1.6cm}, " << common << "]\n";
  }
  for (std::size_t p = 0; p < n_panels; ++p) {
    const auto& panel = figure.panels[p];
    std::vector<std::string> axis;
    if (!panel.title.empty()) axis.push_back("title={" + tex_text(panel.title) + "}");
    if (!panel.x_label.empty()) axis.push_back("xlabel={" + tex_text(panel.x_label) + "}");
    if (!panel.y_label.empty()) axis.push_back("ylabel={" + tex_text(panel.y_label) + "}");
    if (panel.log_x) axis.push_back("xmode=log");
    if (panel.log_y) axis.push_back("ymode=log");
    const bool has_bars = !panel.bars.members.empty();
    const auto& h = panel.heatmap;
    const bool has_map = !h.values.empty();
    const auto ticks = [](const std::vector<std::string>& labels) {
      std::string pos, text;
      for (std::size_t i = 0; i < labels.size(); ++i) {
        if (i > 0) pos += ',', text += ',';
        pos += std::to_string(i);
        text += '{';
        text.append(tex_text(labels[i]));
        text += '}';
      }
      return std::make_pair(pos, text);
    };
    if (has_bars) {
      const auto [pos, text] = ticks(panel.bars.categories);
      axis.push_back("xtick={" + pos + "}, xticklabels={" + text + "}, ymin=0, enlarge x limits={abs=0.6}");
      axis.push_back("legend style={at={(0.5,1.02)}, anchor=south, legend columns=2}");
    }
    if (has_map) {
      const auto [xpos, xtext] = ticks(h.col_labels);
      const auto [ypos, ytext] = ticks(h.row_labels);
      if (!h.col_labels.empty())
        axis.push_back("xtick={" + xpos + "}, xticklabels={" + xtext + "}, x tick label style={rotate=90}");
      if (!h.row_labels.empty()) axis.push_back("ytick={" + ypos + "}, yticklabels={" + ytext + "}");
      axis.push_back("y dir=reverse, axis on top, enlargelimits=false, point meta min=" + tex_number(h.lo) +
                     ", point meta max=" + tex_number(h.hi) + ", colorbar, colorbar style={title={" +
                     tex_text(h.colour_label) + "}}, " +
                     (h.diverging ? "colormap name=routelabdiverging" : "colormap name=viridis"));
    }
    std::string options;
    for (const auto& a : axis) options += (options.empty() ? "" : ", ") + a;
    if (grouped) {
      t << "\\nextgroupplot[" << options << "]\n";
    } else {
      t << "\\begin{axis}[" << common << (options.empty() ? "" : ", ") << options << "]\n";
    }
    // Lines, points and bands.
    for (std::size_t k = 0; k < panel.series.size(); ++k) {
      const auto& s = panel.series[k];
      const auto range = layout.series[p][k];
      if (range.second == 0) continue;
      const std::string colour = tex_colour_name(s.color);
      const std::string rows_of = row_range(range);
      if (!s.y_lo.empty()) {
        const std::string lo = "rlLo" + std::to_string(p) + "x" + std::to_string(k);
        const std::string hi = "rlHi" + std::to_string(p) + "x" + std::to_string(k);
        t << "\\addplot[draw=none, forget plot, name path=" << lo << "] table[col sep=comma, x=x, y=y_lo, " << rows_of
          << "] {" << csv_file << "};\n"
          << "\\addplot[draw=none, forget plot, name path=" << hi << "] table[col sep=comma, x=x, y=y_hi, " << rows_of
          << "] {" << csv_file << "};\n"
          << "\\addplot[fill=" << colour << ", fill opacity=0.2, draw=none, forget plot] fill between[of=" << hi
          << " and " << lo << "];\n";
      }
      std::vector<std::string> style = {"color=" + colour, tex_dash(s.dash)};
      if (s.kind == SeriesKind::Points) {
        style.push_back("only marks, mark=*");
      } else {
        style.push_back(s.marked ? "mark=*" : "no marks");
        if (s.kind == SeriesKind::Step) style.push_back("const plot");
      }
      if (s.faint) style.push_back("opacity=0.3, thin");
      else style.push_back("thick");
      const bool in_legend = panel.legend && !s.label.empty();
      if (!in_legend) style.push_back("forget plot");
      std::string st;
      for (const auto& x : style) st += (st.empty() ? "" : ", ") + x;
      t << "\\addplot[" << st << "] table[" << table_opts << ", " << rows_of << "] {" << csv_file << "};\n";
      if (in_legend) t << "\\addlegendentry{" << tex_text(s.label) << "}\n";
    }
    // Grouped bars.
    const auto n_members = panel.bars.members.size();
    for (std::size_t k = 0; k < n_members; ++k) {
      const auto& m = panel.bars.members[k];
      const auto range = layout.members[p][k];
      if (range.second == 0) continue;
      const double width = 0.8 / static_cast<double>(n_members);
      const double shift = (static_cast<double>(k) - (static_cast<double>(n_members) - 1) / 2.0) * width;
      const std::string colour = tex_colour_name(m.color);
      // The member's offset goes into x itself (not bar shift), so its error bars sit on its bars.
      std::string style = "ybar, bar width=" + tex_number(width) + ", bar shift=0pt, area legend, draw=" + colour +
                          ", fill=" + colour;
      if (m.hatched) style += "!25, postaction={pattern=north east lines, pattern color=" + colour + "}";
      std::string table = "col sep=comma, x expr=\\thisrow{x}+" + tex_number(shift) + ", y=y, " + row_range(range);
      const bool in_legend = panel.legend && !m.label.empty();
      if (!in_legend) style += ", forget plot";
      if (!m.errors.empty()) {  // last: the keys after /.cd live under error bars
        style += ", error bars/.cd, y dir=both, y explicit";
        table += ", y error plus expr=\\thisrow{y_hi}-\\thisrow{y}, y error minus expr=\\thisrow{y}-\\thisrow{y_lo}";
      }
      t << "\\addplot[" << style << "] table[" << table << "] {" << csv_file << "};\n";
      if (in_legend) t << "\\addlegendentry{" << tex_text(m.label) << "}\n";
    }
    // The heat map: one cell per (row, column), coloured by its value. pgfplots' matrix plot takes no slice of a
    // file (filtered rows count as holes), so the cells (the CSV's "cell" rows of this panel) are written inline.
    if (has_map) {
      t << "\\addplot[matrix plot*, point meta=explicit, mesh/cols=" << h.cols << ", mesh/rows=" << h.rows
        << "] table[x=x, y=y, meta=value, row sep=\\\\] {\nx y value\\\\\n";
      for (std::size_t r = 0; r < h.rows; ++r) {
        for (std::size_t c = 0; c < h.cols; ++c)
          t << c << " " << r << " " << csv_number(h.values[r * h.cols + c]) << "\\\\ ";
        t << "\n";
      }
      t << "};\n";
    }
    if (!grouped) t << "\\end{axis}\n";
  }
  if (grouped) t << "\\end{groupplot}\n";
  if (n_panels == 0) t << "\\node {(empty figure)};\n";
  t << "\\end{tikzpicture}\n"
    << "\\if1\\routelabStandalone\n"
    << "\\end{document}\n"
    << "\\fi\n";
  return t.str();
}

std::vector<std::string> write_figure_data_files(const Figure& figure, const std::string& stem) {
  namespace fs = std::filesystem;
  const fs::path base(stem);
  if (base.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(base.parent_path(), ec);
    if (ec) throw Error("cannot create " + base.parent_path().string() + ": " + ec.message());
  }
  const std::string csv = stem + ".csv", tex = stem + ".tex", sidecar = stem + ".json";
  write_text_file(csv, figure_to_csv(figure));
  // The picture names the CSV by its file name: the two files travel together.
  write_text_file(tex, figure_to_pgfplots(figure, fs::path(csv).filename().string()));
  write_text_file(sidecar, to_json(figure).dump(2) + "\n");
  return {csv, tex, sidecar};
}

}  // namespace routelab
