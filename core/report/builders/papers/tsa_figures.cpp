// TSA's named figures: loss versus step and token-layer operations (Figure 2), the lambda and
// early-exit ablations (3; the early-exit sweep re-evaluates checkpoints) and the probe's active fractions (4).
#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "core/analysis/run_analysis.h"
#include "core/models/registry.h"
#include "core/report/builders/papers/paper_detail.h"
#include "core/util/errors.h"

namespace routelab::figure_detail {
namespace {

/// The value of metric `key` at `step` (0 = the last point); NaN when absent.
double metric_at(const RunStore& store, std::int64_t id, const std::string& key, std::int64_t step) {
  const auto points = store.metric(id, key);
  double value = kNaN;
  for (const auto& p : points)
    if (step == 0 || p.step == step) value = p.value;
  return value;
}

/// A series of (step, value) points; y NaN when the metric is absent.
FigureSeries metric_series(const RunStore& store, std::int64_t id, const std::string& key) {
  FigureSeries s;
  for (const auto& p : store.metric(id, key)) {
    s.x.push_back(static_cast<double>(p.step));
    s.y.push_back(p.value);
  }
  return s;
}

/// Token-layer operations of one training step of `tokens` tokens through `layers` blocks at active fraction
/// alpha (TSA Table 1: the stem always runs, the L-1 gated blocks count 1 - p on average).
double step_tlops(double tokens, double layers, double alpha) { return tokens * (1.0 + (layers - 1.0) * alpha); }

const char* kTsa2Title = "Validation loss versus step and versus cumulative token-layer operations (TSA, "
                         "Figures 2 and 5)";

Figure tsa_fig2(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kTsa2Title);
  FigurePanel by_step, by_tlops;
  by_step.title = "(a) convergence";
  by_step.x_label = "Step";
  by_step.y_label = "Validation loss (nats)";
  by_tlops.title = "(b) compute";
  by_tlops.x_label = "Cumulative TLOps (1e9)";
  by_tlops.y_label = "Validation loss (nats)";
  for (const auto id : request.run_ids) {
    const auto rec = run_record(store, id);
    const auto config = run_config(store, rec);
    auto val = metric_series(store, id, "val/loss");
    val.label = run_label(rec);
    val.color = arch_color(rec.arch);
    val.marked = true;
    const double tokens =
        static_cast<double>(sequences_per_step(store, rec, config) * data_shape_of(store, rec, config).context);
    const double layers = static_cast<double>(config.at("model").value("n_layer", std::int64_t{1}));
    // alpha is logged every log step (train/alpha); a step between two logs takes the last logged value, steps
    // before the first log the first one; a model without the statistic runs every block (alpha = 1).
    const auto alpha = store.metric(id, "train/alpha");
    auto tl = val;
    double cumulative = 0;
    std::int64_t done = 0;
    std::size_t a = 0;
    for (std::size_t i = 0; i < val.x.size(); ++i) {
      const auto target = static_cast<std::int64_t>(val.x[i]);
      for (; done < target; ++done) {
        const auto step = done + 1;
        while (a + 1 < alpha.size() && alpha[a + 1].step <= step) ++a;
        const double al = alpha.empty() ? 1.0 : alpha[a].value;
        cumulative += step_tlops(tokens, layers, al);
      }
      tl.x[i] = cumulative / 1e9;
    }
    f.meta["tokens_per_step"][std::to_string(id)] = tokens;
    by_step.series.push_back(std::move(val));
    by_tlops.series.push_back(std::move(tl));
  }
  f.panels = {by_step, by_tlops};
  return f;
}

/// The sweep a run belongs to (its "sweep:<name>" tag), or "".
std::string sweep_of(const RunRecord& rec) {
  std::stringstream tags(rec.tags);
  std::string tag;
  while (std::getline(tags, tag, ','))
    if (tag.rfind("sweep:", 0) == 0) return tag.substr(6);
  return "";
}

const char* kTsa3Title = "Ablations: TSA across the depth regulariser lambda, and TSA against the early-exit "
                         "threshold sweep at matched active fraction alpha (TSA, Figure 3)";

Figure tsa_fig3(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kTsa3Title);
  FigurePanel sweep, pareto;
  sweep.title = "(a) lambda sweep";
  sweep.x_label = "lambda (the architecture's regulariser option)";
  sweep.y_label = "Validation loss (nats)";
  pareto.title = "(b) TSA vs early exit";
  pareto.x_label = "Active fraction alpha";
  pareto.y_label = "Validation loss (nats)";
  // (architecture, sweep) -> (lambda, loss); architecture -> (alpha, loss) of runs that report their alpha
  std::map<std::pair<std::string, std::string>, std::vector<std::pair<double, double>>> by_sweep;
  std::map<std::string, FigureSeries> alpha_points;
  for (const auto id : request.run_ids) {
    const auto rec = run_record(store, id);
    const auto& entry = architecture(rec.arch);
    const auto config = run_config(store, rec);
    const auto eval = val_eval(store, id, request.step);
    if (!eval) throw ConfigError(request.name + ": run " + std::to_string(id) + " has no validation evaluation");
    const double loss = eval->loss;
    if (!entry.regulariser_option.empty())
      by_sweep[{rec.arch, sweep_of(rec)}].push_back(
          {config.at("model").at(entry.regulariser_option).get<double>(), loss});
    const double alpha = metric_at(store, id, "val/alpha", eval->step);
    if (!entry.eval_sweep.option.empty()) {
      // An eval-only option: sweep it on the run's checkpoint, as the seed does for the early-exit threshold.
      FigureSeries s;
      s.label = entry.display_name + ": " + run_label(rec);
      s.color = arch_color(rec.arch);
      s.marked = true;
      std::vector<std::pair<double, double>> points;
      json values = json::array();
      for (const auto v : entry.eval_sweep.values) {
        std::ostringstream set;
        set << "model." << entry.eval_sweep.option << "=" << v;
        auto run = load_run(store.path(), id, {set.str()}, request.step);
        const auto report = evaluate_run(run);
        const auto it = report.stats.find("alpha");
        points.push_back({it == report.stats.end() ? 1.0 : it->second, report.loss});
        values.push_back({{entry.eval_sweep.option, v}, {"alpha", points.back().first}, {"loss", report.loss}});
      }
      std::sort(points.begin(), points.end());
      for (const auto& [x, y] : points) {
        s.x.push_back(x);
        s.y.push_back(y);
      }
      f.meta["eval_sweep"][std::to_string(id)] = values;
      pareto.series.push_back(std::move(s));
    } else if (!std::isnan(alpha)) {
      auto& s = alpha_points[rec.arch];
      s.label = entry.display_name;
      s.kind = SeriesKind::Points;
      s.marked = true;
      s.color = arch_color(rec.arch);
      s.x.push_back(alpha);
      s.y.push_back(loss);
    } else {
      FigureSeries s;
      s.label = run_label(rec);
      s.kind = SeriesKind::Points;
      s.color = arch_color(rec.arch);
      s.x = {1.0};  // every block runs every token
      s.y = {loss};
      pareto.series.push_back(std::move(s));
    }
  }
  int dash = 0;
  for (auto& [key, points] : by_sweep) {
    std::sort(points.begin(), points.end());
    const auto& [arch, name] = key;
    FigureSeries s;
    s.label = architecture(arch).display_name + (name.empty() ? "" : ", sweep " + name);
    s.color = arch_color(arch);
    s.dash = dash++ % 4;
    s.marked = true;
    for (const auto& [x, y] : points) {
      s.x.push_back(x);
      s.y.push_back(y);
    }
    sweep.series.push_back(std::move(s));
  }
  for (auto& [arch, s] : alpha_points) pareto.series.push_back(std::move(s));
  if (sweep.series.empty())
    throw ConfigError(request.name + ": needs at least one run of an architecture with a regulariser option (tsa: "
                      "depth_coeff)");
  f.panels = {sweep, pareto};
  return f;
}

