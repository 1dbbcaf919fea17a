// RouteLab's CUDA kernels on the CPU, for the kernel suite (test_cuda_kernels): the kernel sources are compiled
// unchanged as C++ against these headers (cuda_runtime.h and cuda_bf16.h here stand in for the toolkit's), and each
// launch runs its blocks one after another, every thread of a block as a thread of its own, with __syncthreads as a
// barrier of the block and warp shuffles exchanged through a barrier of the warp. What it checks: indexing, bounds,
// reductions and arithmetic of the kernels as written. What it cannot: nvcc's code, the GPU's memory model, speed.
#pragma once
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#ifndef ROUTELAB_CUDA_EMULATION  // the kernel suite's target defines it, so core/util/cuda_launch.h sees it too
#error "compile the emulated kernels with ROUTELAB_CUDA_EMULATION defined"
#endif
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static  // blocks run one at a time, so one static array is the block's shared memory

struct dim3 {
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  unsigned x, y, z;
};

using cudaStream_t = struct CUstream_emulated*;
enum cudaError_t { cudaSuccess = 0 };
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t) { return "no error"; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

namespace routelab::emulation {

struct ThreadContext {
  dim3 thread, block, block_dim, grid_dim;
  std::barrier<>* block_barrier = nullptr;
  std::barrier<>* warp_barrier = nullptr;
  std::uint64_t* warp_slots = nullptr;  ///< one exchange slot per lane of this thread's warp
  unsigned lane = 0;
};

inline thread_local ThreadContext* t_context = nullptr;

inline ThreadContext& context() {
  if (!t_context) throw std::logic_error("CUDA emulation: a kernel built-in used outside a launch");
  return *t_context;
}

/// kernel over `grid` blocks of `block` threads; returns the callable that takes the kernel's arguments. The block's
/// threads are started once and run the blocks in turn, meeting at the block's barrier between two blocks.
template <typename... Params>
auto launch(dim3 grid, dim3 block, void (*kernel)(Params...)) {
  return [=](auto... args) {
    const unsigned n = block.x * block.y * block.z;
    if (n == 0 || n % 32 != 0) throw std::logic_error("CUDA emulation: blocks of whole warps only");
    std::barrier<> block_barrier(n);
    std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
    for (unsigned w = 0; w < n / 32; ++w) warp_barriers.push_back(std::make_unique<std::barrier<>>(32));
    std::vector<std::uint64_t> slots(n);
    std::vector<std::thread> threads;
    threads.reserve(n);
    for (unsigned i = 0; i < n; ++i)
      threads.emplace_back([&, i] {
        ThreadContext c;
        c.thread = dim3(i % block.x, i / block.x % block.y, i / (block.x * block.y));
        c.block_dim = block;
        c.grid_dim = grid;
        c.block_barrier = &block_barrier;
        c.warp_barrier = warp_barriers[i / 32].get();
        c.warp_slots = slots.data() + i / 32 * 32;
        c.lane = i % 32;
        t_context = &c;
        for (unsigned gz = 0; gz < grid.z; ++gz)
          for (unsigned gy = 0; gy < grid.y; ++gy)
            for (unsigned gx = 0; gx < grid.x; ++gx) {
              c.block = dim3(gx, gy, gz);
              kernel(static_cast<Params>(args)...);
              block_barrier.arrive_and_wait();  // the block's shared memory is the next block's
            }
        t_context = nullptr;
      });
    for (auto& t : threads) t.join();
  };
}

template <typename T>
T exchange(T value, unsigned source_lane) {
  static_assert(sizeof(T) <= sizeof(std::uint64_t));
  auto& c = context();
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  c.warp_slots[c.lane] = bits;
  c.warp_barrier->arrive_and_wait();
  T out;
  std::memcpy(&out, &c.warp_slots[source_lane < 32 ? source_lane : c.lane], sizeof(T));
  c.warp_barrier->arrive_and_wait();  // nobody overwrites a slot before every lane has read
  return out;
}

}  // namespace routelab::emulation

#define threadIdx (::routelab::emulation::context().thread)
#define blockIdx (::routelab::emulation::context().block)
#define blockDim (::routelab::emulation::context().block_dim)
#define gridDim (::routelab::emulation::context().grid_dim)

inline void __syncthreads() { ::routelab::emulation::context().block_barrier->arrive_and_wait(); }

template <typename T>
T __shfl_xor_sync(unsigned /*mask*/, T value, int lane_mask) {
  return ::routelab::emulation::exchange(value, ::routelab::emulation::context().lane ^ static_cast<unsigned>(lane_mask));
}

template <typename T>
T __shfl_down_sync(unsigned /*mask*/, T value, unsigned delta) {
  return ::routelab::emulation::exchange(value, ::routelab::emulation::context().lane + delta);
}
