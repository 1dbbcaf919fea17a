#include "core/run/routing_history.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

#include "core/util/recent_runs.h"

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

namespace {

/// Adds `rows` (ordered by step, then layer; their steps after the history's last one) as columns.
void add_rows(RoutingHistory& history, const std::vector<RoutingRow>& rows) {
  for (const RoutingRow& row : rows) {
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
}

/// The same stored row, every field (NaN equal to NaN).
bool same_row(const RoutingRow& a, const RoutingRow& b) {
  const auto same = [](double x, double y) { return x == y || (std::isnan(x) && std::isnan(y)); };
  return a.step == b.step && a.layer == b.layer && same(a.routed_fraction, b.routed_fraction) &&
         same(a.gate_mean, b.gate_mean) && same(a.aux_loss, b.aux_loss) && a.tokens_attn == b.tokens_attn &&
         a.tokens_mlp == b.tokens_mlp;
}

/// The rows of `rows`' last step.
std::vector<RoutingRow> last_step_rows(const std::vector<RoutingRow>& rows) {
  if (rows.empty()) return {};
  auto first = rows.end();
  while (first != rows.begin() && std::prev(first)->step == rows.back().step) --first;
  return {first, rows.end()};
}

}  // namespace

RoutingHistory read_routing_history(const RunStore& store, std::int64_t run_id) {
  if (auto* cache = CachedRoutingReads::current()) return cache->history(store, run_id);
  RoutingHistory history;
  add_rows(history, store.routing(run_id));
  return history;
}

const RoutingHistory& RoutingHistoryCache::history(const RunStore& store, std::int64_t run_id) {
  last_read_[run_id] = ++reads_;
  forget_least_recent(last_read_, max_runs_, [this](std::int64_t run) { runs_.erase(run); });
  Entry& entry = runs_[run_id];
  if (!entry.history.empty()) {
    const auto fresh = store.routing(run_id, entry.history.steps.back() - 1);
    rows_read_ += static_cast<std::int64_t>(fresh.size());
    const auto& last = entry.last_rows;
    bool intact = fresh.size() >= last.size();
    for (std::size_t i = 0; intact && i < last.size(); ++i) intact = same_row(fresh[i], last[i]);
    if (intact) {
      // The last column again from all of its rows (it may have been read before the last of them were stored).
      entry.history.steps.pop_back();
      entry.history.fractions.pop_back();
      add_rows(entry.history, fresh);
      entry.last_rows = last_step_rows(fresh);
      return entry.history;
    }
  }
  const auto rows = store.routing(run_id);
  rows_read_ += static_cast<std::int64_t>(rows.size());
  entry.history = {};
  add_rows(entry.history, rows);
  entry.last_rows = last_step_rows(rows);
  return entry.history;
}

}  // namespace routelab
