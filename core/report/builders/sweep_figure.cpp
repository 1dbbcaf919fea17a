// The "sweep" figure: a metric of each run against every option its config sets apart from the other runs' (a
// learning-rate grid, MoD's capacities, DTRNet's routing), one panel per option: numbers on an x axis with each run a
// point and each architecture's mean per value a line (std over its runs there a band), other values as grouped bars
// of the mean per value and architecture. Each panel pools the runs over the other options' values (a marginal
// view, as a parameter scatter): the points show the spread that pooling leaves, and the title the share of the
// variance within architectures the option's values explain (partial eta squared). The run section (seed, name, device,
// threads) and the architecture are not options of the sweep: seeds are the repeats each mean is taken over, the
// architecture the colour. The "sweep-grid" figure reads two options together: per architecture a heat map of their
// values' grid, each cell the mean over its runs written inside, and the share of the variance their interaction
// explains (what the marginal panels cannot show: a best learning rate that moves with the capacity).
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "core/models/registry.h"
#include "core/report/builders/builder_detail.h"
#include "core/report/tables/config_diff.h"
#include "core/report/tables/table.h"
#include "core/util/errors.h"

namespace routelab::figure_detail {
namespace {

/// A run of the sweep: its metric at the request's step and its flattened config.
struct SweepRun {
  std::int64_t id = 0;
  std::string arch;
  double value = kNaN;
  std::map<std::string, json> options;  ///< dotted key -> leaf value
};

/// Whether a dotted key is an option of the sweep: not the run section (seeds are repeats, not settings) and not the
/// architecture (the colour).
bool swept_key(const std::string& key) { return key.rfind("run.", 0) != 0 && key != "model.arch"; }

std::string arch_label(const std::string& arch) {
  try {
    return architecture(arch).display_name;
  } catch (const ConfigError&) {
    return arch;  // a run stored by a build with other architectures
  }
}

/// The options whose values differ between the runs that set them (at least two values), in key order.
std::vector<std::string> swept_options(const std::vector<SweepRun>& runs) {
  std::map<std::string, std::set<std::string>> values;
  for (const auto& run : runs)
    for (const auto& [key, value] : run.options)
      if (swept_key(key)) values[key].insert(value.dump());
  std::vector<std::string> keys;
  for (const auto& [key, seen] : values)
    if (seen.size() > 1) keys.push_back(key);
  return keys;
}

/// The runs that set `key` (and have a value of the metric): by architecture, in the order the architectures first
/// appear, then by the option's value as `read` gives it (a number, a text).
template <typename Value, typename Read>
std::pair<std::vector<std::string>, std::map<std::string, std::map<Value, std::vector<double>>>> by_architecture(
    const std::string& key, const std::vector<SweepRun>& runs, Read read) {
  std::pair<std::vector<std::string>, std::map<std::string, std::map<Value, std::vector<double>>>> out;
  auto& [order, groups] = out;
  for (const auto& run : runs) {
    const auto it = run.options.find(key);
    if (it == run.options.end() || !std::isfinite(run.value)) continue;
    if (!groups.count(run.arch)) order.push_back(run.arch);
    groups[run.arch][read(it->second)].push_back(run.value);
  }
  return out;
}

/// An option's panel, titled by its key, the metric up.
FigurePanel option_panel(const std::string& key, const std::string& metric) {
  FigurePanel panel;
  panel.title = key;
  panel.x_label = key;
  panel.y_label = metric;
  return panel;
}

/// The panel of a numeric option: every run a point, each architecture's mean per value a line with a std band.
FigurePanel number_panel(const std::string& key, const std::vector<SweepRun>& runs, Styler& styler,
                         const std::string& metric) {
  auto panel = option_panel(key, metric);
  const auto [order, by_arch] = by_architecture<double>(key, runs, [](const json& v) { return v.get<double>(); });
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& [arch, values] : by_arch)
    lo = std::min(lo, values.begin()->first), hi = std::max(hi, values.rbegin()->first);
  panel.log_x = lo > 0 && hi / lo >= 10;  // a decade or more: a learning-rate grid
  for (const auto& arch : order) {
    FigureSeries points, means;
    points.kind = SeriesKind::Points;
    points.color = means.color = styler.next(arch).first;
    means.label = arch_label(arch);
    bool band = false;
    for (const auto& [x, values] : by_arch.at(arch)) {
      for (const double v : values) points.x.push_back(x), points.y.push_back(v);
      const auto s = *summarize(values);
      means.x.push_back(x);
      means.y.push_back(s.mean);
      means.y_lo.push_back(s.mean - s.std);
      means.y_hi.push_back(s.mean + s.std);
      band = band || s.n > 1;
    }
    if (!band) means.y_lo.clear(), means.y_hi.clear();
    panel.series.push_back(std::move(means));
    panel.series.push_back(std::move(points));
  }
  return panel;
}

/// The panel of any other option: a group of bars per value, a bar per architecture (its mean, std as error).
FigurePanel choice_panel(const std::string& key, const std::vector<SweepRun>& runs, Styler& styler,
                         const std::string& metric) {
  auto panel = option_panel(key, metric);
  const auto [order, by_arch] = by_architecture<std::string>(key, runs, config_value_text);
  std::set<std::string> categories;
  for (const auto& [arch, values] : by_arch)
    for (const auto& [category, unused] : values) categories.insert(category);
  panel.bars.categories.assign(categories.begin(), categories.end());
  for (const auto& arch : order) {
    FigureBars::Member member;
    member.label = arch_label(arch);
    member.color = styler.next(arch).first;
    for (const auto& category : panel.bars.categories) {
      const auto it = by_arch.at(arch).find(category);
      const auto s = it == by_arch.at(arch).end() ? std::nullopt : summarize(it->second);
      member.values.push_back(s ? s->mean : kNaN);
      member.errors.push_back(s ? s->std : 0.0);
    }
    panel.bars.members.push_back(std::move(member));
  }
  return panel;
}

/// The share of the metric's variance within architectures that the option's values explain (partial eta squared,
/// the architecture held out): over the runs of the architectures that set it to more than one value, the squares of
/// each (architecture, value) group's mean from its architecture's mean, weighted by the group's runs, over the
/// squares of each run from its architecture's mean. NaN where those runs do not vary.
double explained_share(const std::string& key, const std::vector<SweepRun>& runs) {
  const auto [order, by_arch] = by_architecture<std::string>(key, runs, [](const json& v) { return v.dump(); });
  double between = 0, total = 0;
  for (const auto& [arch, groups] : by_arch) {
    if (groups.size() < 2) continue;  // the option does not vary here: nothing of this variance is its
    double sum = 0, n = 0;
    for (const auto& [value, ys] : groups)
      for (const double y : ys) sum += y, n += 1;
    const double mean = sum / n;
    for (const auto& [value, ys] : groups) {
      double group = 0;
      for (const double y : ys) group += y, total += (y - mean) * (y - mean);
      group /= static_cast<double>(ys.size());
      between += static_cast<double>(ys.size()) * (group - mean) * (group - mean);
    }
  }
  return total > 0 ? between / total : kNaN;
}

/// The request's runs: each one's metric at the request's step and its flattened config.
std::vector<SweepRun> read_sweep_runs(const RunStore& store, const FigureRequest& request, const std::string& figure) {
  require_metric_somewhere(store, request, figure);
  std::vector<SweepRun> runs;
  for (const auto id : request.run_ids) {
    const auto record = run_record(store, id);
    SweepRun run{id, record.arch, last_finite(store, id, request.metric, request.step), {}};
    for (auto& [key, value] : flatten_config(run_config(store, record), "run " + std::to_string(id) + "'s config"))
      run.options.emplace(key, std::move(value));
    runs.push_back(std::move(run));
  }
  return runs;
}

/// swept_options(runs), at least `least` of them, else a ConfigError naming the figure.
std::vector<std::string> require_swept(const std::vector<SweepRun>& runs, std::size_t least, const std::string& figure,
                                       const std::string& metric) {
  auto keys = swept_options(runs);
  if (keys.empty())
    throw ConfigError(figure +
                      ": the runs' configs differ in no option but the run section (seed, name) and the "
                      "architecture: nothing to plot '" +
                      metric + "' against");
  if (keys.size() < least)
    throw ConfigError(figure + ": the runs sweep one option (" + keys.front() +
                      "): a grid needs two (the sweep figure draws one)");
  return keys;
}

/// A swept option's values over the runs, in order: numbers by value, any other value by its text.
std::vector<json> option_values(const std::string& key, const std::vector<SweepRun>& runs) {
  std::vector<json> values;
  for (const auto& run : runs)
    if (const auto it = run.options.find(key); it != run.options.end()) values.push_back(it->second);
  std::sort(values.begin(), values.end(), [](const json& a, const json& b) {
    if (a.is_number() && b.is_number()) return a.get<double>() < b.get<double>();
    if (a.is_number() != b.is_number()) return a.is_number();
    return option_value_text(a) < option_value_text(b);
  });
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return values;
}

/// The two options of a grid: the request's (rows, then columns), else the two whose values explain the most
/// variance within architectures (ties and unknown shares in key order), in key order.
std::pair<std::string, std::string> grid_options(const std::vector<std::string>& keys,
                                                 const std::vector<SweepRun>& runs, const FigureRequest& request) {
  if (!request.options.empty()) {
    if (request.options.size() != 2 || request.options[0] == request.options[1])
      throw ConfigError("sweep-grid: options: give two options (rows, columns), not " +
                        std::to_string(request.options.size()));
    for (const auto& key : request.options)
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
        std::string swept;
        for (const auto& k : keys) swept += (swept.empty() ? "" : ", ") + k;
        throw ConfigError("sweep-grid: options: '" + key + "' is not an option the runs set to more than one value (" +
                          swept + ")");
      }
    return {request.options[0], request.options[1]};
  }
  std::vector<std::pair<double, std::string>> ranked;
  for (const auto& key : keys) {
    const double share = explained_share(key, runs);
    ranked.emplace_back(std::isfinite(share) ? -share : INFINITY, key);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  auto pair = std::minmax(ranked[0].second, ranked[1].second);
  return {pair.first, pair.second};
}

/// One architecture's cells of a grid: the metric of each run setting both options, by (row, column) value index.
using GridCells = std::map<std::pair<std::size_t, std::size_t>, std::vector<double>>;

/// The share of an architecture's variance its grid's interaction explains: the squares of the cell means from the
/// grand mean less the rows' and columns' (main effects), over the squares of each run from the grand mean. Exact
/// for a complete grid with as many runs in every cell; NaN for any other grid (the decomposition does not hold).
double interaction_share(const GridCells& cells, std::size_t rows, std::size_t cols) {
  if (cells.size() != rows * cols || rows < 2 || cols < 2) return kNaN;
  const auto n = cells.begin()->second.size();
  double sum = 0, count = 0;
  for (const auto& [at, ys] : cells) {
    if (ys.size() != n) return kNaN;
    for (const double y : ys) sum += y, count += 1;
  }
  const double mean = sum / count;
  std::vector<double> row_sum(rows), col_sum(cols);
  double cells_ss = 0, total_ss = 0;
  for (const auto& [at, ys] : cells) {
    double s = 0;
    for (const double y : ys) s += y, total_ss += (y - mean) * (y - mean);
    row_sum[at.first] += s, col_sum[at.second] += s;
    cells_ss += static_cast<double>(n) * (s / static_cast<double>(n) - mean) * (s / static_cast<double>(n) - mean);
  }
  double main_ss = 0;
  for (const double s : row_sum) {
    const double m = s / static_cast<double>(n * cols);
    main_ss += static_cast<double>(n * cols) * (m - mean) * (m - mean);
  }
  for (const double s : col_sum) {
    const double m = s / static_cast<double>(n * rows);
    main_ss += static_cast<double>(n * rows) * (m - mean) * (m - mean);
  }
  return total_ss > 0 ? std::max(0.0, cells_ss - main_ss) / total_ss : kNaN;
}

/// The grid of two swept options the request reads: the options, their values in order, and each architecture's
/// cells (in the order the architectures first appear).
struct SweepGrid {
  std::vector<std::string> swept;  ///< every swept option
  std::string row_key, col_key;
  std::vector<json> row_values, col_values;
  std::vector<std::string> order;
  std::map<std::string, GridCells> cells;
  std::vector<std::string> pooled() const {  ///< the swept options the cells' means pool over
    std::vector<std::string> out;
    for (const auto& key : swept)
      if (key != row_key && key != col_key) out.push_back(key);
    return out;
  }
};

SweepGrid read_sweep_grid(const RunStore& store, const FigureRequest& request) {
  const auto runs = read_sweep_runs(store, request, "sweep-grid");
  SweepGrid g;
  // Options asked for by name are checked by name (grid_options), before the count of swept options.
  g.swept = require_swept(runs, request.options.empty() ? 2 : 1, "sweep-grid", request.metric);
  std::tie(g.row_key, g.col_key) = grid_options(g.swept, runs, request);
  g.row_values = option_values(g.row_key, runs), g.col_values = option_values(g.col_key, runs);
  const auto index = [](const std::vector<json>& values, const json& v) {
    return static_cast<std::size_t>(std::find(values.begin(), values.end(), v) - values.begin());
  };
  for (const auto& run : runs) {
    const auto r = run.options.find(g.row_key), c = run.options.find(g.col_key);
    if (r == run.options.end() || c == run.options.end() || !std::isfinite(run.value)) continue;
    if (!g.cells.count(run.arch)) g.order.push_back(run.arch);
    g.cells[run.arch][{index(g.row_values, r->second), index(g.col_values, c->second)}].push_back(run.value);
  }
  if (g.order.empty())
    throw DataError("sweep-grid: no run sets both " + g.row_key + " and " + g.col_key + " and has a value of '" +
                    request.metric + "'");
  return g;
}

std::vector<std::string> value_labels(const std::vector<json>& values) {
  std::vector<std::string> out;
  for (const auto& v : values) out.push_back(option_value_text(v));
  return out;
}

}  // namespace

