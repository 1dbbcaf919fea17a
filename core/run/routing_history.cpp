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

/// Adds a row's share (rows come ordered by step, then layer; their steps at or after the history's last one).
void add_row(RoutingHistory& history, std::int64_t step, int layer, double fraction) {
  if (history.steps.empty() || history.steps.back() != step) {
    history.steps.push_back(step);
    const auto width = history.fractions.empty() ? 0 : history.fractions.back().size();
    history.fractions.emplace_back().reserve(width);  // as wide as the step before, grown once at most
  }
  if (layer < 0) return;
  auto& column = history.fractions.back();
  const auto l = static_cast<std::size_t>(layer);
  if (column.size() <= l) column.resize(l + 1, std::numeric_limits<double>::quiet_NaN());
  column[l] = fraction;
}

/// The run's history from its rows' shares alone (the fastest whole read).
RoutingHistory read_whole(const RunStore& store, std::int64_t run_id, std::int64_t* rows = nullptr) {
  RoutingHistory history;
  store.each_routed_fraction(run_id, -1, [&](std::int64_t step, int layer, double fraction) {
    add_row(history, step, layer, fraction);
    if (rows) ++*rows;
  });
  return history;
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
  return read_whole(store, run_id);
}

const RoutingHistory& RoutingHistoryCache::history(const RunStore& store, std::int64_t run_id) {
  last_read_[run_id] = ++reads_;
  forget_least_recent(last_read_, max_runs_, [this](std::int64_t run) { runs_.erase(run); });
  Entry& entry = runs_[run_id];
  if (!entry.history.empty()) {
    // The last step's rows again, with those after them: intact where they come back as they were read.
    const std::int64_t last = entry.history.steps.back();
    const auto fresh = store.routing(run_id, last - 1);  // usually a few steps' rows
    rows_read_ += static_cast<std::int64_t>(fresh.size());
    bool intact = fresh.size() >= entry.last_rows.size();
    for (std::size_t i = 0; intact && i < entry.last_rows.size(); ++i) intact = same_row(fresh[i], entry.last_rows[i]);
    if (intact) {
      // The last column again from all of its rows (it may have been read before the last of them were stored).
      entry.history.steps.pop_back();
      entry.history.fractions.pop_back();
      for (const RoutingRow& row : fresh) add_row(entry.history, row.step, row.layer, row.routed_fraction);
      entry.last_rows = last_step_rows(fresh);
      return entry.history;
    }
  }
  entry.history = read_whole(store, run_id, &rows_read_);
  // The last step's whole rows, which the next read compares (the history keeps their shares only); rows stored
  // since the first query are left to the next read.
  entry.last_rows.clear();
  if (!entry.history.empty()) {
    const std::int64_t last = entry.history.steps.back();
    for (const RoutingRow& row : store.routing(run_id, last - 1))
      if (row.step == last) entry.last_rows.push_back(row);
  }
  return entry.history;
}

}  // namespace routelab
