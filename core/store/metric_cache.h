// A reader's copy of stored metric series that a later read brings up to date with the rows added since (a live
// run's dashboard reads the same long series every few seconds). No Qt, no Torch.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/store/run_store.h"

namespace routelab {

class MetricSeriesCache {
 public:
  /// Holds the series of at most `max_runs` runs (8 by default): reading one more forgets the least recently read
  /// run's.
  MetricSeriesCache() = default;
  explicit MetricSeriesCache(std::size_t max_runs) : max_runs_(max_runs) {}

  /// What store.metric(run, key) returns now, read from the rows after the cached series' last step (and that step
  /// again). Where the store no longer holds the cached last rows as they were (a resume truncated the run and
  /// trained again: its rows come back with other times), the series is read whole.
  const std::vector<MetricPoint>& series(const RunStore& store, std::int64_t run, const std::string& key);
  /// The runs with cached series.
  std::size_t runs() const { return last_read_.size(); }
  /// The rows read from the store so far (for tests: a refresh reads the new rows, not the series).
  std::int64_t rows_read() const { return rows_read_; }

 private:
  std::size_t max_runs_ = 8;
  std::map<std::pair<std::int64_t, std::string>, std::vector<MetricPoint>> series_;
  std::map<std::int64_t, std::uint64_t> last_read_;  ///< run -> when it was last read (a count of reads)
  std::uint64_t reads_ = 0;
  std::int64_t rows_read_ = 0;
};

}  // namespace routelab
