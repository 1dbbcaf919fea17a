// The debiased exponential moving average of TensorBoard's and W&B's "EMA, debiased" smoothing, for the figures'
// smoothed curves and the divergence alert of run health (Torch-free).
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace routelab {

/// s_t = w s_{t-1} + (1 - w) y_t over the finite values fed, shown as s_t / (1 - w^t) so the first points are not
/// pulled towards zero. A non-finite value leaves the state alone and smooths to NaN, so a gap in the raw curve
/// stays a gap (a divergence is never hidden).
class DebiasedEma {
 public:
  /// `weight` on the past, in [0, 1): 0 is no smoothing, 0.99 heavy. Clamped to [0, 0.999]; NaN means 0.
  explicit DebiasedEma(double weight = 0.9) : weight_(std::isfinite(weight) ? std::clamp(weight, 0.0, 0.999) : 0.0) {}

  double weight() const { return weight_; }
  void reset() { biased_ = 0, decay_ = 1; }

  /// Feeds one value; returns the smoothed value (NaN for a non-finite value).
  double add(double value) {
    if (!std::isfinite(value)) return std::numeric_limits<double>::quiet_NaN();
    biased_ = weight_ * biased_ + (1 - weight_) * value;
    decay_ *= weight_;
    return current();
  }
  /// After the finite values fed so far; NaN before the first.
  double current() const {
    return decay_ < 1 ? biased_ / (1 - decay_) : std::numeric_limits<double>::quiet_NaN();
  }

 private:
  double weight_;
  double biased_ = 0;
  double decay_ = 1;  ///< weight^n for the n finite values fed
};

/// The smoothed series of `y` (same length; NaN where y is not finite).
inline std::vector<double> debiased_ema(const std::vector<double>& y, double weight) {
  DebiasedEma ema(weight);
  std::vector<double> out;
  out.reserve(y.size());
  for (const double v : y) out.push_back(ema.add(v));
  return out;
}

}  // namespace routelab
