// Device checks happen before a run is created, so a missing GPU is a clear error and not a crash mid-run.
#include "core/util/device.h"

#include <algorithm>
#include <cstdlib>
#include <iomanip>
#include <sstream>
#include <thread>

#include <torch/cuda.h>
#include <torch/version.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <ATen/detail/CUDAHooksInterface.h>
#if ROUTELAB_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "core/util/cpu_allocator.h"
#include "core/util/cuda_build.h"
#include "core/util/errors.h"
#include "core/util/process.h"

namespace routelab {

torch::Device resolve_device(const std::string& name) {
  if (name == "cpu") return torch::Device(torch::kCPU);
  if (name.rfind("cuda", 0) == 0) {
    if (!torch::cuda::is_available())
      throw DeviceError("run.device: '" + name + "' requested but " +
                        (torch::cuda::device_count() == 0 ? std::string("no CUDA GPU is available to this LibTorch build")
                                                          : std::string("CUDA is unavailable")));
    try {
      torch::Device device(name);
      if (device.has_index() && device.index() >= static_cast<int>(torch::cuda::device_count()))
        throw DeviceError("run.device: '" + name + "' but only " + std::to_string(torch::cuda::device_count()) +
                          " CUDA device(s) exist");
      return device;
    } catch (const c10::Error&) {
      throw DeviceError("run.device: cannot parse '" + name + "' (expected cpu, cuda or cuda:N)");
    }
  }
  throw DeviceError("run.device: unknown device '" + name + "' (expected cpu, cuda or cuda:N)");
}

torch::Device resolve_stored_device(const std::string& name, std::string* note) {
  if (name.rfind("cuda", 0) == 0 && !torch::cuda::is_available()) {
    if (note)
      *note = "the run was trained on " + name + "; no CUDA GPU is available here, so it runs on the CPU";
    return torch::Device(torch::kCPU);
  }
  return resolve_device(name);
}

torch::Tensor to_host(const torch::Tensor& t, std::optional<torch::ScalarType> dtype) {
  RECORD_FUNCTION(kHostReadEvent, std::vector<c10::IValue>{});
  return t.to(torch::kCPU, dtype.value_or(t.scalar_type())).contiguous();
}

torch::Tensor copy_to_device(const torch::Tensor& t, const torch::Device& device) {
  if (!t.defined() || t.device() == device) return t;
  if (device.is_cuda() && t.is_cpu()) return t.pin_memory().to(device, /*non_blocking=*/true);
  return t.to(device);
}

#if ROUTELAB_WITH_CUDA
namespace {

c10::DeviceIndex cuda_index(const torch::Device& device) {
  return device.has_index() ? device.index() : c10::cuda::current_device();
}

}  // namespace
#endif

DeviceMemory device_memory(const torch::Device& device) {
  if (device.is_cpu()) {
    if (!cpu_cache_installed()) return {};
    const auto stats = cpu_cache_stats();
    return {stats.live_bytes, stats.peak_live_bytes};
  }
#if ROUTELAB_WITH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(cuda_index(device));
    const auto& all_pools = stats.allocated_bytes[0];  // StatType::AGGREGATE
    return {all_pools.current, all_pools.peak};
  }
#endif
  return {};
}

void reset_peak_memory(const torch::Device& device) {
  if (device.is_cpu()) reset_cpu_peak();
#if ROUTELAB_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(cuda_index(device));
#endif
}

AllocatorEvents allocator_events(const torch::Device& device) {
#if ROUTELAB_WITH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(cuda_index(device));
    return {stats.num_device_alloc, stats.num_device_free, stats.num_alloc_retries};
  }
#else
  (void)device;
#endif
  return {};
}

void configure_cuda_math(bool tf32, bool deterministic) {
  auto& context = at::globalContext();
  context.setAllowTF32CuBLAS(tf32);
  context.setAllowTF32CuDNN(tf32);
  if (deterministic) ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  context.setDeterministicAlgorithms(deterministic, /*warn_only=*/true);
  context.setDeterministicCuDNN(deterministic);
  if (deterministic) context.setBenchmarkCuDNN(false);
}

int configure_threads(int requested) {
  install_cpu_cache();  // large activations reused across steps instead of page-faulted afresh (cpu_allocator.h)
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int n = requested > 0 ? requested : std::max(1, cores - reserved_cores());
  if (const int cap = max_threads_from_environment(); cap > 0) n = std::min(n, cap);
  if (at::get_num_threads() != n) at::set_num_threads(n);
  return n;
}

ThreadGovernor::ThreadGovernor(int requested, double interval_s)
    : adaptive_(requested <= 0),
      available_(configure_threads(requested)),
      threads_(available_),
      interval_(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(interval_s))),
      last_at_(std::chrono::steady_clock::now()) {
  if (adaptive_) last_ = read_cpu_times();
}

bool ThreadGovernor::update() {
  if (!adaptive_ || !last_) return false;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_at_ < interval_) return false;
  const auto sample = read_cpu_times();
  if (!sample) return false;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const double others = other_busy_cores(*last_, *sample, cores);
  last_ = sample;
  last_at_ = now;
  const int target = threads_beside_load(available_, others);
  if (target == threads_) return false;
  std::ostringstream why;
  why << std::fixed << std::setprecision(1) << "Torch threads " << threads_ << " -> " << target
      << ": other processes kept " << others << " of " << cores << " cores busy";
  note_ = why.str();
  threads_ = target;
  at::set_num_threads(threads_);
  return true;
}

std::string cuda_version_string() {
  try {
    const long v = at::detail::getCUDAHooks().versionCUDART();  // e.g. 12040; throws without ATen_cuda
    return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
  } catch (const c10::Error&) {
    return "none (CPU-only LibTorch)";
  }
}

std::string torch_version_string() {
  std::string v = std::string("LibTorch ") + TORCH_VERSION;
  const auto cuda = cuda_version_string();
  if (torch::cuda::is_available())
    v += " (CUDA " + cuda + ", " + std::to_string(torch::cuda::device_count()) + " GPU)";
  else if (cuda.rfind("none", 0) == 0)
    v += " (CPU)";
  else
    v += " (CUDA " + cuda + " build, no GPU here: CPU)";
  return v;
}

std::string devices_available_string() {
  std::string s = "cpu (" + std::to_string(at::get_num_threads()) + " Torch threads)";
  const auto gpus = torch::cuda::is_available() ? torch::cuda::device_count() : 0;
  if (gpus > 0) s += ", " + std::to_string(gpus) + " CUDA GPU" + (gpus > 1 ? "s" : "") + " (cuda:0..)";
  return s;
}

}  // namespace routelab
