// The metric figures: "metrics" (a run's other metrics as small multiples, the dashboard's Metrics tab) and
// "expert-loads" (per layer, each expert's load at an evaluation), both from core/report/figure/metric_panels.h.
#include <algorithm>

#include "core/models/registry.h"
#include "core/report/builders/builder_detail.h"
#include "core/report/figure/metric_panels.h"
#include "core/util/errors.h"

namespace routelab::figure_detail {
namespace {

/// The run's task from its architecture; an id this build does not know counts as a language model.
Task run_task(const RunRecord& run) {
  try {
    return architecture(run.arch).task;
  } catch (const std::exception&) {
    return Task::LanguageModel;
  }
}

}  // namespace

Figure build_metrics(const RunStore& store, const FigureRequest& request) {
  const auto id = request.run_ids.front();
  const auto run = run_record(store, id);
  auto specs = metric_panel_specs(store.metric_keys(id), run_task(run));
  if (specs.empty())
    throw ConfigError("run " + std::to_string(id) + " has stored no metrics besides the loss");
  // The default metric (val/loss, never a panel) or "all": every panel; else the panel of one quantity or key.
  const std::string& wanted = request.metric;
  if (wanted != "val/loss" && wanted != "all") {
    const auto it = std::find_if(specs.begin(), specs.end(), [&](const MetricPanelSpec& s) {
      return s.id == wanted || std::find(s.keys.begin(), s.keys.end(), wanted) != s.keys.end();
    });
    if (it == specs.end()) {
      std::string known;
      for (const auto& s : specs) known += (known.empty() ? "" : ", ") + s.id;
      throw ConfigError("metric '" + wanted + "' has no panel for run " + std::to_string(id) + " (its panels: " +
                        known + ", or all)");
    }
    specs = {*it};
  }
  std::map<std::string, std::vector<MetricPoint>> series;
  for (const auto& spec : specs)
    for (const auto& key : spec.keys) series[key] = read_metric(store, id, key);
  Figure f;
  f.columns = specs.size() > 1 ? 3 : 1;
  f.meta["panel_ids"] = json::array();
  f.meta["panel_keys"] = json::array();  // per panel, the stored keys it draws
  for (const auto& spec : specs) {
    f.panels.push_back(metric_panel(spec, series));
    f.meta["panel_ids"].push_back(spec.id);
    f.meta["panel_keys"].push_back(spec.keys);
  }
  return f;
}

Figure build_expert_loads(const RunStore& store, const FigureRequest& request) {
  Figure f;
  f.columns = 1;
  for (const auto id : request.run_ids) {
    const auto run = run_record(store, id);
    const auto eval = val_eval(store, id, request.step);
    if (!eval)
      throw ConfigError("run " + std::to_string(id) + " has no validation evaluation" +
                        (request.step ? " at step " + std::to_string(request.step) : std::string()));
    const auto loads = expert_loads(*eval);
    if (loads.empty())
      throw ConfigError("run " + std::to_string(id) + " stores no per-layer expert loads (load/L<l>/E<i>: a run "
                        "of an architecture with experts)");
    // One run: a short title (the run is in the sidecar); several: each panel starts with its run.
    const std::string who = request.run_ids.size() > 1 ? run_label(run) + ": " : "";
    f.panels.push_back(expert_load_panel(loads, who + "per layer, step " + std::to_string(loads.step)));
  }
  return f;
}

}  // namespace routelab::figure_detail
