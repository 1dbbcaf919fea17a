// Curve arithmetic for comparisons: a curve re-sampled on a common grid (loss at matched FLOPs, tokens or wall
// time), mean +- std bands over seeds, cumulative sums (FLOPs per step -> cumulative FLOPs), and the Pareto front
// of quality versus cost. No Torch, no Qt.
#pragma once
#include <cstddef>
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
