// Trailing moving average over the last N finite values (the "running average" smoothing TensorBoard users ask
// for, TB#5680): finite memory, no lag beyond the window. Non-finite inputs return NaN and leave the window alone,
// so a gap in the raw series stays a gap in the smoothed one.
#pragma once
#include <algorithm>
#include <cmath>
#include <deque>

namespace routelab {

class MovingAverage {
 public:
  explicit MovingAverage(int window = 10) { setWindow(window); }

  void setWindow(int window) {
    window_ = std::max(1, window);
    reset();
  }
  int window() const { return window_; }
  void reset() {
    values_.clear();
    sum_ = 0;
  }

  double add(double value) {
    if (!std::isfinite(value)) return std::nan("");
    values_.push_back(value);
    sum_ += value;
    if (static_cast<int>(values_.size()) > window_) {
      sum_ -= values_.front();
      values_.pop_front();
    }
    // Re-sum now and then so rounding errors of the running sum never accumulate over a long run.
    if (++adds_ % 4096 == 0) {
      sum_ = 0;
      for (double v : values_) sum_ += v;
    }
    return sum_ / static_cast<double>(values_.size());
  }

 private:
  int window_ = 10;
  std::deque<double> values_;
  double sum_ = 0;
  long long adds_ = 0;
};

}  // namespace routelab
