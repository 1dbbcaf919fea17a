// Device selection and CPU threading for Torch.
#pragma once
#include <chrono>
#include <optional>
#include <string>

#include <torch/types.h>

#include "core/util/cpu_load.h"

namespace routelab {

/// "cpu", "cuda" or "cuda:N". Asking for CUDA where LibTorch has no CUDA or no GPU is a DeviceError.
torch::Device resolve_device(const std::string& name);

/// The device a stored run reopens on (generate, eval, profile, the GUI): resolve_device(name), except that a run
/// trained on CUDA opens on the CPU where no GPU is available, with `note` (when given) saying so.
torch::Device resolve_stored_device(const std::string& name, std::string* note = nullptr);

/// CUDA matmul and cuDNN precision for fp32 work: TF32 tensor cores when `tf32` (train.tf32). Process-wide, as in
/// PyTorch (torch.backends.cuda.matmul.allow_tf32); only called for CUDA devices, so CPU arithmetic never changes.
/// `deterministic` (train.deterministic): torch.use_deterministic_algorithms(True, warn_only=True) with cuBLAS's
/// fixed workspace (CUBLAS_WORKSPACE_CONFIG=:4096:8 unless set; it must precede the first cuBLAS call), deterministic
/// cuDNN and no cuDNN autotuning: reruns and resumes repeat bit for bit, where every op has a deterministic kernel
/// (those without one warn once).
void configure_cuda_math(bool tf32, bool deterministic = false);

/// `t` on `device`. A CPU tensor bound for a GPU is staged in pinned memory and copied asynchronously, so the host
/// goes on queueing work (PyTorch's pin_memory + non_blocking); CUDA's caching host allocator keeps the staging
/// buffer alive until the copy is done.
torch::Tensor copy_to_device(const torch::Tensor& t, const torch::Device& device);

/// Where a model reads a result back (on a GPU the host waits for the device there): profiles show it, and the tests
/// that check a forward captured as a CUDA graph reads nothing back catch it by this name (on the CPU such a copy
/// costs nothing and is otherwise invisible).
inline constexpr const char* kHostReadEvent = "routelab::host_read";
/// `t` copied to the host as `dtype` (its own when none), contiguous: every read back in core/models goes through it.
torch::Tensor to_host(const torch::Tensor& t, std::optional<torch::ScalarType> dtype = std::nullopt);

/// Bytes held by tensors on a device: now, and the most since reset_peak_memory. On CUDA, PyTorch's
/// memory_allocated / max_memory_allocated (a CUDA LibTorch); on the CPU, the large blocks (>= 1 MiB) of the caching
/// CPU allocator. -1 where not tracked (a CPU with ROUTELAB_CPU_CACHE_MB=0, CUDA without a CUDA build).
struct DeviceMemory {
  std::int64_t allocated = -1, peak = -1;
};
DeviceMemory device_memory(const torch::Device& device);
/// Starts `device`'s peak count again from the bytes allocated now.
void reset_peak_memory(const torch::Device& device);
/// What a CUDA device's caching allocator did since the process started (PyTorch's memory_stats): blocks taken from
/// the device and returned to it (cudaMalloc, cudaFree: a free waits for the whole device), and allocations retried
/// after the cache was emptied to make room (each such retry synchronises the device first). Zero elsewhere.
struct AllocatorEvents {
  std::int64_t device_allocs = 0, device_frees = 0, retries = 0;
};
AllocatorEvents allocator_events(const torch::Device& device);

/// Sets Torch's intra-op threads: `requested` > 0, else every core (std::thread::hardware_concurrency) but the
/// reserved ones (reserve_cores), at most ROUTELAB_MAX_THREADS; and installs the caching CPU allocator
/// (core/util/cpu_allocator.h). Returns the count in use.
int configure_threads(int requested = 0);

/// Torch's threads for one run, following the machine's load while it trains. A run that asked for every core
/// (`requested` 0) samples the other processes' CPU use at step boundaries, at most once per `interval_s`, and runs
/// threads_beside_load (core/util/cpu_load.h) threads: beside one busy process on two cores it drops to one thread
/// instead of spinning two against it, and it returns to every core when the machine is free again. An explicit
/// thread count is the user's and never changes. Call from the thread that runs the model (OpenMP's count is per
/// calling thread).
class ThreadGovernor {
 public:
  explicit ThreadGovernor(int requested, double interval_s = 1.0);
  int threads() const { return threads_; }
  /// At a step boundary. True when the thread count changed; note() then says from what to what and why.
  bool update();
  const std::string& note() const { return note_; }

 private:
  bool adaptive_ = false;
  int available_ = 1, threads_ = 1;
  std::chrono::steady_clock::duration interval_{};
  std::chrono::steady_clock::time_point last_at_{};
  std::optional<CpuTimes> last_;  ///< the previous sample; none where /proc cannot be read
  std::string note_;
};

/// The CUDA runtime this LibTorch was built with ("12.4"), or "none (CPU-only LibTorch)".
std::string cuda_version_string();
/// "LibTorch 2.11.0 (CUDA 13.0, 1 GPU)": the versions recorded with every run.
std::string torch_version_string();
/// What this process can run on: "cpu (N Torch threads)" plus the CUDA GPUs LibTorch sees.
std::string devices_available_string();

}  // namespace routelab
