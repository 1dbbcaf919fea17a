// RMSNorm computes in fp32 and casts back before the weight (as Llama does), in fp32 on the CPU in one fused pass
// (cpu_rms_norm.h); LayerNorm uses ATen's kernel.
#include "core/models/blocks/norm.h"

#include <torch/version.h>

#include "core/models/blocks/cpu_rms_norm.h"
#include "core/models/blocks/part_scope.h"

namespace routelab {

FusedNormSpec NormImpl::fused_spec(torch::ScalarType out_type) const {
  return {weight, bias, options.eps(), options.kind() == NormKind::RMS, out_type};
}

NormImpl::NormImpl(NormOptions options_) : options(std::move(options_)) { reset(); }

void NormImpl::reset() {
  weight = register_parameter("weight", torch::ones({options.dim()}));
  if (options.kind() == NormKind::Layer && options.bias())
    bias = register_parameter("bias", torch::zeros({options.dim()}));
}

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  ROUTELAB_PART("norm");
  if (options.kind() == NormKind::Layer)
    return torch::layer_norm(x, {options.dim()}, weight, bias, options.eps());
  if (cpu_rms_norm_runs(x, weight)) return cpu_rms_norm(x, weight, options.eps());  // one pass each way
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  // An fp32 input (the residual stream, under bf16 autocast too) leaves nothing to cast: LibTorch's rms_norm computes
  // the same, on CUDA in one fused kernel each way instead of about eight passes over (B, T, C) forward and twelve
  // backward.
  if (x.scalar_type() == torch::kFloat && weight.scalar_type() == torch::kFloat)
    return at::rms_norm(x, {options.dim()}, weight, options.eps());
#endif
  const auto xf = x.to(torch::kFloat);
  const auto normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + options.eps());
  return normed.to(x.scalar_type()) * weight;
}

torch::Tensor NormImpl::into_matmul(const torch::Tensor& x) {
  ROUTELAB_PART("norm");
  if (const auto type = fused_norm_output_type(x, {}, weight)) return fused_norm(x, fused_spec(*type));
  return forward(x);
}

std::pair<torch::Tensor, torch::Tensor> NormImpl::add_into_matmul(const torch::Tensor& x, const torch::Tensor& y,
                                                                  const torch::Tensor& gate) {
  ROUTELAB_PART("norm");
  if (!y.defined()) return {x, into_matmul(x)};
  if (const auto type = fused_norm_output_type(x, y, weight, gate))
    return fused_add_norm(x, y, fused_spec(*type), gate);
  // Elsewhere one addcmul for the gated sum (no (B, T, C) product written and read back).
  auto s = gate.defined() ? torch::addcmul(x, gate.unsqueeze(-1).to(x.scalar_type()), y) : x + y;
  auto n = forward(s);
  return {std::move(s), std::move(n)};
}

}  // namespace routelab
