// Device checks happen before a run is created, so a missing GPU is a clear error and not a crash mid-run.
#include "core/util/device.h"

#include <cstdlib>
#include <thread>

#include <torch/cuda.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include "core/util/cpu_allocator.h"
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

torch::Tensor copy_to_device(const torch::Tensor& t, const torch::Device& device) {
  if (!t.defined() || t.device() == device) return t;
  if (device.is_cuda() && t.is_cpu()) return t.pin_memory().to(device, /*non_blocking=*/true);
  return t.to(device);
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

std::string cuda_version_string() {
  try {
    const long v = at::detail::getCUDAHooks().versionCUDART();  // e.g. 12040; throws without ATen_cuda
    return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
  } catch (const c10::Error&) {
    return "none (CPU-only LibTorch)";
  }
}

std::string devices_available_string() {
  std::string s = "cpu (" + std::to_string(at::get_num_threads()) + " Torch threads)";
  const auto gpus = torch::cuda::is_available() ? torch::cuda::device_count() : 0;
  if (gpus > 0) s += ", " + std::to_string(gpus) + " CUDA GPU" + (gpus > 1 ? "s" : "") + " (cuda:0..)";
  return s;
}

}  // namespace routelab