const char* kTsa4Title = "Per-token active fraction (1 - p_l) across the routing decisions on the probe text "
                         "(TSA, Figure 4)";

Figure tsa_fig4(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kTsa4Title);
  for (const auto id : request.run_ids) {
    const auto rec = run_record(store, id);
    const auto probe = probe_at(store, id, request.step, request.name);
    FigurePanel p;
    p.title = run_label(rec) + " (step " + std::to_string(probe.step) + ")";
    p.x_label = "Token";
    p.y_label = "Routing decision";
    p.legend = false;
    auto& h = p.heatmap;
    for (const auto& l : probe.layers) {
      if (!l.routed || l.gate.empty()) continue;
      if (h.cols == 0) h.cols = l.gate.size();
      if (l.gate.size() != h.cols)
        throw StoreError(store.path() + ": run " + std::to_string(id) + ": probe rows differ");
      h.values.insert(h.values.end(), l.gate.begin(), l.gate.end());
      std::string label = "L";  // appended, not "L" + ...: GCC 12 warns falsely on that insert (-Wstringop-overflow)
      h.row_labels.push_back(label.append(std::to_string(l.layer)));
      ++h.rows;
    }
    if (h.rows == 0)
      throw ConfigError(request.name + ": run " + std::to_string(id) + "'s probe has no routed layer with gates");
    const auto tokens = token_labels(probe.tokens);
    if (tokens.size() == h.cols) h.col_labels = tokens;
    h.lo = 0;
    h.hi = 1;
    h.colour_label = architecture(rec.arch).gate_meaning;
    f.meta["probe_step"][std::to_string(id)] = probe.step;
    f.panels.push_back(std::move(p));
  }
  f.columns = 1;
  return f;
}

}  // namespace

std::vector<FigureInfo> tsa_figures() {
  return {
      {"tsa-fig2", kTsa2Title,
       "Validation loss (val/loss) versus step, and versus cumulative TLOps = sum over steps of batch x context x "
       "(1 + (L-1) alpha) with alpha from train/alpha (1 without it). Reads run_ids.",
       1, tsa_fig2},
      {"tsa-fig3", kTsa3Title,
       "(a) validation loss of tsa runs versus model.depth_coeff, one line per sweep (tag sweep:<name>); (b) loss "
       "versus alpha: tsa runs as points, each early-exit run's checkpoint evaluated at thresholds 0.3 .. 1 (a "
       "line), other runs at alpha 1. Reads run_ids, step.",
       1, tsa_fig3},
      {"tsa-fig4", kTsa4Title,
       "Per run a heat map routing decisions x probe tokens of the gate of every routed layer of the stored probe "
       "at `step` (TSA: 1 - p_l). Reads run_ids, step.",
       1, tsa_fig4},
  };
}

}  // namespace routelab::figure_detail
