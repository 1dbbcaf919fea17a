// Sweeps: one experiment file declares a grid (over lambda, capacity ratios, layer patterns, seeds...) on top of
// a preset, plus baselines run under the same budget; expand_sweep resolves every point before anything runs,
// so a bad value fails at once with the file, the point and the key named.
//
// A sweep file: {"name": "tsa-lambda", "description": "...", "base": "tsa-charlm",
//   "model"/"data"/"train"/"run": {...overrides of the base...},
//   "grid": {"model.depth_coeff": [0, 0.001, 0.01], "run.seed": [1, 2]},
//   "baselines": [{"preset": "tsa-charlm-dense", "name": "dense", "set": {"train.lr": 1e-4}}],
//   "table": "tsa-table2"}
// The grid is the Cartesian product of its keys (sorted by key); baselines take the file's data/train/run
// overrides and the grid's data/train/run keys (so they share the budget and seeds), never model keys; a
// baseline's own "set" ("section.key": value) applies last.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config/experiment_config.h"

namespace routelab {

struct SweepPoint {
  std::string name;            ///< run name, e.g. "tsa-lambda/depth_coeff=0.001,seed=1"
  std::string origin;          ///< the preset it starts from
  ExperimentConfig config;     ///< fully resolved
};

struct SweepPlan {
  std::string name;
  std::string description;
  std::string origin;             ///< the file (or name) it was read from, for errors
  /// the table layout printed at the end: checked by sweep_table (core/report/tables/run_tables.h), not here
  std::string table = "summary";
  std::vector<SweepPoint> points;  ///< grid points first (in grid order), then the baselines
  std::string tag() const { return "sweep:" + name; }
};

/// Expands and resolves a sweep document. Throws ConfigError naming `origin` and the key (unknown top-level keys,
/// a grid key that is not section.key, an empty or non-array value list, a point that does not resolve).
SweepPlan expand_sweep(const nlohmann::json& doc, const std::string& origin);
/// Reads and expands a sweep file.
SweepPlan load_sweep(const std::string& path);

}  // namespace routelab
