// Paper tables from the run store: named layouts (the seeds' tables) or a list of metric keys, rows = runs or
// groups of runs that differ only in their run section (same config, different seeds: mean +- std).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/report/tables/table.h"

namespace routelab {

class RunStore;
struct SweepPlan;

/// How one run's metric series becomes one number.
enum class Reduce { Last, Min, Max };

struct ColumnSpec {
  std::string key;        ///< metric key, e.g. "val/loss"
  TableColumn column;
  Reduce reduce = Reduce::Last;
  /// Where not empty, a run's value is the mean of these metrics (each reduced as above; none where one is missing)
  /// and `key` only names the column: a paper's average over its task columns.
  std::vector<std::string> mean_of{};
};

struct TableSpec {
  std::string name;       ///< e.g. "dtrnet-table1"
  std::string description;
  std::string caption;
  std::string row_header = "Run";
  std::vector<ColumnSpec> columns;
  /// Rows are epochs (TAGAT's per-epoch tables): for every epoch that ended (train/epoch_loss logged at its
  /// last step), each column's value at the last step of that epoch at or before its end; cells over seeds.
  bool per_epoch = false;
  /// Adds one column per expert i from the metrics `<expert_prefix><i>` (e.g. val/load/E0, E1, ...), per epoch.
  std::string expert_prefix{};  // an initializer: specs that leave it out are not "missing" it (-Wextra)
};

/// The named layouts, sorted by name.
const std::vector<TableSpec>& table_specs();
/// Throws ConfigError("unknown table 'x' (known: ...)").
const TableSpec& table_spec(const std::string& name);
/// The layout a sweep names (SweepPlan::table); an unknown name is a ConfigError naming the sweep file and its
/// "table" key, so that a typo fails before the first run.
const TableSpec& sweep_table(const SweepPlan& plan);
/// A layout of the given metric keys ("val/loss,val/flops_ratio"), lower-is-better unless the key names an
/// accuracy, F1 or throughput, or ends in /acc or /acc_norm (the zero-shot tasks' accuracies).
TableSpec custom_table_spec(const std::vector<std::string>& keys);

/// Runs grouped for mean +- std: same resolved config apart from the `run` section.
struct RunGroup {
  std::string label;                  ///< the first run's name ("name (n seeds)" when grouped)
  std::vector<std::int64_t> run_ids;  ///< in the order given
};
/// Groups `run_ids` (kept in first-seen order) when `by_seed`, else one group per run. Throws StoreError naming
/// the store for an unknown run id and ConfigError for a run whose stored config is not JSON.
std::vector<RunGroup> group_runs(const RunStore& store, const std::vector<std::int64_t>& run_ids, bool by_seed);

/// One value of a run's metric: the last (or min / max) value of the series; NaN when the run has none.
double reduce_metric(const RunStore& store, std::int64_t run_id, const std::string& key, Reduce reduce);
/// A column's value for a run: its metric reduced, or the mean of its `mean_of` metrics (NaN where one is missing).
double column_value(const RunStore& store, std::int64_t run_id, const ColumnSpec& column);

/// Builds the table: one row per group (per group and epoch for a per-epoch layout), each cell summarising the
/// group's runs.
ReportTable build_run_table(const RunStore& store, const TableSpec& spec, const std::vector<std::int64_t>& run_ids,
                            bool by_seed = true);

}  // namespace routelab
