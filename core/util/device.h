// Device selection and CPU threading for Torch.
#pragma once
#include <string>

#include <torch/types.h>

namespace routelab {

/// "cpu", "cuda" or "cuda:N". Asking for CUDA where LibTorch has no CUDA or no GPU is a DeviceError.
torch::Device resolve_device(const std::string& name);

/// Sets Torch's intra-op threads: `requested` > 0, else every core (std::thread::hardware_concurrency), and
/// installs the caching CPU allocator (core/util/cpu_allocator.h). Returns the count in use.
int configure_threads(int requested = 0);

/// The CUDA runtime this LibTorch was built with ("12.4"), or "none (CPU-only LibTorch)".
std::string cuda_version_string();
/// What this process can run on: "cpu (N Torch threads)" plus the CUDA GPUs LibTorch sees.
std::string devices_available_string();

}  // namespace routelab
