// A run's training-mode routing over time: the routed-token share of every layer at each logged step, read once
// from the store's routing rows (Torch-free). The dashboard's heat map, the "routing-history" figure and the
// training bars of "routed-layers" are drawn from it.
#pragma once
#include <cstdint>
#include <vector>

namespace routelab {

class RunStore;

struct RoutingHistory {
  std::vector<std::int64_t> steps;             ///< logged steps, increasing
  std::vector<std::vector<double>> fractions;  ///< [step][layer] share on the routed path; NaN where no row

  bool empty() const { return steps.empty(); }
  std::size_t layers() const;  ///< the widest column
  /// Appends a column; a step at or before the last one is ignored (returns false).
  bool append(std::int64_t step, std::vector<double> column);
  /// The last column at or before `step` (the last one when `step` is 0), or nullptr; `at` receives its step.
  const std::vector<double>* column_at(std::int64_t step, std::int64_t* at = nullptr) const;
};

/// The run's routing rows as one column per logged step (rows arrive ordered by step, then layer).
RoutingHistory read_routing_history(const RunStore& store, std::int64_t run_id);

}  // namespace routelab
