#include "core/run/routing_history.h"

#include <algorithm>
#include <limits>

#include "core/store/run_store.h"

namespace routelab {

std::size_t RoutingHistory::layers() const {
  std::size_t n = 0;
  for (const auto& column : fractions) n = std::max(n, column.size());
  return n;
}

bool RoutingHistory::append(std::int64_t step, std::vector<double> column) {
  if (!steps.empty() && step <= steps.back()) return false;
  steps.push_back(step);
  fractions.push_back(std::move(column));
  return true;
}

const std::vector<double>* RoutingHistory::column_at(std::int64_t step, std::int64_t* at) const {
  const std::vector<double>* found = nullptr;
  for (std::size_t i = 0; i < steps.size() && (step == 0 || steps[i] <= step); ++i) {
    found = &fractions[i];
    if (at) *at = steps[i];
  }
  return found;
}

RoutingHistory read_routing_history(const RunStore& store, std::int64_t run_id) {
  RoutingHistory history;
  for (const RoutingRow& row : store.routing(run_id)) {
    if (history.steps.empty() || history.steps.back() != row.step) {
      history.steps.push_back(row.step);
      history.fractions.emplace_back();
    }
    if (row.layer < 0) continue;
    auto& column = history.fractions.back();
    const auto layer = static_cast<std::size_t>(row.layer);
    if (column.size() <= layer) column.resize(layer + 1, std::numeric_limits<double>::quiet_NaN());
    column[layer] = row.routed_fraction;
  }
  return history;
}

}  // namespace routelab
