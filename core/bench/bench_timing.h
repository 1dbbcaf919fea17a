// Timing helpers shared by the benchmarks: the device's queue drained before the clock is read, medians of reps.
#pragma once
#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include <torch/cuda.h>
#include <torch/types.h>

namespace routelab {

/// Waits for the device's queued work (a GPU runs asynchronously); nothing to wait for on the CPU.
inline void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.has_index() ? device.index() : -1);
}

/// Wall-clock milliseconds of f(), the device drained before and after.
inline double time_ms(const std::function<void()>& f, const torch::Device& device = torch::kCPU) {
  synchronize(device);
  const auto start = std::chrono::steady_clock::now();
  f();
  synchronize(device);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

/// The median (the mean of the middle two for an even count; 0 for none).
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace routelab
