// The cost figures: "pareto" (quality against the FLOPs ratio at evaluation, with the Pareto front) and
// "cost-length" (the FLOPs ratio and the KV cache against sequence length, priced with measured routing).
#include <algorithm>
#include <cmath>
#include <map>

#include "core/cost/cost_curve.h"
#include "core/cost/flops_model.h"
#include "core/models/registry.h"
#include "core/report/builders/builder_detail.h"
#include "core/report/figure/curves.h"
#include "core/report/tables/table.h"
#include "core/util/errors.h"

namespace routelab::figure_detail {

// ---------------------------------------------------------------------------------------------------------------
// pareto

namespace {

/// The run's FLOPs ratio at its evaluation: the last val/flops_ratio, else the last evaluation's extra.flops_ratio.
double run_cost(const RunStore& store, std::int64_t run_id) {
  const auto points = read_metric(store, run_id, "val/flops_ratio");
  for (auto it = points.rbegin(); it != points.rend(); ++it)
    if (std::isfinite(it->value)) return it->value;
  std::vector<std::string> unreadable;  // a point without a cost is left out; the run's other figures name the row
  const auto evals = read_evaluations(store, run_id, &unreadable);
  for (auto it = evals.rbegin(); it != evals.rend(); ++it)
    if (it->flops_ratio && std::isfinite(*it->flops_ratio)) return *it->flops_ratio;
  return kNaN;
}

}  // namespace

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
// cost-length

namespace {

std::vector<std::int64_t> cost_lengths(const FigureRequest& request, std::int64_t longest_context) {
  if (request.lengths.empty()) return default_cost_lengths(longest_context);
  for (auto t : request.lengths)
    if (t < 1) throw ConfigError("cost-length lengths: " + std::to_string(t) + " must be at least 1");
  auto out = request.lengths;
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

Figure build_cost_length(const RunStore& store, const FigureRequest& request) {
  struct RunCost {
    RunRecord run;
    json model;
    std::vector<LayerRouting> layers;
    double value_bytes = 4;  ///< of the KV cache: 2 when the run trained in bf16
    std::int64_t context = 0, eval_step = 0;
    double measured = kNaN;  ///< the FLOPs ratio the evaluation measured from the real decisions
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
    rc.measured = eval.flops_ratio.value_or(kNaN);
    rc.layers = eval_layers(store, id, eval, "cost-length");
    const bool bf16 = config.contains("train") && config.at("train").value("precision", std::string()) == "bf16";
    rc.value_bytes = bf16 ? 2.0 : 4.0;
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
  dense_ratio.color = arch_color(kBaselineArchitecture);
  dense_ratio.dash = 1;
  for (auto t : lengths) dense_ratio.x.push_back(static_cast<double>(t)), dense_ratio.y.push_back(1.0);
  flops_panel.series.push_back(dense_ratio);

  Styler styler;
  std::map<std::pair<std::int64_t, double>, bool> dense_kv_drawn;  // (layers, dense bytes at the longest length) -> drawn
  json sources = json::array();
  for (const auto& rc : runs) {
    const auto [color, dash] = styler.next(rc.run.arch);
    const auto label = rc.run.name.empty() ? "run " + std::to_string(rc.run.id) : rc.run.name;
    FigureSeries ratio, kv;
    ratio.label = kv.label = label;
    ratio.color = kv.color = color;
    ratio.dash = kv.dash = dash;
    std::vector<CostPoint> curve;
    try {
      curve = priced_cost_curve(rc.model, rc.layers, rc.value_bytes, lengths);
    } catch (const ConfigError& e) {
      throw ConfigError("cost-length: " + store.path() + ": run " + std::to_string(rc.run.id) + ": " + e.what());
    }
    for (const auto& p : curve) {
      ratio.x.push_back(static_cast<double>(p.seq));
      ratio.y.push_back(p.dense_flops > 0 ? p.flops / p.dense_flops : kNaN);
      kv.x.push_back(static_cast<double>(p.seq));
      kv.y.push_back(p.kv_bytes / mib);
    }
    flops_panel.series.push_back(std::move(ratio));
    if (std::isfinite(rc.measured)) {  // the evaluation's own ratio, at the context it ran
      FigureSeries measured;
      measured.label = label + " (measured)";
      measured.kind = SeriesKind::Points;
      measured.marked = true;
      measured.color = color;
      measured.x = {static_cast<double>(rc.context)};
      measured.y = {rc.measured};
      flops_panel.series.push_back(std::move(measured));
    }
    const auto shape = std::make_pair(static_cast<std::int64_t>(rc.layers.size()), curve.back().dense_kv_bytes);
    if (!dense_kv_drawn[shape]) {
      dense_kv_drawn[shape] = true;
      FigureSeries dense_kv;
      dense_kv.label = "dense";
      dense_kv.color = arch_color(kBaselineArchitecture);
      dense_kv.dash = 1;
      for (const auto& p : curve) {
        dense_kv.x.push_back(static_cast<double>(p.seq));
        dense_kv.y.push_back(p.dense_kv_bytes / mib);
      }
      kv_panel.series.push_back(std::move(dense_kv));
    }
    kv_panel.series.push_back(std::move(kv));
    sources.push_back({{"run", rc.run.id},
                       {"eval_step", rc.eval_step},
                       {"fractions", fractions_from_trace(rc.run.arch, rc.layers)}});
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

}  // namespace routelab::figure_detail
