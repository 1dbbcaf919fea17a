// One thread block per row. The forward keeps a running (max, sum of exp(x - max)) per thread, merges them across
// the block, and writes the row's log-sum-exp and loss; the backward recomputes each probability from the saved
// log-sum-exp. Both are memory-bound: the forward reads the logits once, the backward reads them once and writes
// the gradient once (the unfused path casts to fp32, runs log_softmax, its backward and a cast back: six passes).
#include "core/train/cuda/cross_entropy_kernels.h"
#include "core/util/cuda_launch.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

namespace routelab::cuda {

namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16(x); }

/// Merges running (max, sum) pairs: sum is of exp(x - max).
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  if (m2 == -INFINITY) return;
  if (m == -INFINITY) {
    m = m2;
    s = s2;
    return;
  }
  const float big = fmaxf(m, m2);
  s = s * expf(m - big) + s2 * expf(m2 - big);
  m = big;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) forward_kernel(const T* __restrict__ logits, std::int64_t V,
                                                           std::int64_t row_stride, const std::int64_t* __restrict__ target,
                                                           float* __restrict__ loss, float* __restrict__ lse) {
  const std::int64_t row = blockIdx.x;
  const T* x = logits + row * row_stride;
  float m = -INFINITY, s = 0.f;
  for (std::int64_t j = threadIdx.x; j < V; j += kThreads) {
    const float v = to_float(x[j]);
    if (v == -INFINITY) continue;  // a masked logit adds nothing
    if (v > m) {
      s = (m == -INFINITY ? 0.f : s * expf(m - v)) + 1.f;
      m = v;
    } else {
      s += expf(v - m);
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, offset), s2 = __shfl_xor_sync(0xffffffffu, s, offset);
    merge(m, s, m2, s2);
  }
  __shared__ float warp_m[kWarps], warp_s[kWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    warp_m[warp] = m;
    warp_s[warp] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float bm = warp_m[0], bs = warp_s[0];
    for (int w = 1; w < kWarps; ++w) merge(bm, bs, warp_m[w], warp_s[w]);
    const float l = bm + logf(bs);
    const std::int64_t t = target[row];
    lse[row] = l;
    loss[row] = (t >= 0 && t < V) ? l - to_float(x[t]) : NAN;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) backward_kernel(const T* __restrict__ logits, std::int64_t V,
                                                            std::int64_t row_stride,
                                                            const std::int64_t* __restrict__ target,
                                                            const float* __restrict__ lse,
                                                            const float* __restrict__ grad_loss, T* __restrict__ grad,
                                                            std::int64_t grad_row_stride) {
  const std::int64_t row = blockIdx.x;
  const T* x = logits + row * row_stride;
  T* g = grad + row * grad_row_stride;
  const float l = lse[row], scale = grad_loss[row];
  const std::int64_t t = target[row];
  for (std::int64_t j = threadIdx.x; j < V; j += kThreads) {
    const float p = expf(to_float(x[j]) - l);
    g[j] = from_float<T>((p - (j == t ? 1.f : 0.f)) * scale);
  }
}

const char* launched() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

}  // namespace

const char* cross_entropy_forward(const void* logits, LogitsType type, std::int64_t rows, std::int64_t V,
                                  std::int64_t row_stride, const std::int64_t* target, float* loss, float* lse,
                                  void* stream) {
  if (rows == 0) return "";
  const auto s = static_cast<cudaStream_t>(stream);
  const auto blocks = static_cast<unsigned>(rows);
  if (type == LogitsType::BFloat16)
    ROUTELAB_LAUNCH(blocks, kThreads, s, forward_kernel<__nv_bfloat16>)(static_cast<const __nv_bfloat16*>(logits), V,
                                                                        row_stride, target, loss, lse);
  else
    ROUTELAB_LAUNCH(blocks, kThreads, s, forward_kernel<float>)(static_cast<const float*>(logits), V, row_stride,
                                                                target, loss, lse);
  return launched();
}

const char* cross_entropy_backward(const void* logits, LogitsType type, std::int64_t rows, std::int64_t V,
                                   std::int64_t row_stride, const std::int64_t* target, const float* lse,
                                   const float* grad_loss, void* grad, std::int64_t grad_row_stride, void* stream) {
  if (rows == 0) return "";
  const auto s = static_cast<cudaStream_t>(stream);
  const auto blocks = static_cast<unsigned>(rows);
  if (type == LogitsType::BFloat16)
    ROUTELAB_LAUNCH(blocks, kThreads, s, backward_kernel<__nv_bfloat16>)(
        static_cast<const __nv_bfloat16*>(logits), V, row_stride, target, lse, grad_loss,
        static_cast<__nv_bfloat16*>(grad), grad_row_stride);
  else
    ROUTELAB_LAUNCH(blocks, kThreads, s, backward_kernel<float>)(static_cast<const float*>(logits), V, row_stride,
                                                                 target, lse, grad_loss, static_cast<float*>(grad),
                                                                 grad_row_stride);
  return launched();
}

}  // namespace routelab::cuda
