#include "core/report/tables/run_tables.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <regex>

#include <nlohmann/json.hpp>

#include "core/config/sweep.h"
#include "core/report/report_ids.h"
#include "core/run/run_config.h"
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
const ColumnSpec kAlpha = col("val/alpha", "Active fraction", "", Better::None, 3);
const ColumnSpec kTlopsSaved = col("val/tlops_saved", "TLOps saved", "%", Better::Higher, 1, 100.0);

/// DTRNet's ablation tables share Table 1's columns; their rows are the variants the caption names.
TableSpec dtrnet_ablation(int number, std::string what, std::string caption) {
  return {"dtrnet-table" + std::to_string(number),
          "DTRNet Table " + std::to_string(number) + " layout: " + std::move(what),
          std::move(caption),
          "Model",
          {kValLoss, kValPpl, kFlopsRatio, kRouted}};
}

/// DTRNet Table 1's downstream columns (Tables 2 and 3 have the same): zero-shot measures `routelab-cli tasks RUN
/// --store` keeps as task/<name>/<measure>, for tasks named as the harness names them.
TableSpec dtrnet_downstream() {
  const auto accuracy = [](const std::string& task, const std::string& header) {
    return col("task/" + task + "/acc", header, "%", Better::Higher, 2, 100.0);
  };
  auto average = col("task/average/acc", "AVG", "%", Better::Higher, 2, 100.0);
  for (const auto* task : {"arc_challenge", "arc_easy", "boolq", "hellaswag", "lambada", "piqa", "mmlu", "winogrande"})
    average.mean_of.push_back(std::string("task/") + task + "/acc");
  return {"dtrnet-table1-tasks",
          "DTRNet Table 1 downstream layout: zero-shot WikiText and LAMBADA perplexity, accuracy on ARC-C, ARC-E, "
          "BoolQ, HellaSwag, LAMBADA, PIQA, MMLU, Winogrande (from `tasks RUN --store`)",
          "Zero-shot perplexity and accuracy (lm-evaluation-harness scoring) on the tasks the DTRNet paper reports.",
          "Model",
          {col("val/flops_ratio", "FLOPs", "", Better::Lower, 2),
           col("task/wikitext/word_perplexity", "WIKI", "ppl", Better::Lower, 2),
           col("task/lambada/ppl", "LMBD", "ppl", Better::Lower, 2), accuracy("arc_challenge", "ARC-C"),
           accuracy("arc_easy", "ARC-E"), accuracy("boolq", "BQ"), accuracy("hellaswag", "HLSWG"),
           accuracy("lambada", "LMBD"), accuracy("piqa", "PIQA"), accuracy("mmlu", "T-MMLU"),
           accuracy("winogrande", "WG"), average}};
}

/// TAGAT's per-epoch tables (Tables 1-3): training loss and accuracy of the epoch, validation accuracy, macro-F1,
/// routing entropy, the routing change since the previous epoch and each expert's load.
TableSpec tagat_epochs(std::string name, std::string what, std::string caption, bool experts) {
  TableSpec spec{std::move(name), std::move(what), std::move(caption), "Epoch",
                 {col("train/epoch_loss", "Train loss", "", Better::Lower, 4),
                  col("train/epoch_accuracy", "Train acc.", "%", Better::Higher, 2, 100.0),
                  col("val/accuracy", "Val. acc.", "%", Better::Higher, 2, 100.0),
                  col("val/macro_f1", "Val. F1", "%", Better::Higher, 2, 100.0)}};
  if (experts) {
    spec.columns.push_back(col("val/entropy", "Val. entropy", "nats", Better::None, 4));
    // Not in the seed: the share of validation tokens whose experts changed since the previous epoch.
    spec.columns.push_back(col("val/routing_change", "Routing change", "%", Better::None, 2, 100.0));
    spec.expert_prefix = "val/load/E";
  }
  spec.per_epoch = true;
  return spec;
}

/// The value of `points` at the last step in (after, upto]; NaN when there is none.
double value_in(const std::vector<MetricPoint>& points, std::int64_t after, std::int64_t upto) {
  double value = std::numeric_limits<double>::quiet_NaN();
  for (const auto& p : points)
    if (p.step > after && p.step <= upto) value = p.value;
  return value;
}

