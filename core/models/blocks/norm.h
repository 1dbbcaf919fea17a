// Normalisation layers: RMSNorm (Llama, fp32 inside) and LayerNorm (GPT-2) behind one module.
#pragma once
#include <torch/torch.h>

#include "core/models/blocks/fused_norm.h"

#include <utility>

namespace routelab {

enum class NormKind { RMS, Layer };

struct NormOptions {
  NormOptions(std::int64_t dim) : dim_(dim) {}
  TORCH_ARG(std::int64_t, dim);
  /// RMS (Llama) by default
  TORCH_ARG(NormKind, kind) = NormKind::RMS;
  /// 1e-5 by default
  TORCH_ARG(double, eps) = 1e-5;
  /// LayerNorm bias (GPT-2 style); ignored by RMSNorm. true by default
  TORCH_ARG(bool, bias) = true;
};

class NormImpl : public torch::nn::Module {
 public:
  explicit NormImpl(NormOptions options);
  void reset();
  torch::Tensor forward(const torch::Tensor& x);  // (..., C) -> (..., C)
  /// forward(x) as the input of a matrix product: on a GPU with RouteLab's kernels (fused_norm.h) one fused pass,
  /// written in bf16 under bf16 autocast (the type the product reads; forward writes fp32 there), else forward(x).
  torch::Tensor into_matmul(const torch::Tensor& x);
  /// {x + y, into_matmul(x + y)}: the residual add and the next norm, one pass where the kernels run. An undefined
  /// y: {x, into_matmul(x)}. With a gate (x.shape[:-1], fp32) the sum is x + gate y, each row's update scaled by
  /// its gate (a router's score), in the same pass.
  std::pair<torch::Tensor, torch::Tensor> add_into_matmul(const torch::Tensor& x, const torch::Tensor& y,
                                                          const torch::Tensor& gate = {});

  NormOptions options;
  torch::Tensor weight;  // (C)
  torch::Tensor bias;    // (C) or undefined

 private:
  FusedNormSpec fused_spec(torch::ScalarType out_type) const;
};
TORCH_MODULE(Norm);

}  // namespace routelab
