#include "core/store/metric_cache.h"

#include <cmath>
#include <iterator>

#include "core/util/recent_runs.h"

namespace routelab {
namespace {

/// The same stored row: step, time and value (NaN equal to NaN: stored as the text 'nan').
bool same_row(const MetricPoint& a, const MetricPoint& b) {
  const auto same = [](double x, double y) { return x == y || (std::isnan(x) && std::isnan(y)); };
  return a.step == b.step && same(a.wall_time, b.wall_time) && same(a.value, b.value);
}

}  // namespace

const std::vector<MetricPoint>& MetricSeriesCache::series(const RunStore& store, std::int64_t run,
                                                          const std::string& key) {
  last_read_[run] = ++reads_;
  forget_least_recent(last_read_, max_runs_, [this](std::int64_t gone) {
    for (auto it = series_.begin(); it != series_.end();)
      it = it->first.first == gone ? series_.erase(it) : std::next(it);
  });
  auto& cached = series_[{run, key}];
  if (!cached.empty()) {
    // The cached rows of the last step, read again with everything after them (rows in step, then insertion order).
    const auto last = cached.back().step;
    auto first_of_last = cached.end();
    while (first_of_last != cached.begin() && std::prev(first_of_last)->step == last) --first_of_last;
    const auto tail = static_cast<std::size_t>(cached.end() - first_of_last);
    auto fresh = store.metric(run, key, last - 1);
    rows_read_ += static_cast<std::int64_t>(fresh.size());
    bool intact = fresh.size() >= tail;
    for (std::size_t i = 0; intact && i < tail; ++i) intact = same_row(fresh[i], *(first_of_last + i));
    if (intact) {
      cached.insert(cached.end(), fresh.begin() + static_cast<std::ptrdiff_t>(tail), fresh.end());
      return cached;
    }
  }
  cached = store.metric(run, key);
  rows_read_ += static_cast<std::int64_t>(cached.size());
  return cached;
}

}  // namespace routelab
