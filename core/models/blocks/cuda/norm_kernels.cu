// One thread block per row for the forward and the row part of the backward: the row's statistics are block
// reductions (warp shuffles, then one partial per warp in shared memory), and each thread revisits only the
// elements it wrote itself, so the second and third passes over a row read it back from cache. The weight and bias
// gradients are column sums over every row: blocks of 32 columns x a slice of the rows write partial sums that the
// wrapper adds up (no atomics, the same result every run).
#include "core/models/blocks/cuda/norm_kernels.h"
#include "core/util/cuda_launch.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

namespace routelab::cuda {

namespace {

constexpr int kRowThreads = 256;
constexpr int kRowWarps = kRowThreads / 32;
constexpr int kColumns = 32;    // columns per block of the weight/bias reduction
constexpr int kColumnRows = 8;  // rows such a block reads at once
constexpr std::int64_t kRowsPerPartial = 128;
constexpr std::int64_t kMaxPartials = 256;

__device__ __forceinline__ float load(const float* p, std::int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* p, std::int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store(float* p, std::int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, std::int64_t i, float v) { p[i] = __float2bfloat16(v); }

/// The sum of `v` over the block, returned to every thread; `partials` holds kRowWarps floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float* partials) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) partials[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < kRowWarps; ++w) total += partials[w];
  __syncthreads();  // every thread has read the partials before they are written again
  return total;
}

template <typename Y, typename Out>
__global__ void __launch_bounds__(kRowThreads)
    forward_kernel(const float* __restrict__ x, const Y* __restrict__ y, const float* __restrict__ gate,
                   std::int64_t C, const float* __restrict__ weight, const float* __restrict__ bias, float eps,
                   bool rms, float* __restrict__ sum, Out* __restrict__ out, float* __restrict__ mean_out,
                   float* __restrict__ rstd_out) {
  __shared__ float partials[kRowWarps];
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * C;
  const float g = gate ? gate[blockIdx.x] : 1.f;  // the row's gate on y
  const auto at = [&](std::int64_t j) { return y ? x[base + j] + g * load(y, base + j) : x[base + j]; };
  // Pass 1: s, written where asked, and its sum (RMSNorm: its sum of squares).
  float acc = 0.f;
  for (std::int64_t j = threadIdx.x; j < C; j += kRowThreads) {
    const float s = at(j);
    if (sum) sum[base + j] = s;
    acc += rms ? s * s : s;
  }
  const float mean = rms ? 0.f : block_sum(acc, partials) / static_cast<float>(C);
  // Pass 2 (LayerNorm): the variance about the mean, not E[s^2] - mean^2, which cancels.
  float var = 0.f;
  if (rms) {
    var = block_sum(acc, partials) / static_cast<float>(C);
  } else {
    float sq = 0.f;
    for (std::int64_t j = threadIdx.x; j < C; j += kRowThreads) {
      const float s = sum ? sum[base + j] : at(j);
      sq += (s - mean) * (s - mean);
    }
    var = block_sum(sq, partials) / static_cast<float>(C);
  }
  const float rstd = rsqrtf(var + eps);
  for (std::int64_t j = threadIdx.x; j < C; j += kRowThreads) {
    const float s = sum ? sum[base + j] : at(j);
    store(out, base + j, (s - mean) * rstd * weight[j] + (bias ? bias[j] : 0.f));
  }
  if (threadIdx.x == 0) {
    mean_out[blockIdx.x] = mean;
    rstd_out[blockIdx.x] = rstd;
  }
}

template <typename G, typename GY>
__global__ void __launch_bounds__(kRowThreads)
    backward_rows_kernel(const G* __restrict__ grad_out, const float* __restrict__ grad_sum,
                         const float* __restrict__ s, const float* __restrict__ weight,
                         const float* __restrict__ mean_in, const float* __restrict__ rstd_in, std::int64_t C, bool rms,
                         const GY* __restrict__ y, const float* __restrict__ gate, float* __restrict__ grad_s,
                         GY* __restrict__ grad_y, float* __restrict__ grad_gate) {
  __shared__ float partials[kRowWarps];
  const std::int64_t row = blockIdx.x, base = row * C;
  const float mean = mean_in[row], rstd = rstd_in[row];
  // g = dout * weight; ds = rstd * (g - mean(g) - xhat * mean(g * xhat)) (RMSNorm: without mean(g)).
  float sum_g = 0.f, sum_gx = 0.f;
  for (std::int64_t j = threadIdx.x; j < C; j += kRowThreads) {
    const float g = load(grad_out, base + j) * weight[j];
    sum_g += g;
    sum_gx += g * (s[base + j] - mean) * rstd;
  }
  const float mean_g = rms ? 0.f : block_sum(sum_g, partials) / static_cast<float>(C);
  const float mean_gx = block_sum(sum_gx, partials) / static_cast<float>(C);
  // Gated (s = x + gate y): y's gradient is gate ds, the gate's the row's sum of ds y.
  const float row_gate = gate ? gate[row] : 1.f;
  float dot = 0.f;
  for (std::int64_t j = threadIdx.x; j < C; j += kRowThreads) {
    const float xhat = (s[base + j] - mean) * rstd;
    const float g = load(grad_out, base + j) * weight[j];
    float d = rstd * (g - mean_g - xhat * mean_gx);
    if (grad_sum) d += grad_sum[base + j];
    grad_s[base + j] = d;
    if (grad_y) store(grad_y, base + j, row_gate * d);
    if (gate) dot += d * load(y, base + j);
  }
  if (gate) {  // the same branch for every thread of the block, as block_sum needs
    const float total = block_sum(dot, partials);
    if (threadIdx.x == 0) grad_gate[row] = total;
  }
}

/// Block (kColumns, kColumnRows) at (column tile, slice): partial sums over the slice's rows of dout * xhat (weight)
/// and dout (bias) for its 32 columns.
template <typename G>
__global__ void __launch_bounds__(kColumns * kColumnRows)
    backward_columns_kernel(const G* __restrict__ grad_out, const float* __restrict__ s,
                            const float* __restrict__ mean_in, const float* __restrict__ rstd_in, std::int64_t rows,
                            std::int64_t C, std::int64_t rows_per_slice, float* __restrict__ weight_partials,
                            float* __restrict__ bias_partials) {
  __shared__ float w_acc[kColumnRows][kColumns + 1], b_acc[kColumnRows][kColumns + 1];
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kColumns + threadIdx.x;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.y) * rows_per_slice;
  const std::int64_t last = first + rows_per_slice < rows ? first + rows_per_slice : rows;
  float w = 0.f, b = 0.f;
  if (c < C) {
    for (std::int64_t r = first + threadIdx.y; r < last; r += kColumnRows) {
      const float d = load(grad_out, r * C + c);
      w += d * (s[r * C + c] - mean_in[r]) * rstd_in[r];
      b += d;
    }
  }
  w_acc[threadIdx.y][threadIdx.x] = w;
  b_acc[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < kColumnRows; ++k) {
      w += w_acc[k][threadIdx.x];
      b += b_acc[k][threadIdx.x];
    }
    weight_partials[static_cast<std::int64_t>(blockIdx.y) * C + c] = w;
    if (bias_partials) bias_partials[static_cast<std::int64_t>(blockIdx.y) * C + c] = b;
  }
}

