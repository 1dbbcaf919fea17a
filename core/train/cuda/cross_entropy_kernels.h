// RouteLab's own CUDA kernels for the next-token loss: per-row cross-entropy over a (rows, V) block of logits in one
// pass over memory (online max and sum of exponentials, in fp32 whatever the logits' type), and its gradient in one
// more. Plain C++ interface (no Torch, no CUDA headers) so that nvcc compiles only the kernels; the autograd wrapper
// is core/train/fused_cross_entropy.cpp.
#pragma once
#include <cstdint>

namespace routelab::cuda {

enum class LogitsType { Float32, BFloat16 };

/// loss[r] = logsumexp(logits[r, :V]) - logits[r, target[r]] and lse[r] = logsumexp, in fp32; a target outside
/// [0, V) gives NaN. logits rows are `row_stride` elements apart (columns contiguous). `stream` is a cudaStream_t.
/// Returns an empty string, or the CUDA error of the launch.
const char* cross_entropy_forward(const void* logits, LogitsType type, std::int64_t rows, std::int64_t V,
                                  std::int64_t row_stride, const std::int64_t* target, float* loss, float* lse,
                                  void* stream);

/// grad[r, j] = (exp(logits[r, j] - lse[r]) - [j == target[r]]) * grad_loss[r], written in the logits' type into
/// rows `grad_row_stride` elements apart.
const char* cross_entropy_backward(const void* logits, LogitsType type, std::int64_t rows, std::int64_t V,
                                   std::int64_t row_stride, const std::int64_t* target, const float* lse,
                                   const float* grad_loss, void* grad, std::int64_t grad_row_stride, void* stream);

}  // namespace routelab::cuda