/// The expert count of `prefix` metrics a run stores (E0, E1, ... contiguous).
std::size_t expert_count(const RunStore& store, std::int64_t run_id, const std::string& prefix) {
  std::size_t n = 0;
  const auto keys = store.metric_keys(run_id);
  while (std::find(keys.begin(), keys.end(), prefix + std::to_string(n)) != keys.end()) ++n;
  return n;
}

ReportTable build_epoch_table(const RunStore& store, const TableSpec& spec, const std::vector<std::int64_t>& run_ids,
                              bool by_seed) {
  ReportTable table;
  table.caption = spec.caption;
  table.label = "tab:" + spec.name;
  table.row_header = spec.row_header;
  std::vector<ColumnSpec> columns = spec.columns;
  if (!spec.expert_prefix.empty()) {
    std::size_t experts = 0;
    for (auto id : run_ids) experts = std::max(experts, expert_count(store, id, spec.expert_prefix));
    for (std::size_t i = 0; i < experts; ++i)
      columns.push_back(col(spec.expert_prefix + std::to_string(i), "Expert " + std::to_string(i + 1) + " load", "",
                            Better::None, 4));
  }
  for (const auto& c : columns) table.columns.push_back(c.column);
  const auto groups = group_runs(store, run_ids, by_seed);
  for (const auto& group : groups) {
    // Each run's epoch ends: the steps of train/epoch_loss.
    std::vector<std::vector<std::int64_t>> ends;
    std::size_t epochs = 0;
    for (auto id : group.run_ids) {
      ends.emplace_back();
      for (const auto& p : store.metric(id, "train/epoch_loss")) ends.back().push_back(p.step);
      epochs = std::max(epochs, ends.back().size());
    }
    if (epochs == 0)
      throw DataError(store.path() + ": run " + std::to_string(group.run_ids.front()) +
                      " has no finished epoch (train/epoch_loss): '" + spec.name + "' needs a classification run");
    for (std::size_t e = 0; e < epochs; ++e) {
      TableRow row{(groups.size() > 1 ? group.label + ", epoch " : "") + std::to_string(e + 1), {}};
      for (const auto& c : columns) {
        std::vector<double> values;
        for (std::size_t r = 0; r < group.run_ids.size(); ++r) {
          if (e >= ends[r].size()) continue;
          const std::int64_t after = e == 0 ? 0 : ends[r][e - 1], upto = ends[r][e];
          values.push_back(value_in(store.metric(group.run_ids[r], c.key), after, upto));
        }
        row.cells.push_back(summarize(values));
      }
      table.rows.push_back(std::move(row));
    }
  }
  return table;
}

}  // namespace

