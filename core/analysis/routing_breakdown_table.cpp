// The routing breakdown as a paper table (routing_breakdown.h): token groups x runs, each cell the share of the
// group's token-layer decisions on the routed path, over seeds as mean +- std.
#include <algorithm>
#include <cmath>
#include <map>

#include "core/analysis/routing_breakdown.h"
#include "core/report/figure/figure.h"
#include "core/report/tables/run_tables.h"
#include "core/store/run_store.h"

namespace routelab {
namespace {

/// One column of the table: a group of runs (seeds of one config), and a routed layer of theirs or all of them.
struct Column {
  std::size_t group = 0;
  std::optional<int> layer;  ///< nullopt: the mean over the routed layers
};

}  // namespace

ReportTable routing_breakdown_table(const std::string& db_path, const std::vector<std::int64_t>& run_ids,
                                    TokenGrouping by, const RoutingBreakdownOptions& sample,
                                    const BreakdownTableOptions& how) {
  const bool per_layer = how.per_layer;
  const RunStore store(db_path, /*mark_crashed=*/false);
  auto groups = group_runs(store, run_ids, how.by_seed);
  std::map<std::string, int> named;  // two columns of one name (a preset run twice) say their first run
  for (const auto& g : groups) ++named[g.label];
  bool seeds = false;
  for (auto& g : groups) {
    seeds = seeds || g.run_ids.size() > 1;
    if (named[g.label] > 1) g.label += " (run " + std::to_string(g.run_ids.front()) + ")";
  }
  auto options = sample;
  options.groupings = {by};
  options.unrouted_is_empty = true;  // a dense baseline's column is all dashes
  // Per run: group label -> (layer -> share); the row labels in the order first seen.
  std::vector<std::string> rows;
  std::map<std::int64_t, std::map<std::string, std::map<int, double>>> shares;
  std::map<std::int64_t, std::map<std::string, double>> means;
  std::vector<std::vector<int>> layers_of(groups.size());  // the routed layers of each group's first run
  for (std::size_t g = 0; g < groups.size(); ++g)
    for (const auto id : groups[g].run_ids) {
      const auto b = stored_routing_breakdown(store.path(), id, options, how.sets, how.step);
      if (layers_of[g].empty())
        for (const auto& l : b.layers) layers_of[g].push_back(l.layer);
      if (b.tables.empty()) continue;
      for (const auto& group : b.tables.front().groups) {
        if (std::find(rows.begin(), rows.end(), group.short_label) == rows.end()) rows.push_back(group.short_label);
        const auto& per = how.gates ? group.gate : group.routed;
        for (std::size_t l = 0; l < b.layers.size() && l < per.size(); ++l)
          shares[id][group.short_label][b.layers[l].layer] = per[l];
        means[id][group.short_label] = how.gates ? group.mean_gate() : group.mean_routed();
      }
    }
  std::vector<Column> columns;
  ReportTable table;
  const auto column = [&](std::string header) {
    return how.gates ? TableColumn{std::move(header), "", Better::None, 3, 1.0}
                     : TableColumn{std::move(header), "%", Better::None, 1, 100.0};
  };
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (!per_layer || layers_of[g].empty()) {
      columns.push_back({g, std::nullopt});
      table.columns.push_back(column(groups[g].label));
      continue;
    }
    for (const auto layer : layers_of[g]) {
      columns.push_back({g, layer});
      table.columns.push_back(column(groups[g].label + " " + layer_label(layer)));
    }
  }
  for (const auto& label : rows) {
    TableRow row{label, {}};
    for (const auto& c : columns) {
      std::vector<double> values;
      for (const auto id : groups[c.group].run_ids) {
        double v = std::nan("");
        if (!c.layer) {
          if (const auto it = means[id].find(label); it != means[id].end()) v = it->second;
        } else if (const auto it = shares[id].find(label); it != shares[id].end()) {
          if (const auto at = it->second.find(*c.layer); at != it->second.end()) v = at->second;
        }
        values.push_back(v);  // NaN (an empty group, a dense run) is left out of the cell
      }
      row.cells.push_back(summarize(values));
    }
    // A group no run's sample holds (char-level text has no "other" token) is left out.
    if (std::any_of(row.cells.begin(), row.cells.end(), [](const auto& cell) { return cell.has_value(); }))
      table.rows.push_back(std::move(row));
  }
  table.row_header = to_string(by);
  const std::string what = how.gates ? "Mean gate of each token group's tokens"
                                     : "Share of each token group's " +
                                           std::string(per_layer ? "decisions" : "token-layer decisions") +
                                           " on the routed path";
  table.caption = what + (per_layer ? ", per routed layer" : " (mean over the routed layers)") +
                  ", in inference mode over " + std::to_string(sample.tokens) + " " + to_string(sample.split) +
                  " tokens, by " + to_string(by) + (how.step ? " at step " + std::to_string(how.step) : "") +
                  (seeds ? "; mean and standard deviation over seeds" : "") + ".";
  if (!how.sets.empty()) {
    std::string sets;
    for (const auto& s : how.sets) sets += (sets.empty() ? "" : ", ") + s;
    table.caption.insert(table.caption.size() - 1, "; evaluated with " + sets);
  }
  table.label = std::string(how.gates ? "tab:gates-by-" : "tab:routing-by-") + to_string(by);
  return table;
}

}  // namespace routelab
