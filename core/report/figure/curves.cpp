#include "core/report/figure/curves.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace routelab {

std::vector<double> interpolate(const Curve& curve, const std::vector<double>& grid) {
  const auto nan = std::numeric_limits<double>::quiet_NaN();
  if (curve.x.size() != curve.y.size()) throw std::invalid_argument("interpolate: x and y differ in length");
  if (!std::is_sorted(curve.x.begin(), curve.x.end()))
    throw std::invalid_argument("interpolate: x must be non-decreasing");
  std::vector<double> out(grid.size(), nan);
  if (curve.x.empty()) return out;
  for (std::size_t i = 0; i < grid.size(); ++i) {
    const double g = grid[i];
    if (!(g >= curve.x.front() && g <= curve.x.back())) continue;
    // The last point with x <= g, then its successor (equal x values keep the last y).
    const auto hi = std::upper_bound(curve.x.begin(), curve.x.end(), g);
    const auto k = static_cast<std::size_t>(hi - curve.x.begin()) - 1;
    if (k + 1 >= curve.x.size() || curve.x[k] == g) {
      out[i] = curve.y[k];
      continue;
    }
    const double t = (g - curve.x[k]) / (curve.x[k + 1] - curve.x[k]);
    out[i] = curve.y[k] + t * (curve.y[k + 1] - curve.y[k]);
  }
  return out;
}

CumulativeFlops::CumulativeFlops(double dense_step_flops, std::vector<std::int64_t> ratio_steps,
                                 std::vector<double> ratios)
    : dense_step_flops_(dense_step_flops), steps_(std::move(ratio_steps)), ratios_(std::move(ratios)) {
  if (steps_.size() != ratios_.size()) throw std::invalid_argument("CumulativeFlops: steps and ratios differ in length");
  if (!std::is_sorted(steps_.begin(), steps_.end())) throw std::invalid_argument("CumulativeFlops: steps must ascend");
  // Segment 0 covers steps 1 .. steps_[1] - 1, segment i (> 0) steps steps_[i] .. steps_[i + 1] - 1.
  segment_start_.assign(ratios_.size(), 0.0);
  for (std::size_t i = 1; i < ratios_.size(); ++i) {
    const double from = i == 1 ? 1.0 : static_cast<double>(steps_[i - 1]);
    const double steps = std::max(0.0, static_cast<double>(steps_[i]) - from);
    segment_start_[i] = segment_start_[i - 1] + steps * ratios_[i - 1] * dense_step_flops_;
  }
}

double CumulativeFlops::at(std::int64_t step) const {
  if (step <= 0) return 0;
  if (ratios_.empty()) return static_cast<double>(step) * dense_step_flops_;
  // The last segment starting at or before `step` (segment 0 also holds the steps before its first ratio).
  const auto after = std::upper_bound(steps_.begin() + 1, steps_.end(), step);
  const auto i = static_cast<std::size_t>(after - steps_.begin()) - 1;
  const double from = i == 0 ? 1.0 : static_cast<double>(steps_[i]);
  return segment_start_[i] + (static_cast<double>(step) - from + 1.0) * ratios_[i] * dense_step_flops_;
}

std::vector<double> make_grid(double lo, double hi, std::size_t count, bool log) {
  std::vector<double> grid(count);
  if (count == 1) grid[0] = lo;
  for (std::size_t i = 0; count > 1 && i < count; ++i) {
    const double t = static_cast<double>(i) / static_cast<double>(count - 1);
    grid[i] = log ? std::exp(std::log(lo) + t * (std::log(hi) - std::log(lo))) : lo + t * (hi - lo);
  }
  return grid;
}

std::vector<double> cumulative(const std::vector<double>& values) {
  std::vector<double> out(values.size());
  std::partial_sum(values.begin(), values.end(), out.begin());
  return out;
}

Band mean_band(const std::vector<Curve>& curves, const std::vector<double>& grid) {
  const auto nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::vector<double>> sampled;
  sampled.reserve(curves.size());
  for (const auto& curve : curves) sampled.push_back(interpolate(curve, grid));
  Band band{grid, std::vector<double>(grid.size(), nan), std::vector<double>(grid.size(), nan),
            std::vector<int>(grid.size(), 0)};
  for (std::size_t i = 0; i < grid.size(); ++i) {
    double sum = 0;
    int n = 0;
    for (const auto& s : sampled)
      if (std::isfinite(s[i])) {
        sum += s[i];
        ++n;
      }
    band.count[i] = n;
    if (n == 0) continue;
    const double mean = sum / n;
    double squares = 0;
    for (const auto& s : sampled)
      if (std::isfinite(s[i])) squares += (s[i] - mean) * (s[i] - mean);
    band.mean[i] = mean;
    band.std[i] = n > 1 ? std::sqrt(squares / (n - 1)) : 0.0;
  }
  return band;
}

std::vector<std::size_t> pareto_front(const std::vector<TradeoffPoint>& points, bool higher_quality_is_better) {
  const double sign = higher_quality_is_better ? -1.0 : 1.0;  // compare "loss-like" quality: lower is better
  std::vector<std::size_t> front;
  for (std::size_t i = 0; i < points.size(); ++i) {
    bool dominated = false;
    for (std::size_t j = 0; j < points.size() && !dominated; ++j) {
      if (i == j) continue;
      const double qi = sign * points[i].quality, qj = sign * points[j].quality;
      const bool no_worse = points[j].cost <= points[i].cost && qj <= qi;
      const bool better = points[j].cost < points[i].cost || qj < qi;
      dominated = no_worse && better;
    }
    if (!dominated) front.push_back(i);
  }
  std::sort(front.begin(), front.end(), [&](std::size_t a, std::size_t b) {
    return points[a].cost < points[b].cost || (points[a].cost == points[b].cost && a < b);
  });
  return front;
}

}  // namespace routelab
