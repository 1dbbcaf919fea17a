// Figures from the run store: a catalogue of named figures (generic comparison figures and the seeds' figures)
// built from stored runs into the renderer-neutral model of core/report/figure/figure.h (the files a figure bundle
// writes without a renderer are core/report/export/figure_files.h). The GUI's compare view and `routelab-cli figure`
// call the same builders, so both produce the same figure. Builders may load checkpoints and run models. No Qt.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/report/figure/curves.h"
#include "core/report/figure/figure.h"
#include "core/report/tables/table.h"
#include "core/util/thread_flag.h"

namespace routelab {

class RunStore;
class MetricSeriesCache;
struct MetricPoint;

/// What a figure is built from. Every builder reads only the fields it documents in its catalogue entry.
struct FigureRequest {
  std::string name;                        ///< catalogue name
  std::vector<std::int64_t> run_ids;       ///< the runs, in the order given (colours follow architectures)
  std::string metric = "val/loss";         ///< y of curve figures, quality of trade-off figures
  std::string x_axis = "step";             ///< "step", "tokens", "flops" (cumulative, measured) or "wall" (seconds)
  double smoothing = 0;                    ///< debiased EMA weight in [0, 0.999] for train series; 0 = raw only
  bool by_seed = true;                     ///< runs with the same config apart from `run` form one mean +- std group
  std::vector<double> budgets;             ///< x values of "loss at matched budgets" (same unit as x_axis)
  std::int64_t step = 0;                   ///< evaluation / probe step for routing figures; 0 = the last one
  std::vector<std::int64_t> lengths;       ///< sequence lengths of cost-versus-length figures; empty = default set
  std::vector<std::string> options;  ///< sweep-grid: its two options (rows, columns); empty = the two that explain most
  double width_cm = 8.5, height_cm = 6.0, font_pt = 8.0;  ///< physical size written into the figure
};

using FigureBuilder = std::function<Figure(const RunStore& store, const FigureRequest& request)>;

struct FigureInfo {
  std::string name;          ///< e.g. "curves", "dtrnet-fig5"
  std::string title;         ///< e.g. "Routed tokens per layer (DTRNet, Figure 5)"
  std::string description;   ///< what it shows and which request fields it reads
  std::size_t min_runs = 1;  ///< fewer runs is a ConfigError naming the figure
  FigureBuilder build;
  std::size_t max_runs = 0;  ///< more runs is a ConfigError naming the figure; 0 = any number
  /// The values `metric` takes for this figure where it names no metric key (routing-by-token's groupings), the
  /// first its default; empty: `metric` is a metric key (or the figure reads none).
  std::vector<std::string> metric_choices = {};
};

/// Every named figure (generic ones first, then the seeds' figures of core/report/builders/papers/paper_figures.h), by name.
const std::vector<FigureInfo>& figure_catalog();
/// Throws ConfigError("unknown figure 'x' (known: ...)").
const FigureInfo& figure_info(const std::string& name);

/// How every catalogue figure shows a run drawn alone: its label and palette colour (the dashboard's panels too).
struct RunStyle {
  std::string label;
  int color = 0;
};
RunStyle run_style(const RunStore& store, std::int64_t run_id);

/// While alive, the figures built on this thread (build_figure, training_flops_ratios) read each metric series
/// through `cache`, which reads only the rows stored since its last read of the series: what a reader that builds a
/// live run's figures again and again (the dashboard) does. The figures are those a direct read gives.
using CachedMetricReads = ScopedThreadObject<MetricSeriesCache>;
/// store.metric(run_id, key): through the cache of the CachedMetricReads alive on this thread, where there is one.
std::vector<MetricPoint> read_metric(const RunStore& store, std::int64_t run_id, const std::string& key);

/// Builds `request.name` from `store`: checks the run count, runs the builder, stamps the physical size and the
/// sidecar's meta (run ids, request fields, RouteLab version). An unknown run is a StoreError naming the store.
Figure build_figure(const RunStore& store, const FigureRequest& request);

/// A run's cumulative training FLOPs by step, the figures' and the dashboard's "flops" x axis: every step costs 3 x
/// (the FLOPs model's dense forward of the layers on train.batch_size x train.grad_accum x data.context tokens;
/// forward + backward)
/// x the `train/flops_ratio` logged at or before it (`val/flops_ratio` when the run logged no training ratio).
/// Embeddings and the LM head are left out, as in the trainer's ratio. A run with neither metric is a DataError.
CumulativeFlops training_flops_axis(const RunStore& store, std::int64_t run_id);
/// Its parts: the FLOPs of one dense training step (ConfigError naming the run when the config cannot be priced)...
double training_step_dense_flops(const RunStore& store, std::int64_t run_id);
/// ...and the finite ratios by step (train/flops_ratio, else val/flops_ratio; empty when neither is stored).
std::pair<std::vector<std::int64_t>, std::vector<double>> training_flops_ratios(const RunStore& store,
                                                                                 std::int64_t run_id);

/// The "matched" figure's numbers as a table: one row per group (runs differing only in seed when `by_seed`),
/// one column per budget of `request.budgets` on `request.x_axis` (the same default budgets as the figure when
/// empty), each cell the mean +- std over the group of the metric linearly interpolated at the budget (a run
/// that does not reach a budget leaves it out; a dash when none does).
ReportTable matched_budget_table(const RunStore& store, const FigureRequest& request);

/// A table of a figure's numbers, built from the same request (the CLI's `figure NAME --format-table`, the Compare
/// view's table layouts).
struct FigureTableInfo {
  std::string figure;       ///< the figure it tabulates, e.g. "matched"
  std::string title;        ///< e.g. "Metric at matched budgets"
  std::string description;  ///< its rows, columns and cells
  std::function<ReportTable(const RunStore& store, const FigureRequest& request)> build;
};
/// The figures that have a table, in catalogue order.
const std::vector<FigureTableInfo>& figure_tables();
/// The table of `figure`; ConfigError naming the figures that have one when it has none.
const FigureTableInfo& figure_table(const std::string& figure);

}  // namespace routelab
