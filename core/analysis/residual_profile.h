// The profiling method of Radial Networks (Dotzel et al. 2024, §4.1) for any trained RouteLab model: the residual ratio
// r = ||R(x)||_2 / ||x||_2 per token for every attention and every FFN sub-block, its distribution per layer
// (Figures 5, 6, 9, 10) and the oracle dynamic depth at a threshold tau: the sub-blocks a token would keep if
// every sub-block with r < tau were skipped (Figure 7). Ratios are measured in inference mode, on the sub-blocks
// each token really ran under the model's own routing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/analysis/run_analysis.h"

namespace routelab {

struct ResidualProfileOptions {
  Split split = Split::Val;
  std::int64_t batches = 4;       ///< evaluation batches (the trainer's fixed ones)
  std::int64_t batch_size = 0;    ///< 0 = the run's train.batch_size
  double tau = 0.1;               ///< oracle threshold: a sub-block with r < tau counts as skipped
  int bins = 32;                  ///< histogram bins over log10 r in [-3, 1]
};

/// The distribution of r for one sub-block kind of one layer over every token that ran it.
struct SubBlockProfile {
  int layer = 0;
  std::string block;              ///< "attn" or "mlp"
  std::int64_t count = 0;         ///< (token, execution) pairs measured
  double mean = 0, p10 = 0, p50 = 0, p90 = 0, max = 0;
  double below_tau = 0;           ///< share of the measured pairs with r < tau
  std::vector<std::int64_t> histogram;  ///< counts per log10 bin; under- and overflow land in the end bins
};

struct ResidualProfile {
  std::int64_t run_id = 0;
  std::string name, arch;
  std::int64_t step = 0;
  double tau = 0.1;
  int bins = 32;
  std::vector<SubBlockProfile> blocks;  ///< sorted by layer, then attn before mlp
  double mean_executed = 0;       ///< sub-blocks a token ran, mean over tokens
  double mean_oracle_depth = 0;   ///< of those, the ones with r >= tau
  double static_depth = 0;        ///< 2 x layers: what a dense stack runs
  std::vector<std::int64_t> oracle_depth_histogram;  ///< tokens per oracle depth 0 .. max executed
  /// The probe text (the run's probe tokens): its tokens and, per sub-block, r of each token (null = not run).
  nlohmann::json probe;

  nlohmann::json to_json() const;
  /// A plain-text table: one row per sub-block with the quantiles and the share under tau, then the depths.
  std::string to_table() const;
};

ResidualProfile profile_residuals(LoadedRun& run, const ResidualProfileOptions& options = {});

}  // namespace routelab
