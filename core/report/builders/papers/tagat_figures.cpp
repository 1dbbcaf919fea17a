// TAGAT's named figures: expert load per layer and per epoch (Figures 3 and 6) and the token gates of
// the probe example (Figures 4 and 7).
#include <algorithm>
#include <cstdio>
#include <map>

#include "core/report/builders/papers/paper_detail.h"
#include "core/report/figure/metric_panels.h"
#include "core/util/errors.h"

namespace routelab::figure_detail {
namespace {

const char* kTagat3Title = "Average expert balance per layer and per epoch (TAGAT, Figures 3 and 6)";

Figure tagat_fig3(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kTagat3Title);
  f.columns = 2;
  for (const auto id : request.run_ids) {
    const auto rec = run_record(store, id);
    const auto eval = val_eval(store, id, request.step);
    if (!eval) throw ConfigError(request.name + ": run " + std::to_string(id) + " has no validation evaluation");
    // load/L<l>/E<i>: the mean gate mass of expert i in layer l over the real tokens.
    const auto loads = expert_loads(*eval);
    if (loads.empty())
      throw ConfigError(request.name + ": run " + std::to_string(id) + " stores no per-layer expert loads "
                        "(load/L<l>/E<i>: a tagat run)");
    const int experts = loads.experts();
    // One run: short titles (the run is in the sidecar); several: each row starts with its run.
    const std::string who = request.run_ids.size() > 1 ? run_label(rec) + ": " : "";
    FigurePanel bars = expert_load_panel(loads, who + "per layer, step " + std::to_string(eval->step));
    // Per epoch: the model-wide mean load of each expert (the paper's "Val Avg Expert Balance" column).
    FigurePanel epochs;
    epochs.title = who + "per epoch";
    epochs.y_label = "Average expert load";
    std::map<std::int64_t, double> epoch_of;
    for (const auto& p : store.metric(id, "val/epoch")) epoch_of[p.step] = p.value;
    epochs.x_label = epoch_of.empty() ? "Step" : "Epoch";
    for (int e = 0; e < experts; ++e) {
      FigureSeries s;
      s.label = "E";  // appended, not "E" + to_string: GCC 12 warns falsely on that (-Wstringop-overflow)
      s.label += std::to_string(e);
      s.color = e;
      s.marked = true;
      for (const auto& p : store.metric(id, "val/load/E" + std::to_string(e))) {
        s.x.push_back(epoch_of.count(p.step) ? epoch_of[p.step] : static_cast<double>(p.step));
        s.y.push_back(p.value);
      }
      if (!s.x.empty()) epochs.series.push_back(std::move(s));
    }
    if (!epochs.series.empty()) {
      FigureSeries uniform;
      uniform.label = "uniform 1/N";
      uniform.x = {epochs.series.front().x.front(), epochs.series.front().x.back()};
      uniform.y = {1.0 / experts, 1.0 / experts};
      uniform.dash = 1;
      uniform.color = 7;
      epochs.series.push_back(std::move(uniform));
    }
    f.meta["experts"] = experts;
    f.panels.push_back(std::move(bars));
    if (!epochs.series.empty()) f.panels.push_back(std::move(epochs));
  }
  return f;
}

const char* kTagat4Title = "Token gating probabilities of the probe example per layer (TAGAT, Figures 4 and 7)";

Figure tagat_fig4(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kTagat4Title);
  for (const auto id : request.run_ids) {
    const auto rec = run_record(store, id);
    const auto probe = probe_at(store, id, request.step, request.name);
    const auto* gate = probe.series("gate");  // (T, L, N)
    if (!gate || gate->shape.size() != 2)
      throw ConfigError(request.name + ": run " + std::to_string(id) + "'s probe has no token gates (a tagat run)");
    const auto T = gate->tokens();
    const auto L = static_cast<std::size_t>(gate->shape[0]);
    const auto N = static_cast<std::size_t>(gate->shape[1]);
    const auto tokens = token_labels(probe.tokens);
    for (std::size_t l = 0; l < L; ++l) {
      FigurePanel p;
      p.title = run_label(rec) + ", layer " + std::to_string(l);
      p.x_label = "Token";
      p.y_label = "Expert";
      p.legend = false;
      auto& h = p.heatmap;
      h.rows = N;
      h.cols = T;
      for (std::size_t e = 0; e < N; ++e)
        for (std::size_t t = 0; t < T; ++t) h.values.push_back(gate->at(t, l * N + e));
      for (std::size_t e = 0; e < N; ++e) h.row_labels.push_back(prefixed("E", static_cast<std::int64_t>(e)));
      if (tokens.size() == T) h.col_labels = tokens;
      h.lo = 0;
      h.hi = 1;
      h.colour_label = "gate probability";
      f.panels.push_back(std::move(p));
    }
    f.columns = static_cast<int>(L);
    f.meta["probe_step"][std::to_string(id)] = probe.step;
    if (!probe.label_name.empty()) f.meta["probe_label"][std::to_string(id)] = probe.label_name;
  }
  return f;
}

}  // namespace

std::vector<FigureInfo> tagat_figures() {
  return {
      {"tagat-fig3", kTagat3Title,
       "Per run: bars of each expert's average load per layer (load/L<l>/E<i> of the validation evaluation at "
       "`step`) and the model-wide load of each expert per epoch (val/load/E<i>). Reads run_ids, step.",
       1, tagat_fig3},
      {"tagat-fig4", kTagat4Title,
       "Per run and layer a heat map experts x tokens of the gate probabilities of the stored probe example at "
       "`step` (0 = last). Reads run_ids, step.",
       1, tagat_fig4},
  };
}

}  // namespace routelab::figure_detail
