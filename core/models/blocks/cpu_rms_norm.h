// RMSNorm on the CPU in one pass each way: y = x / sqrt(mean(x^2) + eps) * w over the last dimension, its backward
// computing dx and dw from x and the saved per-row scale. LibTorch's CPU RMSNorm is a chain of elementwise ops and
// reductions (about eight passes over (rows, C) forward and twelve backward; 1.13 has no rms_norm at all).
#pragma once
#include <torch/torch.h>

namespace routelab {

/// Whether cpu_rms_norm runs for these tensors: fp32 x and weight on the CPU, weight (C) for x (..., C), and
/// ROUTELAB_CPU_FUSED_NORM not 0 (read once; 0 keeps LibTorch's ops, for comparisons).
bool cpu_rms_norm_runs(const torch::Tensor& x, const torch::Tensor& weight);

/// x / sqrt(mean(x^2, -1) + eps) * weight, differentiable in x and weight. Rows are computed in parallel; the
/// weight's gradient is summed over fixed blocks of rows, then over the blocks in order, so the result does not
/// depend on the thread count.
torch::Tensor cpu_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

}  // namespace routelab
