#include "core/report/run_tables.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <regex>

#include <nlohmann/json.hpp>

#include "core/store/run_store.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

ColumnSpec col(std::string key, std::string header, std::string unit, Better better, int precision,
               double scale = 1.0, Reduce reduce = Reduce::Last) {
  return {std::move(key), TableColumn{std::move(header), std::move(unit), better, precision, scale}, reduce};
}

const ColumnSpec kValLoss = col("val/loss", "Val. loss", "", Better::Lower, 3);
const ColumnSpec kValPpl = col("val/ppl", "PPL", "", Better::Lower, 2);
const ColumnSpec kFlopsRatio = col("val/flops_ratio", "FLOPs ratio", "", Better::Lower, 3);
const ColumnSpec kRouted = col("val/routed_fraction", "Routed tokens", "%", Better::None, 1, 100.0);

}  // namespace

const std::vector<TableSpec>& table_specs() {
  static const std::vector<TableSpec> specs = [] {
    std::vector<TableSpec> s = {
        {"seed000-table1", "seed 000 Table 1 layout: architecture x quality and cost",
         "Validation loss, perplexity and forward FLOPs relative to a dense model of the same shape (routing "
         "measured on the validation split).",
         "Architecture", {kValLoss, kValPpl, kFlopsRatio, kRouted}},
        {"seed001-drr", "seed 001: DRR against its PreNorm baseline",
         "Depth routing residuals against a PreNorm stack of the same shape.", "Model",
         {kValLoss, col("val/bpc", "BPC", "", Better::Lower, 3), kFlopsRatio}},
        {"seed002-table1", "seed 002 Tables 1-2 layout: accuracy, macro-F1, routing entropy, expert balance",
         "Sentence-pair classification: validation accuracy and macro-F1, routing entropy and load imbalance.",
         "Model",
         {col("val/accuracy", "Accuracy", "%", Better::Higher, 1, 100.0),
          col("val/macro_f1", "Macro-F1", "%", Better::Higher, 1, 100.0),
          col("val/entropy", "Routing entropy", "nats", Better::None, 3),
          col("val/load_imbalance", "Load imbalance", "", Better::Lower, 4)}},
        {"seed003-table2", "seed 003 Table 2 layout: loss, active fraction and TLOps saved",
         "Validation loss, TSA active fraction alpha and transformer-layer operations saved.", "Model",
         {kValLoss, col("val/alpha", "Active fraction", "", Better::None, 3),
          col("val/tlops_saved", "TLOps saved", "%", Better::Higher, 1, 100.0), kFlopsRatio}},
        {"seed004-depth", "seed 004: Radial Networks' dynamic depth",
         "Validation loss and the dynamic depth chosen by the router.", "Model",
         {kValLoss, col("val/mean_depth", "Mean depth", "layers", Better::None, 2),
          col("val/distinct_layers", "Distinct layers", "", Better::None, 2),
          col("val/reuse_share", "Reuse", "%", Better::None, 1, 100.0), kFlopsRatio}},
        {"summary", "any runs: last validation loss, perplexity, FLOPs ratio, routed share, throughput",
         "Runs side by side at their last evaluation.", "Run",
         {kValLoss, kValPpl, kFlopsRatio, kRouted,
          col("train/tokens_per_s", "Throughput", "tok/s", Better::Higher, 0)}},
    };
    std::sort(s.begin(), s.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    return s;
  }();
  return specs;
}

const TableSpec& table_spec(const std::string& name) {
  std::string known;
  for (const auto& spec : table_specs()) {
    if (spec.name == name) return spec;
    known += (known.empty() ? "" : ", ") + spec.name;
  }
  throw ConfigError("unknown table '" + name + "' (known: " + known + ")");
}

TableSpec custom_table_spec(const std::vector<std::string>& keys) {
  TableSpec spec{"custom", "the given metric keys", "Runs side by side.", "Run", {}};
  for (const auto& key : keys) {
    const bool higher = key.find("accuracy") != std::string::npos || key.find("f1") != std::string::npos ||
                        key.find("per_s") != std::string::npos;
    spec.columns.push_back(col(key, key, "", higher ? Better::Higher : Better::Lower, 4));
  }
  return spec;
}

std::vector<RunGroup> group_runs(const RunStore& store, const std::vector<std::int64_t>& run_ids, bool by_seed) {
  std::vector<RunGroup> groups;
  std::map<std::string, std::size_t> by_config;
  for (auto id : run_ids) {
    const auto run = store.run(id);
    if (!run) throw StoreError(store.path() + ": no run " + std::to_string(id));
    if (!by_seed) {
      groups.push_back({run->name, {id}});
      continue;
    }
    nlohmann::json config;
    try {
      config = nlohmann::json::parse(run->config_json);
    } catch (const nlohmann::json::exception& e) {
      throw ConfigError(store.path() + ": run " + std::to_string(id) + ": stored config is not JSON: " + e.what());
    }
    if (config.is_object()) config.erase("run");
    const auto [it, inserted] = by_config.try_emplace(config.dump(), groups.size());
    if (inserted) groups.push_back({run->name, {}});
    groups[it->second].run_ids.push_back(id);
  }
  // A group is named after its first run without the seed part a sweep puts in names ("x/seed=1" -> "x").
  static const std::regex seed_part(R"(([,/])?seed=[0-9]+)");
  for (auto& group : groups)
    if (group.run_ids.size() > 1) {
      auto label = std::regex_replace(group.label, seed_part, "");
      if (label.empty()) label = group.label;
      group.label = label + " (" + std::to_string(group.run_ids.size()) + " seeds)";
    }
  return groups;
}

double reduce_metric(const RunStore& store, std::int64_t run_id, const std::string& key, Reduce reduce) {
  const auto points = store.metric(run_id, key);
  if (points.empty()) return std::numeric_limits<double>::quiet_NaN();
  if (reduce == Reduce::Last) return points.back().value;
  double best = reduce == Reduce::Min ? INFINITY : -INFINITY;
  for (const auto& p : points)
    if (std::isfinite(p.value)) best = reduce == Reduce::Min ? std::min(best, p.value) : std::max(best, p.value);
  return std::isfinite(best) ? best : std::numeric_limits<double>::quiet_NaN();
}

ReportTable build_run_table(const RunStore& store, const TableSpec& spec, const std::vector<std::int64_t>& run_ids,
                            bool by_seed) {
  ReportTable table;
  table.caption = spec.caption;
  table.label = "tab:" + spec.name;
  table.row_header = spec.row_header;
  for (const auto& c : spec.columns) table.columns.push_back(c.column);
  for (const auto& group : group_runs(store, run_ids, by_seed)) {
    TableRow row{group.label, {}};
    for (const auto& c : spec.columns) {
      std::vector<double> values;
      for (auto id : group.run_ids) values.push_back(reduce_metric(store, id, c.key, c.reduce));
      row.cells.push_back(summarize(values));
    }
    table.rows.push_back(std::move(row));
  }
  return table;
}

}  // namespace routelab
