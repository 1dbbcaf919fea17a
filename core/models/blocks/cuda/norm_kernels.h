// RouteLab's CUDA kernels for the pre-norm residual step of a transformer block: s = x + y and n = norm(s) in one
// pass over memory, n written straight in the type of the matrix product that reads it (bf16 under bf16 autocast),
// and the backward that reads n's gradient in that type and adds the gradient s receives from the residual stream.
// LayerNorm (GPT-2) and RMSNorm (Llama). Plain C++ interface (no Torch, no CUDA headers) so that nvcc compiles only
// the kernels; the autograd wrapper is core/models/blocks/fused_norm.cpp.
#pragma once
#include <cstdint>

#include "core/models/blocks/cuda/kernel_types.h"

namespace routelab::cuda {

/// Per row r of `rows` rows of C contiguous elements: s = x + gate[r] y (y may be null: s = x; gate may be null: 1;
/// `sum` receives s when not null), mean and rstd of s (mean 0 for RMSNorm), and out = (s - mean) * rstd * weight +
/// bias (bias may be null), written as `out_type`. All fp32 but y (`y_type`) and out. `stream` is a cudaStream_t.
/// Returns an empty string, or the CUDA error of the launch.
const char* add_norm_forward(const float* x, const void* y, ElementType y_type, const float* gate, std::int64_t rows,
                             std::int64_t C, const float* weight, const float* bias, float eps, bool rms, float* sum,
                             void* out, ElementType out_type, float* mean, float* rstd, void* stream);

/// Rows of the weight and bias partial sums add_norm_backward writes for `rows` rows (the wrapper sums them).
std::int64_t norm_partial_rows(std::int64_t rows);

/// The gradient of add_norm_forward. grad_out (rows, C) in `grad_type`; grad_sum (fp32, may be null) is the gradient
/// s receives beside the norm's. Writes grad_s (fp32: the gradient of x, and of an ungated y), grad_y (may be null)
/// y's gradient (gate[r] grad_s) in `y_type`, with a gate grad_gate[r] = sum over the row of grad_s y (y, of
/// `y_type`, is read only then), and norm_partial_rows(rows) x C partial sums of the weight's gradient and, when
/// bias_partials is not null, the bias's.
const char* add_norm_backward(const void* grad_out, ElementType grad_type, const float* grad_sum, const float* s,
                              const float* weight, const float* mean, const float* rstd, std::int64_t rows,
                              std::int64_t C, bool rms, const void* y, const float* gate, float* grad_s, void* grad_y,
                              ElementType y_type, float* grad_gate, float* weight_partials, float* bias_partials,
                              void* stream);

}  // namespace routelab::cuda
