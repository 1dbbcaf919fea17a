// Figures from the run store: a catalogue of named figures (generic comparison figures and the seeds' figures)
// built from stored runs into the renderer-neutral model of core/report/figure.h, plus the files of a figure
// bundle that need no renderer (tidy CSV data, a pgfplots snippet, the JSON sidecar). The GUI's compare view and
// `routelab-cli figure` call the same builders, so both produce the same figure. No Qt.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/report/curves.h"
#include "core/report/figure.h"
#include "core/report/table.h"

namespace routelab {

class RunStore;

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
  double width_cm = 8.5, height_cm = 6.0, font_pt = 8.0;  ///< physical size written into the figure
};

using FigureBuilder = std::function<Figure(const RunStore& store, const FigureRequest& request)>;

struct FigureInfo {
  std::string name;          ///< e.g. "curves", "dtrnet-fig5"
  std::string title;         ///< e.g. "Routed tokens per layer (seed 000, Figure 5)"
  std::string description;   ///< what it shows and which request fields it reads
  std::size_t min_runs = 1;  ///< fewer runs is a ConfigError naming the figure
  FigureBuilder build;
};

/// Every named figure (generic ones first, then the seeds' figures of core/report/paper_figures.h), by name.
const std::vector<FigureInfo>& figure_catalog();
/// Throws ConfigError("unknown figure 'x' (known: ...)").
const FigureInfo& figure_info(const std::string& name);

/// How every catalogue figure shows a run drawn alone: its label and palette colour (the dashboard's panels too).
struct RunStyle {
  std::string label;
  int color = 0;
};
RunStyle run_style(const RunStore& store, std::int64_t run_id);

/// Builds `request.name` from `store`: checks the run count, runs the builder, stamps the physical size and the
/// sidecar's meta (run ids, request fields, RouteLab version). An unknown run is a StoreError naming the store.
Figure build_figure(const RunStore& store, const FigureRequest& request);

/// A run's cumulative training FLOPs by step, the figures' and the dashboard's "flops" x axis: every step costs 3 x
/// (the FLOPs model's dense forward of the layers on train.batch_size x data.context tokens; forward + backward)
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

/// Tidy CSV of every plotted number, one row per point with one header for all kinds:
/// panel,x,y,y_lo,y_hi,value,kind,series,category (RFC 4180 quoting; NaN and not applicable written "nan";
/// the text columns come last so pgfplots, which knows no quoting, still reads the numbers of every row).
///  - "line"/"points"/"step": series = label, x and y, y_lo and y_hi the band (mean -+ std) when there is one;
///  - "bar": series = member, category = the category, x = its index, y = the value, y_lo/y_hi = y -+ error;
///  - "cell": series = row label, category = column label, x = column index, y = row index, value = the cell.
/// Rows come panel by panel: each panel's series, then its bar members, then its heat map cells.
std::string figure_to_csv(const Figure& figure);
/// A pgfplots `tikzpicture` (groupplots for several panels) that reads `csv_file` (the CSV above; each line, band
/// and bar plot takes its rows by index; heat maps carry their cells inline, since a matrix plot cannot read a
/// slice of a file) with the figure's width, height and font size. The file compiles alone with pdflatex
/// (it opens its own article document when read before any \documentclass) and can be \input into a paper that
/// loads pgfplots with \usepgfplotslibrary{groupplots,fillbetween} and \usetikzlibrary{patterns}.
/// The picture writes every label itself (LaTeX-escaped; characters beyond ASCII shown as '?', the tokenizers'
/// line-break and tab marks as \n and \t); a label with a line break in the CSV would split its row for pgfplots.
std::string figure_to_pgfplots(const Figure& figure, const std::string& csv_file);

/// Writes `<stem>.csv`, `<stem>.tex` (pgfplots) and `<stem>.json` (sidecar) next to each other; returns the paths
/// written. Errors name the file.
std::vector<std::string> write_figure_data_files(const Figure& figure, const std::string& stem);

}  // namespace routelab
