#include "core/util/cpu_allocator.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/version.h>

// LibTorch 2.3 made Allocator::allocate non-const and added the pure virtual copy_data.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define ROUTELAB_ALLOCATE_CONST
#define ROUTELAB_ALLOCATOR_COPY_DATA 1
#else
#define ROUTELAB_ALLOCATE_CONST const
#define ROUTELAB_ALLOCATOR_COPY_DATA 0
#endif

namespace routelab {
namespace {

constexpr std::size_t kMinCached = std::size_t{1} << 20;  // below 1 MiB glibc's own free lists are fast
constexpr std::size_t kGranule = std::size_t{1} << 16;    // sizes rounded up to 64 KiB

class CachingCpuAllocator final : public at::Allocator {
 public:
  at::DataPtr allocate(std::size_t n) ROUTELAB_ALLOCATE_CONST override {
    void* p = n < kMinCached ? c10::alloc_cpu(n) : take((n + kGranule - 1) / kGranule * kGranule);
    return {p, p, &release, at::Device(at::DeviceType::CPU)};
  }
#if ROUTELAB_ALLOCATOR_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif
  /// ATen's raw_allocate()/raw_deallocate() pair (scratch buffers of some kernels) frees through this.
  at::DeleterFnPtr raw_deleter() const override { return &release; }

  void set_cap(std::size_t cap) {
    std::lock_guard lock(mutex_);
    cap_ = cap;
    trim_locked(cap_);
  }
  void trim(std::size_t keep) {
    std::lock_guard lock(mutex_);
    trim_locked(keep);
  }
  CpuCacheStats stats() const {
    std::lock_guard lock(mutex_);
    return {static_cast<std::int64_t>(cached_), hits_, misses_, static_cast<std::int64_t>(live_),
            static_cast<std::int64_t>(peak_live_)};
  }
  void reset_peak() {
    std::lock_guard lock(mutex_);
    peak_live_ = live_;
  }

  static CachingCpuAllocator& instance() {
    static auto* a = new CachingCpuAllocator();  // never destroyed: tensors may outlive static destructors
    return *a;
  }

 private:
  static void release(void* p) { instance().put(p); }

  /// A cached block of at least `size` and at most 5/4 of it, else a new one.
  void* take(std::size_t size) const {
    {
      std::lock_guard lock(mutex_);
      const auto it = free_.lower_bound(size);
      if (it != free_.end() && it->first <= size + size / 4) {
        void* p = it->second;
        cached_ -= it->first;
        note_live(it->first);
        free_.erase(it);
        ++hits_;
        return p;
      }
      ++misses_;
    }
    void* p = c10::alloc_cpu(size);
    std::lock_guard lock(mutex_);
    sizes_[p] = size;
    note_live(size);
    return p;
  }

  void note_live(std::size_t size) const {
    live_ += size;
    peak_live_ = std::max(peak_live_, live_);
  }

  /// A block this allocator handed out: large ones are cached, small ones (not in sizes_) go back to the system.
  void put(void* p) const {
    if (p == nullptr) return;
    std::unique_lock lock(mutex_);
    const auto known = sizes_.find(p);
    if (known == sizes_.end()) {
      lock.unlock();
      c10::free_cpu(p);
      return;
    }
    const std::size_t size = known->second;
    live_ -= size;
    if (size > cap_) {  // never fits: back to the system
      sizes_.erase(p);
      lock.unlock();
      c10::free_cpu(p);
      return;
    }
    free_.emplace(size, p);
    cached_ += size;
    if (cached_ > cap_) trim_locked(cap_);
  }

  /// Frees the largest cached blocks until at most `keep` bytes stay cached.
  void trim_locked(std::size_t keep) const {
    while (cached_ > keep && !free_.empty()) {
      const auto it = std::prev(free_.end());
      cached_ -= it->first;
      sizes_.erase(it->second);
      c10::free_cpu(it->second);
      free_.erase(it);
    }
  }

  mutable std::mutex mutex_;
  mutable std::multimap<std::size_t, void*> free_;        // size -> cached block
  mutable std::unordered_map<void*, std::size_t> sizes_;  // every live or cached large block
  mutable std::size_t cached_ = 0;
  mutable std::size_t live_ = 0, peak_live_ = 0;
  mutable std::int64_t hits_ = 0, misses_ = 0;
  std::size_t cap_ = 0;
};

std::size_t default_cap() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const std::size_t physical = pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page)
                                                     : std::size_t{4} << 30;
  return std::min(physical / 8, std::size_t{4} << 30);
}

}  // namespace

void install_cpu_cache(std::int64_t cap_bytes) {
  std::size_t cap = cap_bytes > 0 ? static_cast<std::size_t>(cap_bytes) : default_cap();
  if (const char* env = std::getenv("ROUTELAB_CPU_CACHE_MB")) {
    const long long mb = std::atoll(env);
    if (mb <= 0) return;  // opted out: LibTorch's allocator stays
    cap = static_cast<std::size_t>(mb) << 20;
  }
  auto& allocator = CachingCpuAllocator::instance();
  allocator.set_cap(cap);
  static const bool installed = [&] {
    c10::SetCPUAllocator(&allocator, /*priority=*/1);
    return true;
  }();
  (void)installed;
}

bool cpu_cache_installed() { return c10::GetCPUAllocator() == &CachingCpuAllocator::instance(); }

void release_cpu_cache() { CachingCpuAllocator::instance().trim(0); }

CpuCacheStats cpu_cache_stats() { return CachingCpuAllocator::instance().stats(); }

void reset_cpu_peak() { CachingCpuAllocator::instance().reset_peak(); }

}  // namespace routelab
