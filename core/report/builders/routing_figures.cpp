// The routing figures: "routed-layers" (routed tokens per layer at an evaluation, DTRNet Figure 5),
// "routing-history" (training-mode routing per layer and logged step), "token-map" (one run's probe, every row the
// dashboard shows), "token-maps" (per-token gates or decisions of two runs' probes, and their difference),
// "routing-by-token" (the routed share per layer by kind of token, from the checkpoint: core/analysis),
// "routing-by-token-history" (the same, mean over the routed layers, at each checkpoint; "-layers": a panel a layer)
// and "routing-stability" (how much of the probe's routing each evaluation keeps from the one before).
#include <algorithm>
#include <cmath>
#include <map>

#include "core/analysis/routing_breakdown.h"
#include "core/report/builders/builder_detail.h"
#include "core/report/figure/run_panels.h"
#include "core/report/tables/table.h"
#include "core/run/probe_record.h"
#include "core/run/routing_history.h"
#include "core/util/errors.h"

namespace routelab::figure_detail {

// ---------------------------------------------------------------------------------------------------------------
// routed-layers

namespace {

/// Which modes "routed-layers" draws: `metric` "training" or "both", else inference only.
struct RoutedModes {
  bool inference = true, training = false;
};

RoutedModes routed_modes(const std::string& metric) {
  if (metric == "training") return {false, true};
  if (metric == "both") return {true, true};
  return {};
}

}  // namespace

Figure build_routed_layers(const RunStore& store, const FigureRequest& request) {
  const RoutedModes modes = routed_modes(request.metric);
  std::vector<RoutedLayersGroup> groups;
  json training_steps = json::array();
  for (const auto& g : styled_groups(store, request)) {
    RoutedLayersGroup group;
    group.label = g.group.label;
    group.color = g.color;
    bool training_read = false;
    for (auto id : g.group.run_ids) {
      // Training mode alone takes which layers route from the last evaluation (that does not change in a run).
      const auto eval = eval_at(store, id, modes.inference ? request.step : 0, "routed-layers");
      const auto layers = eval_layers(store, id, eval, "routed-layers");
      std::vector<double> fractions;
      std::vector<bool> routed;
      for (const auto& l : layers) {
        fractions.push_back(l.routed_fraction);
        routed.push_back(l.routed);
      }
      if (group.routed.empty()) group.routed = routed;
      if (modes.inference) group.inference.push_back(std::move(fractions));
      if (modes.training && !training_read) {  // the group's first run: seeds log at different steps
        training_read = true;
        const auto history = read_routing_history(store, id);
        if (const auto* column = history.column_at(request.step, &group.training_step)) {
          group.training = *column;
          training_steps.push_back(group.training_step);
        } else if (modes.inference) {
          training_steps.push_back(nullptr);  // "both": a run that logged none shows its inference bars alone
        } else {
          throw DataError("routed-layers: " + store.path() + ": run " + std::to_string(id) +
                          " logged no training-mode routing" +
                          (request.step ? " at or before step " + std::to_string(request.step) : std::string()));
        }
      }
    }
    groups.push_back(std::move(group));
  }
  Figure f;
  f.panels.push_back(routed_layers_panel(groups));
  f.meta["eval_step"] = request.step;
  f.meta["modes"] = modes.inference && modes.training ? "both" : modes.training ? "training" : "inference";
  if (modes.training) f.meta["training_steps"] = training_steps;  // per group, the logged step drawn
  return f;
}

// ---------------------------------------------------------------------------------------------------------------
// routing-history

Figure build_routing_history(const RunStore& store, const FigureRequest& request) {
  Figure f;
  for (auto id : request.run_ids) {
    const auto history = read_routing_history(store, id);
    if (history.empty())
      throw DataError("routing-history: " + store.path() + ": run " + std::to_string(id) +
                      " logged no training-mode routing");
    // The layers that do not route, from the last evaluation (none yet: every layer is drawn).
    std::vector<bool> routed;
    const auto evals = evaluations(store, id, "routing-history");
    if (!evals.empty())
      for (const auto& l : evals.back().layers) routed.push_back(l.routed);
    f.panels.push_back(routing_history_panel(run_label(run_record(store, id)), history, routed));
  }
  f.columns = 1;
  return f;
}

// ---------------------------------------------------------------------------------------------------------------
// token-maps

namespace {

struct ProbeMap {
  std::string title;
  std::vector<std::string> tokens;
  FigureHeatmap map;
};

ProbeMap probe_map(const RunStore& store, std::int64_t run_id, std::int64_t step, bool decisions) {
  const ProbeRecord found = probe_at(store, run_id, step, "token-maps");
  const ProbeRecord* probe = &found;
  if (probe->tokens.empty() || probe->layers.empty())
    throw DataError("token-maps: run " + std::to_string(run_id) + " step " + std::to_string(probe->step) +
                    ": the probe has no tokens or layers");
  ProbeMap m;
  m.title = token_map_title(run_record(store, run_id), probe->step);
  m.tokens = probe->tokens;
  m.map.rows = probe->layers.size();
  m.map.cols = m.tokens.size();
  m.map.values.assign(m.map.rows * m.map.cols, kNaN);
  m.map.col_labels = m.tokens;
  m.map.colour_label = decisions ? "decision" : "gate";
  for (std::size_t r = 0; r < probe->layers.size(); ++r) {
    const auto& l = probe->layers[r];
    m.map.row_labels.push_back(layer_label(l.layer));
    // A layer with hard decisions only shows them on the gate map too.
    const auto& values = decisions || l.gate.empty() ? l.decision : l.gate;
    for (std::size_t c = 0; c < m.map.cols && c < values.size(); ++c) m.map.values[r * m.map.cols + c] = values[c];
  }
  return m;
}

}  // namespace

Figure build_token_map(const RunStore& store, const FigureRequest& request) {
  // The request's default metric (val/loss) means the default colouring.
  const auto colour =
      parse_token_map_colour(request.metric == "val/loss" ? "gate" : request.metric, "token-map metric");
  Figure f;
  f.columns = 1;
  for (auto id : request.run_ids) {
    const ProbeRecord probe = probe_at(store, id, request.step, "token-map");
    if (probe.tokens.empty())
      throw DataError("token-map: run " + std::to_string(id) + " step " + std::to_string(probe.step) +
                      ": the probe has no tokens");
    f.panels.push_back(token_map_panel(token_map_title(run_record(store, id), probe.step), probe, colour));
  }
  f.meta["colour"] = to_string(colour);
  return f;
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
// routing-by-token

namespace {

/// The token grouping a routing-by-token figure's `metric` names; the request's default metric (val/loss) means the
/// first grouping.
TokenGrouping requested_grouping(const FigureRequest& request) {
  return parse_token_grouping(request.metric == "val/loss" ? token_grouping_names().front() : request.metric,
                              request.name + " metric");
}

}  // namespace

Figure build_routing_by_token(const RunStore& store, const FigureRequest& request) {
  const auto by = requested_grouping(request);
  RoutingBreakdownOptions options;
  options.groupings = {by};
  options.unrouted_is_empty = true;  // a dense baseline among the runs draws no panel
  Figure f;
  for (const auto id : request.run_ids) {
    const auto b = stored_routing_breakdown(store.path(), id, options, {}, request.step);
    if (b.layers.empty()) continue;
    FigurePanel p;
    p.title = run_label(run_record(store, id)) + " (step " + std::to_string(b.step) + ")";
    p.x_label = "routed layer";
    p.y_label = to_string(by);
    p.legend = false;
    auto& h = p.heatmap;
    const auto& groups = b.tables.front().groups;
    h.rows = groups.size();
    h.cols = b.layers.size();
    auto& described = f.meta["groups"][std::to_string(id)];
    for (const auto& g : groups) {
      h.row_labels.push_back(g.short_label);
      for (const auto v : g.routed) h.values.push_back(100.0 * v);  // NaN (an empty group) stays an empty cell
      described.push_back({{"label", g.label}, {"tokens", g.tokens}});
    }
    for (const auto& l : b.layers) h.col_labels.push_back(layer_label(l.layer));
    h.lo = 0.0;
    h.hi = 100.0;
    h.colour_label = "% routed";
    f.meta["tokens"][std::to_string(id)] = b.tokens;
    f.meta["checkpoint_step"][std::to_string(id)] = b.step;
    f.panels.push_back(std::move(p));
  }
  f.meta["grouping"] = to_string(by);
  f.columns = std::min<std::size_t>(2, std::max<std::size_t>(1, f.panels.size()));
  return f;
}

// ---------------------------------------------------------------------------------------------------------------
// routing-by-token-history

namespace {

/// The checkpoints a run's history breaks down at most (each is a forward over the sample the first time).
constexpr std::size_t kHistoryCheckpoints = 12;

/// The steps of at most `most` of the run's checkpoints, spread evenly from the first to the last (both kept); {0}
/// (the latest, which names the missing checkpoint) for a run without any.
std::vector<std::int64_t> spread_checkpoints(const RunStore& store, std::int64_t run, std::size_t most) {
  std::vector<std::int64_t> steps;
  for (const auto& c : store.checkpoints(run))
    if (steps.empty() || steps.back() != c.step) steps.push_back(c.step);
  if (steps.empty()) return {0};
  if (steps.size() <= most) return steps;
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < most; ++i) {
    const auto at = (i * (steps.size() - 1) + (most - 1) / 2) / (most - 1);  // rounded
    if (out.empty() || out.back() != steps[at]) out.push_back(steps[at]);
  }
  return out;
}

/// The history's panels: per run one, the mean over the routed layers, or (per_layer) one a routed layer; in each a
/// line a group, the group's share on the routed path at each checkpoint.
Figure token_history(const RunStore& store, const FigureRequest& request, bool per_layer) {
  const auto by = requested_grouping(request);
  RoutingBreakdownOptions options;
  options.groupings = {by};
  options.unrouted_is_empty = true;
  Figure f;
  for (const auto id : request.run_ids) {
    std::vector<std::vector<FigureSeries>> panels;  // [panel][group], the groups in the grouping's order
    std::vector<int> layers;                        // the routed layers (per_layer: each panel's)
    auto& steps = f.meta["checkpoint_steps"][std::to_string(id)];
    for (const auto step : spread_checkpoints(store, id, kHistoryCheckpoints)) {
      const auto b = stored_routing_breakdown(store.path(), id, options, {}, step);
      if (b.layers.empty()) break;  // a dense run: no panel
      steps.push_back(b.step);
      const auto& groups = b.tables.front().groups;
      if (panels.empty()) {
        for (const auto& l : b.layers) layers.push_back(l.layer);
        panels.assign(per_layer ? layers.size() : 1, std::vector<FigureSeries>(groups.size()));
      }
      for (std::size_t p = 0; p < panels.size(); ++p)
        for (std::size_t g = 0; g < groups.size() && g < panels[p].size(); ++g) {
          const auto& routed = groups[g].routed;
          const auto share = !per_layer ? groups[g].mean_routed() : p < routed.size() ? routed[p] : std::nan("");
          panels[p][g].label = groups[g].short_label;
          if (std::isnan(share)) continue;  // no token of the group in the sample
          panels[p][g].x.push_back(static_cast<double>(b.step));
          panels[p][g].y.push_back(100.0 * share);
        }
    }
    for (std::size_t i = 0; i < panels.size(); ++i) {
      FigurePanel p;
      p.title = run_label(run_record(store, id));
      if (per_layer) (p.title += ' ') += layer_label(layers[i]);  // appended: GCC 12 warns on " " + a temporary
      p.x_label = "Step (checkpoint)";
      p.y_label = "% routed";
      int colour = 0;
      for (auto& s : panels[i]) {
        s.color = colour++;
        s.marked = true;  // a few checkpoints: each one a marker (a run of one checkpoint is its markers alone)
        p.series.push_back(std::move(s));
      }
      // The groups are coloured alike in every panel: one legend says them, unless a panel's differ (another
      // context's position buckets).
      if (!f.panels.empty()) {
        const auto& first = f.panels.front().series;
        p.legend = first.size() != p.series.size() ||
                   !std::equal(first.begin(), first.end(), p.series.begin(),
                               [](const FigureSeries& a, const FigureSeries& b) { return a.label == b.label; });
      }
      f.panels.push_back(std::move(p));
    }
  }
  f.meta["grouping"] = to_string(by);
  f.columns = std::min<std::size_t>(per_layer ? 4 : 2, std::max<std::size_t>(1, f.panels.size()));
  return f;
}

}  // namespace

Figure build_routing_by_token_history(const RunStore& store, const FigureRequest& request) {
  return token_history(store, request, /*per_layer=*/false);
}

Figure build_routing_by_token_history_layers(const RunStore& store, const FigureRequest& request) {
  return token_history(store, request, /*per_layer=*/true);
}

// ---------------------------------------------------------------------------------------------------------------
// routing-stability

namespace {

/// |A and B| / |A or B| of the token positions two decision vectors route; 1 where neither routes any.
double jaccard(const std::vector<double>& a, const std::vector<double>& b) {
  std::size_t both = 0, either = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const bool x = a[i] > 0.5, y = b[i] > 0.5;
    both += x && y ? 1 : 0;
    either += x || y ? 1 : 0;
  }
  return either == 0 ? 1.0 : static_cast<double>(both) / static_cast<double>(either);
}

const ProbeLayer* decided_layer(const ProbeRecord& probe, int layer) {
  for (const auto& l : probe.layers)
    if (l.layer == layer && l.routed && !l.decision.empty()) return &l;
  return nullptr;
}

}  // namespace

