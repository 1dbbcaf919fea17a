// The routing figures: "routed-layers" (routed tokens per layer at an evaluation, seed 000 Figure 5) and
// "token-maps" (per-token gates or decisions of two runs' probes, and their difference).
#include <algorithm>
#include <cmath>

#include "core/report/figure_detail.h"
#include "core/report/table.h"
#include "core/run/probe_record.h"
#include "core/util/errors.h"

namespace routelab::figure_detail {

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
        fractions.push_back(l.routed_fraction);
        routed.push_back(l.routed);
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
// token-maps

namespace {

struct ProbeMap {
  std::string title;
  std::vector<std::string> tokens;
  FigureHeatmap map;
};

ProbeMap probe_map(const RunStore& store, std::int64_t run_id, std::int64_t step, bool decisions) {
  std::vector<ProbeRecord> probes;
  try {
    probes = read_probes(store, run_id);
  } catch (const DataError& e) {
    throw DataError(std::string("token-maps: ") + e.what());
  }
  if (probes.empty())
    throw DataError("token-maps: " + store.path() + ": run " + std::to_string(run_id) + " has no probe");
  const ProbeRecord* probe = &probes.back();
  if (step != 0) {
    probe = nullptr;
    std::string steps;
    for (const auto& p : probes) {
      if (p.step == step) probe = &p;
      steps += (steps.empty() ? "" : ", ") + std::to_string(p.step);
    }
    if (!probe)
      throw DataError("token-maps: run " + std::to_string(run_id) + " has no probe at step " + std::to_string(step) +
                      " (probed at: " + steps + ")");
  }
  if (probe->tokens.empty() || probe->layers.empty())
    throw DataError("token-maps: run " + std::to_string(run_id) + " step " + std::to_string(probe->step) +
                    ": the probe has no tokens or layers");
  ProbeMap m;
  m.title = run_label(run_record(store, run_id)) + " (step " + std::to_string(probe->step) + ")";
  m.tokens = probe->tokens;
  m.map.rows = probe->layers.size();
  m.map.cols = m.tokens.size();
  m.map.values.assign(m.map.rows * m.map.cols, kNaN);
  m.map.col_labels = m.tokens;
  m.map.colour_label = decisions ? "decision" : "gate";
  for (std::size_t r = 0; r < probe->layers.size(); ++r) {
    const auto& l = probe->layers[r];
    m.map.row_labels.push_back("L" + std::to_string(l.layer));
    // A layer with hard decisions only shows them on the gate map too.
    const auto& values = decisions || l.gate.empty() ? l.decision : l.gate;
    for (std::size_t c = 0; c < m.map.cols && c < values.size(); ++c) m.map.values[r * m.map.cols + c] = values[c];
  }
  return m;
}

}  // namespace

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

}  // namespace routelab::figure_detail