Figure build_sweep_grid(const RunStore& store, const FigureRequest& request) {
  const auto g = read_sweep_grid(store, request);
  const auto& [swept, row_key, col_key, row_values, col_values, order, grids] = g;
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& [arch, cells] : grids)
    for (const auto& [at, ys] : cells) {
      const double m = summarize(ys)->mean;
      lo = std::min(lo, m), hi = std::max(hi, m);
    }
  Figure f;
  f.columns = static_cast<int>(std::min<std::size_t>(3, order.size()));
  json interactions = json::object(), cells_meta = json::array();
  const bool higher = higher_is_better(request.metric);
  for (const auto& arch : order) {
    const auto& cells = grids.at(arch);
    FigurePanel panel;
    panel.title = arch_label(arch);
    panel.x_label = col_key;
    panel.y_label = row_key;
    auto& h = panel.heatmap;
    h.rows = row_values.size(), h.cols = col_values.size();
    h.values.assign(h.rows * h.cols, kNaN);
    h.cell_text.assign(h.rows * h.cols, "");
    h.row_labels = value_labels(row_values), h.col_labels = value_labels(col_values);
    h.lo = lo, h.hi = hi;
    h.colour_label = request.metric;
    std::optional<std::pair<double, std::size_t>> best;
    for (const auto& [at, ys] : cells) {
      const auto s = *summarize(ys);
      const auto i = at.first * h.cols + at.second;
      h.values[i] = s.mean;
      h.cell_text[i] = number_text(s.mean, 4);
      if (!best || (higher ? s.mean > best->first : s.mean < best->first)) best = {s.mean, i};
      cells_meta.push_back({{"arch", arch},
                            {row_key, row_values[at.first]},
                            {col_key, col_values[at.second]},
                            {"mean", s.mean},
                            {"std", s.std},
                            {"runs", s.n}});
    }
    h.cell_text[best->second] = "[" + h.cell_text[best->second] + "]";  // the architecture's best cell
    const double share = interaction_share(cells, h.rows, h.cols);
    if (std::isfinite(share)) panel.title += " \u00b7 interaction \u03b7\u00b2 " + number_text(share, 2);
    interactions[arch] = std::isfinite(share) ? json(share) : json(nullptr);
    f.panels.push_back(std::move(panel));
  }
  f.meta["options"] = {row_key, col_key};
  f.meta["pooled_over"] = g.pooled();
  f.meta["interaction_eta_squared"] = interactions;
  f.meta["cells"] = cells_meta;
  f.meta["higher_is_better"] = higher;
  return f;
}

