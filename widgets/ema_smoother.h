// Debiased exponential moving average (the "EMA, debiased" smoothing of TensorBoard/W&B): the running mean
// is divided by (1 - weight^n) so the first points are not pulled towards zero. Non-finite inputs are skipped.
#pragma once
#include <algorithm>
#include <cmath>

namespace routelab {

class EmaSmoother {
 public:
  /// weight in [0, 1): 0 = no smoothing, 0.99 = heavy.
  explicit EmaSmoother(double weight = 0.9) { setWeight(weight); }

  void setWeight(double weight) {
    weight_ = std::isfinite(weight) ? std::clamp(weight, 0.0, 0.999) : 0.0;
    reset();
  }
  double weight() const { return weight_; }
  void reset() {
    biased_ = 0;
    decay_ = 1;
  }

  /// Feeds one value and returns the smoothed value. A non-finite value leaves the state alone and returns
  /// NaN, so the smoothed line shows the same gap as the raw one instead of hiding a divergence.
  double add(double value) {
    if (!std::isfinite(value)) return std::nan("");
    biased_ = weight_ * biased_ + (1 - weight_) * value;
    decay_ *= weight_;
    return current();
  }
  /// The debiased value after the finite values fed so far (NaN before the first).
  double current() const { return decay_ < 1 ? biased_ / (1 - decay_) : std::nan(""); }

 private:
  double weight_ = 0.9;
  double biased_ = 0;
  double decay_ = 1;  ///< weight^n for the n finite values fed
};

}  // namespace routelab
