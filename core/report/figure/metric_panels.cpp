#include "core/report/figure/metric_panels.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <regex>
#include <utility>

namespace routelab {
namespace {

/// The quantity of a key ("train/epoch_accuracy" -> "accuracy") and the series' name in its panel.
std::pair<std::string, std::string> quantity_of(const std::string& key) {
  const auto slash = key.find('/');
  const std::string split = key.substr(0, slash), name = slash == std::string::npos ? key : key.substr(slash + 1);
  if (name == "epoch_accuracy") return {"accuracy", "train (epoch)"};
  if (name == "epoch_loss") return {"epoch_loss", "train (epoch)"};
  return {name, split};
}

std::string title_of(const std::string& id) {
  static const std::map<std::string, std::string> titles{
      {"accuracy", "accuracy"},
      {"macro_f1", "macro-F1"},
      {"lr", "learning rate"},
      {"grad_norm", "gradient norm (before clipping)"},
      {"tokens_per_s", "tokens/s"},
      {"aux_loss", "auxiliary loss"},
      {"entropy", "router entropy"},
      {"load_imbalance", "load imbalance"},
      {"load_imbalance_per_layer", "load imbalance per layer (mean)"},
      {"routing_change", "tokens whose top expert changed since the last evaluation"},
      {"routing_change_set", "tokens whose expert set changed since the last evaluation"},
      {"routed_fraction", "routed fraction"},
      {"flops_ratio", "FLOPs ratio"},
      {"ppl", "perplexity"},
      {"bpc", "bits per character"},
      {"epoch_loss", "epoch loss"},
  };
  const auto it = titles.find(id);
  return it == titles.end() ? id : it->second;
}

int rank_of(const std::string& id, Task task) {
  static const std::vector<std::string> lm{"lr",           "grad_norm",        "tokens_per_s",
                                           "aux_loss",     "entropy",          "load_imbalance",
                                           "load_imbalance_per_layer",         "routing_change",
                                           "routing_change_set", "routed_fraction", "flops_ratio",
                                           "ppl",          "bpc"};
  static const std::vector<std::string> classification{"accuracy", "macro_f1"};
  const auto index = [&](const std::vector<std::string>& list) {
    const auto it = std::find(list.begin(), list.end(), id);
    return it == list.end() ? -1 : static_cast<int>(it - list.begin());
  };
  if (const int i = index(classification); i >= 0) return task == Task::Classification ? i : 50 + i;
  if (const int i = index(lm); i >= 0) return 10 + i;
  return 100;
}

}  // namespace

bool is_metric_panel_key(const std::string& key) {
  if (key.rfind("train/", 0) != 0 && key.rfind("val/", 0) != 0) return false;
  if (key == "train/loss" || key == "val/loss" || key == "val/epoch") return false;
  static const std::regex per_layer("/L[0-9]+(/|$)");
  return key.find("/load/") == std::string::npos && key.find("/assign/") == std::string::npos &&
         !std::regex_search(key, per_layer);
}

std::vector<MetricPanelSpec> metric_panel_specs(const std::vector<std::string>& keys, Task task) {
  std::vector<MetricPanelSpec> panels;
  for (const auto& key : keys) {
    if (!is_metric_panel_key(key)) continue;
    const std::string id = quantity_of(key).first;
    auto it = std::find_if(panels.begin(), panels.end(), [&](const MetricPanelSpec& p) { return p.id == id; });
    if (it == panels.end()) it = panels.insert(panels.end(), MetricPanelSpec{id, title_of(id), {}});
    it->keys.push_back(key);
  }
  std::stable_sort(panels.begin(), panels.end(), [&](const MetricPanelSpec& a, const MetricPanelSpec& b) {
    const int ra = rank_of(a.id, task), rb = rank_of(b.id, task);
    return ra != rb ? ra < rb : a.id < b.id;
  });
  for (auto& p : panels) std::sort(p.keys.begin(), p.keys.end());  // "train/..." before "val/..."
  return panels;
}

FigurePanel metric_panel(const MetricPanelSpec& spec,
                         const std::map<std::string, std::vector<MetricPoint>>& series) {
  FigurePanel panel;
  panel.title = spec.title;
  panel.x_label = "step";  // the title names the quantity: no y label to repeat (and clip) it
  for (const auto& key : spec.keys) {
    const auto it = series.find(key);
    if (it == series.end() || it->second.empty()) continue;
    FigureSeries s;
    s.label = quantity_of(key).second;
    // Validation and per-epoch points are few (one per evaluation or epoch): marked; training steps a line.
    s.color = s.label == "train" ? 0 : s.label == "val" ? 1 : 2;
    s.marked = s.label != "train";
    for (const MetricPoint& p : it->second) {
      s.x.push_back(static_cast<double>(p.step));
      s.y.push_back(p.value);
    }
    panel.series.push_back(std::move(s));
  }
  return panel;
}

int ExpertLoads::experts() const {
  int n = 0;
  for (const auto& [layer, per] : share)
    if (!per.empty()) n = std::max(n, per.rbegin()->first + 1);
  return n;
}

ExpertLoads expert_loads(const EvaluationRecord& eval) {
  ExpertLoads loads;
  for (const auto& [key, value] : eval.stats) {
    int l = 0, e = 0;
    char tail = 0;
    if (std::sscanf(key.c_str(), "load/L%d/E%d%c", &l, &e, &tail) == 2) loads.share[l][e] = value;
  }
  if (!loads.empty()) loads.step = eval.step;
  return loads;
}

FigurePanel expert_load_panel(const ExpertLoads& loads, const std::string& title) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  FigurePanel panel;
  panel.title = title;
  panel.x_label = "Layer";
  panel.y_label = "Average expert load";
  const int experts = loads.experts();
  for (const auto& [l, per] : loads.share) panel.bars.categories.push_back(layer_label(l));
  for (int e = 0; e < experts; ++e) {
    FigureBars::Member m;
    m.label = "E";  // appended, not "E" + to_string: GCC 12 warns falsely on that (-Wstringop-overflow)
    m.label += std::to_string(e);
    m.color = e;
    for (const auto& [l, per] : loads.share) {
      const auto it = per.find(e);
      m.values.push_back(it == per.end() ? kNaN : it->second);
    }
    panel.bars.members.push_back(std::move(m));
  }
  if (experts > 0) {
    FigureSeries uniform;
    uniform.label = "uniform 1/" + std::to_string(experts);
    const double edge = static_cast<double>(panel.bars.categories.size()) - 0.5;
    uniform.x = {-0.5, edge};
    uniform.y = {1.0 / experts, 1.0 / experts};
    uniform.dash = 1;
    uniform.color = 7;
    panel.series.push_back(std::move(uniform));
  }
  return panel;
}

}  // namespace routelab
