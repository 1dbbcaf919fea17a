// The pre-norm residual step on a GPU through RouteLab's own kernels (core/models/blocks/cuda/norm_kernels.h):
// s = x + y and norm(s) in one pass, the normalised rows written in the type the next matrix product reads (bf16
// under bf16 autocast, where LibTorch's norm writes fp32 and autocast casts a copy), and one backward pass that adds
// the residual stream's gradient. LayerNorm and RMSNorm. core/models/blocks/norm.h decides when it runs.
#pragma once
#include <torch/torch.h>

#include <optional>
#include <utility>

namespace routelab {

/// Whether the kernels run on `device`: a build with them, a GPU, and ROUTELAB_FUSED_NORM not 0 in the environment.
bool fused_norm_enabled(const torch::Device& device);

/// The type the fused kernels would write norm(x), norm(x + y) or norm(x + gate y) in for a matrix product, or
/// nothing where they do not run: a build without them, a tensor off the GPU, x not contiguous fp32, y of another
/// shape or type than fp32 or bf16, a gate that is not contiguous fp32 with one value per row, fp16 autocast, or
/// ROUTELAB_FUSED_NORM=0 in the environment (LibTorch's path, for comparisons). bf16 under bf16 autocast (unless this
/// thread's autocast is suspended, as for a router), else fp32.
std::optional<torch::ScalarType> fused_norm_output_type(const torch::Tensor& x, const torch::Tensor& y,
                                                        const torch::Tensor& weight,
                                                        const torch::Tensor& gate = {});

/// What the fused step computes: LayerNorm with `bias` (may be undefined) or RMSNorm (`rms`; no bias), over the last
/// dimension of fp32 rows, `eps` inside the square root, output in `out_type` (fp32 or bf16).
struct FusedNormSpec {
  torch::Tensor weight, bias;
  double eps = 1e-5;
  bool rms = false;
  torch::ScalarType out_type = torch::kFloat;
};

/// norm(x) for x (..., C) fp32 and contiguous, on the kernels' device; differentiable in x, weight and bias.
torch::Tensor fused_norm(const torch::Tensor& x, const FusedNormSpec& spec);

/// {s, norm(s)} for s = x + y, or x + gate y with a gate (x.shape[:-1], fp32: one factor per row, as a router's
/// score scales a token's update): x fp32, y fp32 or bf16 of x's shape, all contiguous; the sum in fp32.
/// Differentiable in x, y, the gate, weight and bias (y's gradient in y's type).
std::pair<torch::Tensor, torch::Tensor> fused_add_norm(const torch::Tensor& x, const torch::Tensor& y,
                                                       const FusedNormSpec& spec, const torch::Tensor& gate = {});

}  // namespace routelab
