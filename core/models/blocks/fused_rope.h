// Rotary position embeddings on a GPU through RouteLab's own kernel (core/models/blocks/cuda/rope_kernels.h): q or k
// rotated in one pass from where the projection left them, computed in fp32. core/models/blocks/rope.h decides when
// it runs.
#pragma once
#include <torch/torch.h>

namespace routelab {

/// Whether the kernel runs on `device`: a build with it (a CUDA LibTorch), a GPU, and ROUTELAB_FUSED_ROPE not 0 in
/// the environment (0: LibTorch's ops, for comparisons).
bool fused_rope_enabled(const torch::Device& device);

/// Whether `x` (B, H, T, hd) would be rotated by the kernel: enabled on its device, bf16 or fp32, contiguous rows of
/// even width.
bool fused_rope_applies(const torch::Tensor& x);

/// x (B, H, T, hd) with contiguous rows rotated by the tables cos and sin (P, hd), fp32 with repeated halves, at
/// positions (T) or (B, T) int64; differentiable in x. The result is contiguous, in x's type.
torch::Tensor fused_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                         const torch::Tensor& positions);

}  // namespace routelab
