// Internal to core/report, not part of the figure API: the helpers the generic figure builders share (reading a
// run's record, config and evaluations; one colour per architecture) and the builders figure_catalog() lists.
#pragma once
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/report/builders/catalog.h"
#include "core/report/tables/run_tables.h"
#include "core/run/evaluation_record.h"
#include "core/run/probe_record.h"
#include "core/store/run_store.h"
#include "core/util/json_fields.h"

namespace routelab::figure_detail {

using nlohmann::json;
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// `v` with `precision` significant digits ("%.*g").
std::string number_text(double v, int precision = 4);
/// Accuracy, F1, throughput and "saved" metrics; every other metric is better lower.
bool higher_is_better(const std::string& metric);

/// The run's record, or a StoreError naming the store.
RunRecord run_record(const RunStore& store, std::int64_t id);
/// The run's name, or "run <id>" when it has none.
std::string run_label(const RunRecord& run);
/// The run's stored config, or a ConfigError naming the run when it is not a JSON object.
json run_config(const RunStore& store, const RunRecord& run);
/// `config.section.key` as an integer, or a ConfigError naming the run and the key.
std::int64_t config_int(const RunStore& store, const RunRecord& run, const json& config, const char* section,
                        const char* key);
/// Sequences one optimizer step trained on: train.batch_size x train.grad_accum (1 where a run stored before
/// accumulation existed has no such key), or a ConfigError naming the run and the key.
std::int64_t sequences_per_step(const RunStore& store, const RunRecord& run, const json& config);
/// The model section with the architecture's defaults filled in (stored configs are resolved; this keeps partial
/// ones usable).
json full_model(const RunStore& store, const RunRecord& run, const json& config);

/// The palette index the architecture's registry entry gives it (ArchitectureEntry::color), the same in every
/// figure; `unknown` for an id the registry does not know (a run stored by another build).
int arch_color(const std::string& arch, int unknown = 0);

/// The last finite value of the run's `metric` at or before `step` (0: the last one); NaN where there is none.
double last_finite(const RunStore& store, std::int64_t run_id, const std::string& metric, std::int64_t step = 0);

/// One colour per architecture (its registry colour; unknown ids take the palette in order of appearance), one
/// dash per variant within an architecture.
struct Styler {
  std::map<std::string, int> colour_of;
  std::map<std::string, int> variants;
  std::pair<int, int> next(const std::string& arch) {
    const int known = arch_color(arch, -1);
    const auto [it, inserted] = colour_of.try_emplace(arch, known >= 0 ? known : static_cast<int>(colour_of.size()));
    const int dash = variants[arch]++ % 4;
    return {it->second % static_cast<int>(figure_palette().size()), dash};
  }
};

struct StyledGroup {
  RunGroup group;
  std::string arch;
  int color = 0, dash = 0;
};

/// The request's runs grouped (by seed when `request.by_seed`), each group styled after its first run's architecture.
std::vector<StyledGroup> styled_groups(const RunStore& store, const FigureRequest& request);
/// A ConfigError naming `figure` and the first run's metric keys unless some run stores `request.metric`.
void require_metric_somewhere(const RunStore& store, const FigureRequest& request, const std::string& figure);

/// The run's probe at `step` (0 = the last one); a run without one (or none at `step`: the steps it probed are
/// listed) is a ConfigError naming the figure, an unreadable one a DataError naming the figure, store, run and key.
ProbeRecord probe_at(const RunStore& store, std::int64_t id, std::int64_t step, const std::string& figure);

/// The title of a run's token map at a probe step: "name (step N)".
std::string token_map_title(const RunRecord& run, std::int64_t step);

/// The run's evaluation at `step` (0 = the last one), or a DataError naming `figure` and the steps evaluated.
EvaluationRecord eval_at(const RunStore& store, std::int64_t run_id, std::int64_t step, const std::string& figure);
/// The evaluation's per-layer routing, or a DataError naming `figure` when it stores none.
std::vector<LayerRouting> eval_layers(const RunStore& store, std::int64_t run_id, const EvaluationRecord& eval,
                                      const std::string& figure);
/// The run's "val" evaluation at `step` (0 = the last one); none when it has none there.
std::optional<EvaluationRecord> val_eval(const RunStore& store, std::int64_t id, std::int64_t step);
/// The run's evaluations, read once (core/run/evaluation_record.h); an unreadable one is a DataError naming `figure`.
std::vector<EvaluationRecord> evaluations(const RunStore& store, std::int64_t run_id, const std::string& figure);

// The builders, by family: curve_figures.cpp, cost_figures.cpp, sweep_figure.cpp, routing_figures.cpp,
// metric_figures.cpp.
Figure build_curves(const RunStore& store, const FigureRequest& request);
Figure build_matched(const RunStore& store, const FigureRequest& request);
Figure build_pareto(const RunStore& store, const FigureRequest& request);
Figure build_sweep(const RunStore& store, const FigureRequest& request);
Figure build_sweep_grid(const RunStore& store, const FigureRequest& request);
/// The sweep-grid figure's cells as a table: a row per architecture and row value, a column per column value.
ReportTable sweep_grid_table(const RunStore& store, const FigureRequest& request);
Figure build_cost_length(const RunStore& store, const FigureRequest& request);
Figure build_routed_layers(const RunStore& store, const FigureRequest& request);
Figure build_token_maps(const RunStore& store, const FigureRequest& request);
Figure build_token_map(const RunStore& store, const FigureRequest& request);
Figure build_routing_history(const RunStore& store, const FigureRequest& request);
Figure build_metrics(const RunStore& store, const FigureRequest& request);
Figure build_expert_loads(const RunStore& store, const FigureRequest& request);
Figure build_routing_by_token(const RunStore& store, const FigureRequest& request);
Figure build_routing_by_token_history(const RunStore& store, const FigureRequest& request);
Figure build_routing_by_token_history_layers(const RunStore& store, const FigureRequest& request);
Figure build_routing_stability(const RunStore& store, const FigureRequest& request);

}  // namespace routelab::figure_detail