const std::vector<TableSpec>& table_specs() {
  static const std::vector<TableSpec> specs = [] {
    std::vector<TableSpec> s = {
        {"dtrnet-table1", "DTRNet Table 1 layout: architecture x quality and cost",
         "Validation loss, perplexity and forward FLOPs relative to a dense model of the same shape (routing "
         "measured on the validation split).",
         "Architecture", {kValLoss, kValPpl, kFlopsRatio, kRouted}},
        {"drr-summary", "DRR against its PreNorm baseline",
         "Depth routing residuals against a PreNorm stack of the same shape.", "Model",
         {kValLoss, col("val/bpc", "BPC", "", Better::Lower, 3), kFlopsRatio}},
        {"tagat-summary", "TAGAT comparison: accuracy, macro-F1, routing entropy, expert balance",
         "Sentence-pair classification: validation accuracy and macro-F1, routing entropy and load imbalance.",
         "Model",
         {col("val/accuracy", "Accuracy", "%", Better::Higher, 1, 100.0),
          col("val/macro_f1", "Macro-F1", "%", Better::Higher, 1, 100.0),
          col("val/entropy", "Routing entropy", "nats", Better::None, 3),
          col("val/load_imbalance", "Load imbalance", "", Better::Lower, 4),
          col("val/load_imbalance_per_layer", "Per-layer imbalance", "", Better::Lower, 4),
          col("val/routing_change", "Routing change", "%", Better::None, 2, 100.0)}},
        {"tsa-table2", "TSA Table 2 layout: loss, active fraction and TLOps saved",
         "Validation loss, TSA active fraction alpha and transformer-layer operations saved.", "Model",
         {kValLoss, kAlpha, kTlopsSaved, kFlopsRatio}},
        {"tsa-table1", "TSA Table 1 layout: synthetic tasks (copy, sort), baseline and TSA",
         "Synthetic tasks: validation loss, TSA active fraction alpha and transformer-layer operations saved "
         "(including the mandatory stem block).",
         "Task / model", {kValLoss, kAlpha, kTlopsSaved}},
        {"tsa-table4", "TSA Table 4 layout: TSA against early exit at matched active fraction",
         "TSA and the early-exit baseline at matched active fraction alpha (early exit: the threshold chosen at "
         "inference, e.g. routelab-cli eval RUN --set model.exit_threshold=T --store).",
         "Model", {kValLoss, kAlpha, kTlopsSaved, kFlopsRatio}},
        dtrnet_downstream(),
        dtrnet_ablation(2, "token choice vs expert choice",
                         "DTRNet with token-choice and expert-choice routing."),
        dtrnet_ablation(3, "DTRNet layer patterns (Trilayer, LaterHalf, 6-Transformer, Bilayer)",
                         "Four DTRNet layer patterns of the same depth."),
        dtrnet_ablation(4, "dense vs DTRNet Bilayer vs DTRNet Skip",
                         "The dense baseline, DTRNet Bilayer and DTRNet Skip (the bypass without W_O W_V)."),
        dtrnet_ablation(5, "MoD and D-LLM variants vs DTRNet",
                         "Mixture-of-Depths and D-LLM at their original and increased compute, against DTRNet "
                         "token choice."),
        dtrnet_ablation(6, "DTRNet Bilayer with and without the value/output projections",
                         "DTRNet Bilayer with and without the value and output projections on the bypass path."),
        tagat_epochs("tagat-table1", "TAGAT Tables 1-2 per-epoch layout: TAGAT (balanced or specialised)",
                       "Proposed model metrics per epoch: training loss and accuracy, validation accuracy, "
                       "macro-F1, routing entropy and average expert loads.",
                       true),
        tagat_epochs("tagat-table3", "TAGAT Table 3 per-epoch layout: the vanilla classifier",
                       "Vanilla Transformer metrics per epoch.", false),
        {"radial-depth", "Radial Networks' dynamic depth",
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
  const std::string wanted = current_id(name);  // an earlier id ("tsa-table2") names the same layout
  for (const auto& spec : table_specs()) {
    if (spec.name == wanted) return spec;
    known += (known.empty() ? "" : ", ") + spec.name;
  }
  throw ConfigError("unknown table '" + name + "' (known: " + known + ")");
}

const TableSpec& sweep_table(const SweepPlan& plan) {
  try {
    return table_spec(plan.table);
  } catch (const ConfigError& e) {
    throw ConfigError(plan.origin + ": table: " + e.what());
  }
}

TableSpec custom_table_spec(const std::vector<std::string>& keys) {
  TableSpec spec{"custom", "the given metric keys", "Runs side by side.", "Run", {}};
  for (const auto& key : keys) {
    const auto ends_with = [&](const std::string& end) {
      return key.size() >= end.size() && key.compare(key.size() - end.size(), end.size(), end) == 0;
    };
    const bool higher = key.find("accuracy") != std::string::npos || key.find("f1") != std::string::npos ||
                        key.find("per_s") != std::string::npos || ends_with("/acc") || ends_with("/acc_norm");
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
    auto config = stored_config(*run, store.path());
    config.erase("run");
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

double column_value(const RunStore& store, std::int64_t run_id, const ColumnSpec& column) {
  if (column.mean_of.empty()) return reduce_metric(store, run_id, column.key, column.reduce);
  double sum = 0;
  for (const auto& key : column.mean_of) sum += reduce_metric(store, run_id, key, column.reduce);  // NaN stays NaN
  return sum / static_cast<double>(column.mean_of.size());
}

ReportTable build_run_table(const RunStore& store, const TableSpec& spec, const std::vector<std::int64_t>& run_ids,
                            bool by_seed) {
  if (spec.per_epoch) return build_epoch_table(store, spec, run_ids, by_seed);
  ReportTable table;
  table.caption = spec.caption;
  table.label = "tab:" + spec.name;
  table.row_header = spec.row_header;
  for (const auto& c : spec.columns) table.columns.push_back(c.column);
  for (const auto& group : group_runs(store, run_ids, by_seed)) {
    TableRow row{group.label, {}};
    for (const auto& c : spec.columns) {
      std::vector<double> values;
      for (auto id : group.run_ids) values.push_back(column_value(store, id, c));
      row.cells.push_back(summarize(values));
    }
    table.rows.push_back(std::move(row));
  }
  return table;
}

}  // namespace routelab
