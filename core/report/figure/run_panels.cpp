#include "core/report/figure/run_panels.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/report/tables/table.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();

/// Adds one heat map row: its label, its values over the map's columns, its colour range.
void add_row(FigureHeatmap& map, std::string label, const std::vector<double>& values, double lo, double hi) {
  map.row_labels.push_back(std::move(label));
  for (std::size_t c = 0; c < map.cols; ++c) map.values.push_back(c < values.size() ? values[c] : kNoValue);
  map.row_lo.push_back(lo);
  map.row_hi.push_back(hi);
  ++map.rows;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// routed layers

FigurePanel routed_layers_panel(const std::vector<RoutedLayersGroup>& groups) {
  FigurePanel panel;
  panel.x_label = "layer";
  panel.y_label = "routed tokens (%)";
  std::size_t n_layers = 0;
  for (const auto& g : groups) {
    n_layers = std::max({n_layers, g.routed.size(), g.training.size()});
    for (const auto& run : g.inference) n_layers = std::max(n_layers, run.size());
  }
  for (std::size_t l = 0; l < n_layers; ++l) panel.bars.categories.push_back(layer_label(static_cast<std::int64_t>(l)));
  for (const auto& g : groups) {
    FigureBars::Member inference, training, dense;
    inference.label = g.label;
    training.label = g.label + " (training)";
    dense.label = g.label + " (dense layers)";
    inference.color = training.color = dense.color = g.color;
    training.faint = true;
    dense.hatched = true;
    const bool spread = g.inference.size() > 1;
    bool any_dense = false, any_routed = false;
    for (std::size_t l = 0; l < n_layers; ++l) {
      std::vector<double> at;
      for (const auto& run : g.inference) at.push_back(l < run.size() ? 100.0 * run[l] : kNoValue);
      const auto cell = summarize(at);
      const bool exists = l < g.routed.size();
      const bool routed = exists && g.routed[l];
      inference.values.push_back(routed && cell ? cell->mean : kNoValue);
      if (spread) inference.errors.push_back(routed && cell ? cell->std : kNoValue);
      training.values.push_back(routed && l < g.training.size() ? 100.0 * g.training[l] : kNoValue);
      // A layer that does not route runs every token: a hatched full bar.
      dense.values.push_back(exists && !routed ? (cell ? cell->mean : 100.0) : kNoValue);
      any_dense = any_dense || (exists && !routed);
      any_routed = any_routed || routed;
    }
    if (any_routed && !g.inference.empty()) panel.bars.members.push_back(std::move(inference));
    if (any_routed && !g.training.empty()) panel.bars.members.push_back(std::move(training));
    if (any_dense) panel.bars.members.push_back(std::move(dense));
  }
  return panel;
}

// ---------------------------------------------------------------------------------------------------------------
// routing history

FigurePanel routing_history_panel(const std::string& title, const RoutingHistory& history,
                                  const std::vector<bool>& routed, std::size_t max_columns) {
  FigurePanel panel;
  panel.title = title;
  const std::size_t steps = history.steps.size();
  const std::size_t per_column = std::max<std::size_t>(1, (steps + std::max<std::size_t>(1, max_columns) - 1) /
                                                              std::max<std::size_t>(1, max_columns));
  panel.x_label = per_column == 1 ? "logged step"
                                  : "logged step (each column the mean of " + std::to_string(per_column) + ")";
  panel.y_label = "layer";
  panel.legend = false;
  FigureHeatmap& map = panel.heatmap;
  map.rows = history.layers();
  map.cols = (steps + per_column - 1) / per_column;
  map.values.assign(map.rows * map.cols, kNoValue);
  map.lo = 0;
  map.hi = 100;
  map.colour_label = "routed tokens (%)";
  for (std::size_t l = 0; l < map.rows; ++l) map.row_labels.push_back(layer_label(static_cast<std::int64_t>(l)));
  std::vector<double> sum(map.rows);
  std::vector<std::size_t> count(map.rows);
  for (std::size_t c = 0; c < map.cols; ++c) {
    const std::size_t first = c * per_column, last = std::min(steps, first + per_column);
    map.col_labels.push_back(std::to_string(history.steps[last - 1]));
    std::fill(sum.begin(), sum.end(), 0.0);
    std::fill(count.begin(), count.end(), std::size_t{0});
    for (std::size_t s = first; s < last; ++s) {
      const auto& column = history.fractions[s];
      for (std::size_t l = 0; l < map.rows && l < column.size(); ++l)
        if (!std::isnan(column[l])) {
          sum[l] += column[l];
          ++count[l];
        }
    }
    for (std::size_t l = 0; l < map.rows; ++l) {
      const bool dense = l < routed.size() && !routed[l];  // no flags yet (no evaluation): every layer shown
      if (!dense && count[l] > 0) map.values[l * map.cols + c] = 100.0 * sum[l] / static_cast<double>(count[l]);
    }
  }
  return panel;
}

// ---------------------------------------------------------------------------------------------------------------
// token map

std::string to_string(TokenMapColour colour) {
  switch (colour) {
    case TokenMapColour::Gate: return "gate";
    case TokenMapColour::Decision: return "decision";
    case TokenMapColour::Expert: return "expert";
  }
  return "gate";
}

TokenMapColour parse_token_map_colour(const std::string& text, const std::string& key) {
  for (auto c : {TokenMapColour::Gate, TokenMapColour::Decision, TokenMapColour::Expert})
    if (text == to_string(c)) return c;
  throw ConfigError(key + ": '" + text + "' is not a token-map colouring (gate, decision or expert)");
}

namespace {

const TokenSeries* expert_ids(const ProbeRecord& probe) {
  const TokenSeries* s = probe.series("expert");
  return s && s->shape.size() == 2 && s->integral ? s : nullptr;
}

}  // namespace

bool has_expert_ids(const ProbeRecord& probe) { return expert_ids(probe) != nullptr; }

FigurePanel token_map_panel(const std::string& title, const ProbeRecord& probe, TokenMapColour colour) {
  FigurePanel panel;
  panel.title = title;
  panel.x_label = "probe token";
  panel.legend = false;
  FigureHeatmap& map = panel.heatmap;
  map.cols = probe.tokens.size();
  map.col_labels = probe.tokens;
  map.lo = 0;
  map.hi = 1;
  map.colour_label = "each row over its range";
  const TokenSeries* experts = expert_ids(probe);
  if (colour == TokenMapColour::Expert && !experts) colour = TokenMapColour::Gate;

  for (const ProbeLayer& layer : probe.layers) {
    const bool have_gate = !layer.gate.empty(), have_decision = !layer.decision.empty();
    if (!have_gate && !have_decision) continue;  // a dense layer: nothing to colour
    const bool gate = (colour != TokenMapColour::Decision && have_gate) || !have_decision;
    add_row(map, layer_label(layer.layer) + " " + layer.kind + (gate ? " gate" : " decision"),
            gate ? layer.gate : layer.decision, 0, 1);
  }

  // TAGAT: the gate (T, L, N) and the chosen experts (T, L, k) as one row per layer and expert (gate colouring)
  // or per layer and rank (expert colouring), expert ids coloured over 0 .. N-1.
  int num_experts = 0;
  if (const TokenSeries* g = probe.series("gate"); g && g->shape.size() == 2) num_experts = g->shape[1];
  for (const TokenSeries& series : probe.token_data) {
    const bool per_layer = experts && series.shape.size() == 2;
    if (per_layer && &series == experts && colour != TokenMapColour::Expert) continue;
    if (per_layer && series.name == "gate" && colour == TokenMapColour::Expert) continue;
    std::size_t components = 0;
    for (const auto& v : series.values) components = std::max(components, v.size());
    for (std::size_t c = 0; c < components; ++c) {
      std::vector<double> values;
      for (std::size_t t = 0; t < series.tokens(); ++t) values.push_back(series.at(t, c));
      std::string label;
      if (per_layer) {
        const auto width = static_cast<std::size_t>(series.shape[1]);
        label = &series == experts
                    ? layer_label(static_cast<std::int64_t>(c / width)) + " expert #" + std::to_string(c % width + 1)
                    : layer_label(static_cast<std::int64_t>(c / width)) + " E" + std::to_string(c % width) + " " +
                          series.name;
      } else {
        label = components == 1 ? series.name : series.name + "[" + std::to_string(c) + "]";
      }
      double lo = std::numeric_limits<double>::infinity(), hi = -lo;
      for (double v : values)
        if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
      if (!series.integral && lo >= 0 && hi <= 1) {
        add_row(map, label, values, 0, 1);
      } else {
        // Integral data: negative values mean "none" (e.g. -1 after an exit); the range starts at 0.
        double row_lo = series.integral ? 0 : (std::isfinite(lo) ? lo : 0);
        double row_hi = std::isfinite(hi) ? hi : 1;
        if (per_layer && &series == experts && num_experts > 1) row_hi = num_experts - 1;  // one colour per id
        add_row(map, label, values, row_lo, std::max(row_hi, row_lo));
      }
    }
  }
  if (!probe.next_logprob.empty()) {
    std::vector<double> p;
    for (double lp : probe.next_logprob) p.push_back(std::exp(lp));
    add_row(map, "p(next token)", p, 0, 1);
  }
  return panel;
}

}  // namespace routelab