const char* launched() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

template <typename Y, typename Out>
void forward_as(const float* x, const void* y, const float* gate, std::int64_t rows, std::int64_t C,
                const float* weight, const float* bias, float eps, bool rms, float* sum, void* out, float* mean,
                float* rstd, cudaStream_t s) {
  ROUTELAB_LAUNCH(static_cast<unsigned>(rows), kRowThreads, s, forward_kernel<Y, Out>)(
      x, static_cast<const Y*>(y), gate, C, weight, bias, eps, rms, sum, static_cast<Out*>(out), mean, rstd);
}

template <typename G, typename GY>
void backward_rows_as(const void* grad_out, const float* grad_sum, const float* s, const float* weight,
                      const float* mean, const float* rstd, std::int64_t rows, std::int64_t C, bool rms,
                      const void* y, const float* gate, float* grad_s, void* grad_y, float* grad_gate,
                      cudaStream_t stream) {
  ROUTELAB_LAUNCH(static_cast<unsigned>(rows), kRowThreads, stream, backward_rows_kernel<G, GY>)(
      static_cast<const G*>(grad_out), grad_sum, s, weight, mean, rstd, C, rms, static_cast<const GY*>(y), gate,
      grad_s, static_cast<GY*>(grad_y), grad_gate);
}

template <typename G>
void backward_columns_as(const void* grad_out, const float* s, const float* mean, const float* rstd,
                         std::int64_t rows, std::int64_t C, float* weight_partials, float* bias_partials,
                         cudaStream_t stream) {
  const auto slices = norm_partial_rows(rows);
  const auto per_slice = (rows + slices - 1) / slices;
  const dim3 grid(static_cast<unsigned>((C + kColumns - 1) / kColumns), static_cast<unsigned>(slices));
  ROUTELAB_LAUNCH(grid, dim3(kColumns, kColumnRows), stream, backward_columns_kernel<G>)(
      static_cast<const G*>(grad_out), s, mean, rstd, rows, C, per_slice, weight_partials, bias_partials);
}

}  // namespace