ReportTable sweep_grid_table(const RunStore& store, const FigureRequest& request) {
  const auto g = read_sweep_grid(store, request);
  ReportTable table;
  const auto pooled = g.pooled();
  std::string pooled_text;
  for (const auto& key : pooled) pooled_text += (pooled_text.empty() ? "" : ", ") + key;
  table.caption = request.metric + " over " + g.row_key + " (rows) and " + g.col_key +
                  " (columns): mean +- std over each cell's runs" +
                  (pooled.empty() ? std::string() : "; pooled over " + pooled_text) + ".";
  table.label = "tab:sweep-grid";
  // The corner names both options: rows \ columns.
  table.row_header = (g.order.size() > 1 ? "Architecture, " : "") + g.row_key + " \\ " + g.col_key;
  const Better better = higher_is_better(request.metric) ? Better::Higher : Better::Lower;
  for (const auto& label : value_labels(g.col_values)) table.columns.push_back({label, "", better, 3, 1.0});
  const auto labels = value_labels(g.row_values);
  for (const auto& arch : g.order) {
    const auto& cells = g.cells.at(arch);
    for (std::size_t r = 0; r < g.row_values.size(); ++r) {
      TableRow row;
      row.label = (g.order.size() > 1 ? arch_label(arch) + ", " : std::string()) + labels[r];
      bool any = false;
      for (std::size_t c = 0; c < g.col_values.size(); ++c) {
        const auto it = cells.find({r, c});
        row.cells.push_back(it == cells.end() ? std::nullopt : summarize(it->second));
        any = any || it != cells.end();
      }
      if (any) table.rows.push_back(std::move(row));
    }
  }
  return table;
}

