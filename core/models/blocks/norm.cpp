// RMSNorm computes in fp32 and casts back before the weight (as Llama does); LayerNorm uses ATen's kernel.
#include "core/models/blocks/norm.h"

namespace routelab {

NormImpl::NormImpl(NormOptions options_) : options(std::move(options_)) { reset(); }

void NormImpl::reset() {
  weight = register_parameter("weight", torch::ones({options.dim()}));
  if (options.kind() == NormKind::Layer && options.bias())
    bias = register_parameter("bias", torch::zeros({options.dim()}));
}

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  if (options.kind() == NormKind::Layer)
    return torch::layer_norm(x, {options.dim()}, weight, bias, options.eps());
  const auto xf = x.to(torch::kFloat);
  const auto normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + options.eps());
  return normed.to(x.scalar_type()) * weight;
}

}  // namespace routelab
