// One thread per pair of elements (i, i + hd/2) of a row: both read once, both written once, the position's cos and
// sin read from the tables. Threads cover the pairs in a grid-stride loop.
#include "core/models/blocks/cuda/rope_kernels.h"
#include "core/util/cuda_launch.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace routelab::cuda {

namespace {

constexpr int kRopeThreads = 256;
constexpr std::int64_t kMaxRopeBlocks = 65535;

__device__ __forceinline__ float load(const float* p, std::int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* p, std::int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store(float* p, std::int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, std::int64_t i, float v) { p[i] = __float2bfloat16(v); }

template <typename T>
__global__ void __launch_bounds__(kRopeThreads)
    rope_kernel(const T* __restrict__ x, std::int64_t s0, std::int64_t s1, std::int64_t s2, std::int64_t H,
                std::int64_t Tn, std::int64_t hd, const float* __restrict__ cos, const float* __restrict__ sin,
                const std::int64_t* __restrict__ positions, bool per_sequence, float sign, T* __restrict__ out,
                std::int64_t pairs) {
  const std::int64_t half = hd / 2;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * kRopeThreads;
  for (std::int64_t n = static_cast<std::int64_t>(blockIdx.x) * kRopeThreads + threadIdx.x; n < pairs; n += step) {
    const std::int64_t i = n % half, row = n / half;  // row = (b H + h) T + t
    const std::int64_t t = row % Tn, bh = row / Tn, h = bh % H, b = bh / H;
    const std::int64_t p = positions[per_sequence ? b * Tn + t : t];
    const T* in = x + b * s0 + h * s1 + t * s2;
    const float lo = load(in, i), hi = load(in, i + half);
    const float* c = cos + p * hd;
    const float* s = sin + p * hd;
    T* o = out + row * hd;
    store(o, i, lo * c[i] - sign * hi * s[i]);
    store(o, i + half, hi * c[i + half] + sign * lo * s[i + half]);
  }
}

const char* launched() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

}  // namespace

const char* rope_rotate(const void* x, ElementType type, const std::int64_t* strides, std::int64_t B, std::int64_t H,
                        std::int64_t T, std::int64_t hd, const float* cos, const float* sin,
                        const std::int64_t* positions, bool per_sequence, float sign, void* out, void* stream) {
  const std::int64_t pairs = B * H * T * (hd / 2);
  if (pairs == 0) return "";
  const auto s = static_cast<cudaStream_t>(stream);
  std::int64_t blocks = (pairs + kRopeThreads - 1) / kRopeThreads;
  if (blocks > kMaxRopeBlocks) blocks = kMaxRopeBlocks;
  const auto grid = static_cast<unsigned>(blocks);
  if (type == ElementType::BFloat16)
    ROUTELAB_LAUNCH(grid, kRopeThreads, s, rope_kernel<__nv_bfloat16>)(
        static_cast<const __nv_bfloat16*>(x), strides[0], strides[1], strides[2], H, T, hd, cos, sin, positions,
        per_sequence, sign, static_cast<__nv_bfloat16*>(out), pairs);
  else
    ROUTELAB_LAUNCH(grid, kRopeThreads, s, rope_kernel<float>)(static_cast<const float*>(x), strides[0], strides[1],
                                                                strides[2], H, T, hd, cos, sin, positions,
                                                                per_sequence, sign, static_cast<float*>(out), pairs);
  return launched();
}

}  // namespace routelab::cuda