Figure build_sweep(const RunStore& store, const FigureRequest& request) {
  const auto runs = read_sweep_runs(store, request, "sweep");
  const auto keys = require_swept(runs, 1, "sweep", request.metric);
  Figure f;
  f.columns = static_cast<int>(std::min<std::size_t>(3, keys.size()));
  Styler styler;  // one colour per architecture over every panel
  json shares = json::object();
  for (const auto& key : keys) {
    bool numbers = true;
    for (const auto& run : runs) {
      const auto it = run.options.find(key);
      numbers = numbers && (it == run.options.end() || it->second.is_number());
    }
    f.panels.push_back(numbers ? number_panel(key, runs, styler, request.metric)
                               : choice_panel(key, runs, styler, request.metric));
    const double share = explained_share(key, runs);
    if (std::isfinite(share)) f.panels.back().title += " \u00b7 \u03b7\u00b2 " + number_text(share, 2);
    shares[key] = std::isfinite(share) ? json(share) : json(nullptr);
  }
  f.meta["options"] = keys;
  f.meta["eta_squared"] = shares;  // per option: the share of the within-architecture variance it explains
  f.meta["higher_is_better"] = higher_is_better(request.metric);
  json values = json::array();
  for (const auto& run : runs)
    values.push_back({{"run", run.id}, {"value", std::isfinite(run.value) ? json(run.value) : json(nullptr)}});
  f.meta["values"] = values;
  return f;
}

}  // namespace routelab::figure_detail