std::int64_t norm_partial_rows(std::int64_t rows) {
  const auto slices = (rows + kRowsPerPartial - 1) / kRowsPerPartial;
  return slices < 1 ? 1 : (slices > kMaxPartials ? kMaxPartials : slices);
}

const char* add_norm_forward(const float* x, const void* y, ElementType y_type, const float* gate, std::int64_t rows,
                             std::int64_t C, const float* weight, const float* bias, float eps, bool rms, float* sum,
                             void* out, ElementType out_type, float* mean, float* rstd, void* stream) {
  if (rows == 0) return "";
  const auto s = static_cast<cudaStream_t>(stream);
  const bool y_bf16 = y && y_type == ElementType::BFloat16, out_bf16 = out_type == ElementType::BFloat16;
  if (y_bf16 && out_bf16)
    forward_as<__nv_bfloat16, __nv_bfloat16>(x, y, gate, rows, C, weight, bias, eps, rms, sum, out, mean, rstd, s);
  else if (y_bf16)
    forward_as<__nv_bfloat16, float>(x, y, gate, rows, C, weight, bias, eps, rms, sum, out, mean, rstd, s);
  else if (out_bf16)
    forward_as<float, __nv_bfloat16>(x, y, gate, rows, C, weight, bias, eps, rms, sum, out, mean, rstd, s);
  else
    forward_as<float, float>(x, y, gate, rows, C, weight, bias, eps, rms, sum, out, mean, rstd, s);
  return launched();
}

const char* add_norm_backward(const void* grad_out, ElementType grad_type, const float* grad_sum, const float* s,
                              const float* weight, const float* mean, const float* rstd, std::int64_t rows,
                              std::int64_t C, bool rms, const void* y, const float* gate, float* grad_s, void* grad_y,
                              ElementType y_type, float* grad_gate, float* weight_partials, float* bias_partials,
                              void* stream) {
  if (rows == 0) return "";
  const auto st = static_cast<cudaStream_t>(stream);
  const bool g_bf16 = grad_type == ElementType::BFloat16, y_bf16 = y_type == ElementType::BFloat16;
  if (g_bf16 && y_bf16)
    backward_rows_as<__nv_bfloat16, __nv_bfloat16>(grad_out, grad_sum, s, weight, mean, rstd, rows, C, rms, y, gate,
                                                   grad_s, grad_y, grad_gate, st);
  else if (g_bf16)
    backward_rows_as<__nv_bfloat16, float>(grad_out, grad_sum, s, weight, mean, rstd, rows, C, rms, y, gate, grad_s,
                                           grad_y, grad_gate, st);
  else if (y_bf16)
    backward_rows_as<float, __nv_bfloat16>(grad_out, grad_sum, s, weight, mean, rstd, rows, C, rms, y, gate, grad_s,
                                           grad_y, grad_gate, st);
  else
    backward_rows_as<float, float>(grad_out, grad_sum, s, weight, mean, rstd, rows, C, rms, y, gate, grad_s, grad_y,
                                   grad_gate, st);
  const char* error = launched();
  if (*error) return error;
  if (g_bf16)
    backward_columns_as<__nv_bfloat16>(grad_out, s, mean, rstd, rows, C, weight_partials, bias_partials, st);
  else
    backward_columns_as<float>(grad_out, s, mean, rstd, rows, C, weight_partials, bias_partials, st);
  return launched();
}

}  // namespace routelab::cuda
