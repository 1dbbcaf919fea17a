// A run's training-mode routing over time: the routed-token share of every layer at each logged step, read once
// from the store's routing rows (Torch-free). The dashboard's heat map, the "routing-history" figure and the
// training bars of "routed-layers" are drawn from it.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "core/store/run_store.h"
#include "core/util/thread_flag.h"

namespace routelab {

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

/// The run's routing rows as one column per logged step (rows arrive ordered by step, then layer). Through the
/// RoutingHistoryCache of a CachedRoutingReads alive on this thread, where there is one.
RoutingHistory read_routing_history(const RunStore& store, std::int64_t run_id);

/// The routing histories of the runs a reader reads again and again (a live run's dashboard: a row a routed layer
/// and logged step, 6.4 million for 200,000 logged steps of 32 layers): a read brings the cached history up to date
/// with the rows from its last step on, that step's rows read again. Where those no longer come back as they were
/// read (every field: a resume truncated the run and trained again, or the run lost them), the history is read whole.
/// Holds at most `max_runs` runs (8 by default; reading one more forgets the least recently read run's).
class RoutingHistoryCache {
 public:
  RoutingHistoryCache() = default;
  explicit RoutingHistoryCache(std::size_t max_runs) : max_runs_(max_runs) {}
  /// read_routing_history's history of `run_id`, from the rows stored since this cache's last read of it.
  const RoutingHistory& history(const RunStore& store, std::int64_t run_id);
  /// The rows read from the store so far (for tests: a read again reads the new rows, not the history).
  std::int64_t rows_read() const { return rows_read_; }

 private:
  struct Entry {
    RoutingHistory history;
    std::vector<RoutingRow> last_rows;  ///< the rows of the history's last step, as read
  };
  std::size_t max_runs_ = 8;
  std::map<std::int64_t, Entry> runs_;
  std::map<std::int64_t, std::uint64_t> last_read_;  ///< run -> when it was last read (a count of reads)
  std::uint64_t reads_ = 0;
  std::int64_t rows_read_ = 0;
};
/// While alive, read_routing_history on this thread reads through `cache` (the store reader around a dashboard's
/// read).
using CachedRoutingReads = ScopedThreadObject<RoutingHistoryCache>;

}  // namespace routelab
