// The next-token loss on a GPU through RouteLab's own kernels (core/train/cuda/): per-row cross-entropy read straight
// from bf16 or fp32 logits, in fp32, with its gradient, instead of casting the whole (rows, V) block to fp32 and
// running log_softmax and its backward (GPT-2 small: 16k rows x 50257 columns, six passes over memory instead of two).
#pragma once
#include <torch/torch.h>

namespace routelab {

/// Whether this build has the kernels (a CUDA LibTorch).
bool fused_cross_entropy_available();

/// Per-row cross-entropy, (N) fp32, of logits (N, V) (bf16 or fp32 on a GPU, columns contiguous, any row stride)
/// against target (N) int64; differentiable in the logits. A target outside [0, V) gives NaN. Throws ConfigError
/// where the kernels are unavailable or the logits are not on a GPU.
torch::Tensor fused_cross_entropy_rows(const torch::Tensor& logits, const torch::Tensor& target);

}  // namespace routelab
