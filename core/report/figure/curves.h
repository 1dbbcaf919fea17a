// Curve arithmetic for comparisons: a curve re-sampled on a common grid (loss at matched FLOPs, tokens or wall
// time), mean +- std bands over seeds, cumulative sums (FLOPs per step -> cumulative FLOPs), and the Pareto front
// of quality versus cost. No Torch, no Qt.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace routelab {

/// A series of (x, y) points; x must be non-decreasing (steps, tokens, cumulative FLOPs, wall time).
struct Curve {
  std::vector<double> x, y;
};

/// Linear interpolation of `curve` at every grid point; NaN outside [x.front(), x.back()] (no extrapolation)
/// and for an empty curve. Equal x values keep the last y. Throws std::invalid_argument when x decreases or the
/// sizes differ.
std::vector<double> interpolate(const Curve& curve, const std::vector<double>& grid);

/// `count` points from `lo` to `hi`, evenly spaced, or log-spaced when `log` (lo > 0).
std::vector<double> make_grid(double lo, double hi, std::size_t count, bool log = false);

/// The running sum of `values` (cumulative FLOPs from per-step FLOPs).
std::vector<double> cumulative(const std::vector<double>& values);

/// Cumulative training FLOPs by step from sparse measurements: step s costs `dense_step_flops` times the FLOPs
/// ratio logged at the last step <= s (the first ratio also covers the steps before it). `ratio_steps` must be
/// ascending and the same length as `ratios`; with no ratio every step costs `dense_step_flops`.
class CumulativeFlops {
 public:
  CumulativeFlops() = default;
  CumulativeFlops(double dense_step_flops, std::vector<std::int64_t> ratio_steps, std::vector<double> ratios);
  /// The sum over steps 1..step (0 for step <= 0).
  double at(std::int64_t step) const;
  double dense_step_flops() const { return dense_step_flops_; }

 private:
  double dense_step_flops_ = 0;
  std::vector<std::int64_t> steps_;
  std::vector<double> ratios_, segment_start_;  ///< segment_start_[i]: the sum over the steps before segment i
};

/// Mean and sample std (n - 1) across curves at each grid point, over the curves defined there (NaN where none;
/// std 0 where one). `count` holds how many curves contributed at each point.
struct Band {
  std::vector<double> x, mean, std;
  std::vector<int> count;
};
Band mean_band(const std::vector<Curve>& curves, const std::vector<double>& grid);

/// A point of a quality-versus-cost scatter (e.g. FLOPs ratio vs validation loss). Lower is better on both
/// axes unless told otherwise.
struct TradeoffPoint {
  double cost = 0;
  double quality = 0;
};
/// Indices of the points not dominated by any other (no other point is at least as good on both axes and better
/// on one), sorted by cost. `higher_quality_is_better` for accuracy-like metrics.
std::vector<std::size_t> pareto_front(const std::vector<TradeoffPoint>& points, bool higher_quality_is_better = false);

}  // namespace routelab