Figure build_routing_stability(const RunStore& store, const FigureRequest& request) {
  Figure f;
  for (const auto id : request.run_ids) {
    const auto probes = read_probes(store, id);
    std::map<int, FigureSeries> layers;  // by layer: the overlap with the previous probe at each probe's step
    for (std::size_t k = 1; k < probes.size(); ++k) {
      const auto &before = probes[k - 1], &now = probes[k];
      if (before.tokens != now.tokens) continue;  // another text (a resumed run with another probe): no overlap
      for (const auto& l : now.layers) {
        const auto* earlier = l.routed && !l.decision.empty() ? decided_layer(before, l.layer) : nullptr;
        if (!earlier || earlier->decision.size() != l.decision.size()) continue;
        auto& s = layers[l.layer];
        s.x.push_back(static_cast<double>(now.step));
        s.y.push_back(jaccard(earlier->decision, l.decision));
      }
    }
    if (layers.empty()) continue;  // a dense run, or fewer than two probes
    FigurePanel p;
    p.title = run_label(run_record(store, id));
    p.x_label = "Step";
    p.y_label = "Jaccard with the previous probe";
    int colour = 0;
    for (auto& [layer, s] : layers) {
      s.label = layer_label(layer);
      s.color = colour++;
      p.series.push_back(std::move(s));
    }
    f.panels.push_back(std::move(p));
  }
  f.columns = std::min<std::size_t>(2, std::max<std::size_t>(1, f.panels.size()));
  return f;
}

}  // namespace routelab::figure_detail
