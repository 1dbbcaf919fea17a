// A run's other metrics as figures: the small multiples of the dashboard's Metrics tab (one panel per quantity,
// e.g. learning rate, gradient norm, tokens/s, router entropy, accuracy; each with its train and val series) and
// the expert loads of an evaluation (per layer, one bar per expert, against the uniform share). Pure functions of
// stored series and evaluation stats: the catalogue figures "metrics" and "expert-loads" call them on the store and
// the dashboard shows those figures, so the tab and the export are the same numbers. No Torch, no Qt.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/report/figure/figure.h"
#include "core/run/evaluation_record.h"
#include "core/store/run_store.h"

namespace routelab {

/// Whether a stored key gets a metrics panel: train/* and val/* series but the losses (the loss plot has them),
/// val/epoch, and the per-layer and per-expert series (".../L<l>", load/, assign/: the expert loads show those).
bool is_metric_panel_key(const std::string& key);

/// One panel: a quantity and the keys it draws.
struct MetricPanelSpec {
  std::string id;                 ///< the quantity: the key after "train/" or "val/", e.g. "lr", "accuracy"
  std::string title;              ///< e.g. "learning rate"
  std::vector<std::string> keys;  ///< train before val
};

/// Groups the panel keys among `keys` by quantity ("train/epoch_accuracy" joins "accuracy"), in a fixed order of
/// importance: accuracy and macro-F1 first for classifiers, then learning rate, gradient norm, tokens/s, auxiliary
/// loss, router entropy, load imbalance, routing change, routed fraction, FLOPs ratio, perplexity, bits per
/// character; the rest by name.
std::vector<MetricPanelSpec> metric_panel_specs(const std::vector<std::string>& keys, Task task);

/// The spec's series against step: "train" a line, "val" (one point per evaluation) a marked line, "train (epoch)"
/// a marked line; a key missing from `series` is left out.
FigurePanel metric_panel(const MetricPanelSpec& spec,
                         const std::map<std::string, std::vector<MetricPoint>>& series);

/// The expert loads of one evaluation: per layer, each expert's share of the layer's token-expert assignments.
struct ExpertLoads {
  std::int64_t step = -1;
  std::map<int, std::map<int, double>> share;  ///< layer -> expert -> share
  int experts() const;                         ///< the largest expert id + 1
  bool empty() const { return share.empty(); }
};

/// Reads an evaluation's "load/L<l>/E<i>" stats (TAGAT's per-layer loads); empty when it has none.
ExpertLoads expert_loads(const EvaluationRecord& eval);

/// Grouped bars: one group per layer ("L0", ...), one bar per expert ("E0", ...), and a dashed line at the uniform
/// share 1/N across the groups.
FigurePanel expert_load_panel(const ExpertLoads& loads, const std::string& title);

}  // namespace routelab
