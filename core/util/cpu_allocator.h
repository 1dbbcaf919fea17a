// A caching allocator for LibTorch's CPU tensors. Training allocates the same large activations and gradients
// every step; glibc serves blocks of 32 MiB and more with a fresh mmap each time, so every step page-faults and
// zero-fills them again (about 300 ms of a 2 s GPT step here). Large blocks are kept on release and handed out
// again for a request of nearly the same size, as PyTorch's CUDA allocator does; small ones go to the default.
#pragma once
#include <cstddef>
#include <cstdint>

namespace routelab {

struct CpuCacheStats {
  std::int64_t cached_bytes = 0;    ///< held for reuse now
  std::int64_t hits = 0, misses = 0;  ///< large allocations served from the cache / from the system
  std::int64_t live_bytes = 0;        ///< large blocks (>= 1 MiB) held by tensors now
  std::int64_t peak_live_bytes = 0;   ///< the most live_bytes reached since install or reset_cpu_peak()
};

/// Installs the caching allocator as LibTorch's CPU allocator (once per process; later calls only update the
/// cap). `cap_bytes` bounds what is held for reuse (0: 1/8 of physical memory, at most 4 GiB); the environment
/// variable ROUTELAB_CPU_CACHE_MB overrides it, and ROUTELAB_CPU_CACHE_MB=0 leaves LibTorch's allocator alone.
void install_cpu_cache(std::int64_t cap_bytes = 0);
/// Whether the caching allocator is LibTorch's CPU allocator.
bool cpu_cache_installed();
/// Returns every cached block to the system.
void release_cpu_cache();
CpuCacheStats cpu_cache_stats();
/// Starts peak_live_bytes again from the bytes live now.
void reset_cpu_peak();

}  // namespace routelab
