// Feed-forward blocks: SwiGLU (Llama: W2(silu(W1 x) * W3 x)) and GELU (GPT-2: W2 gelu(W1 x)).
#pragma once
#include <torch/torch.h>

namespace routelab {

enum class MlpKind { SwiGLU, GELU };

struct MlpOptions {
  MlpOptions(std::int64_t n_embd, std::int64_t d_ff) : n_embd_(n_embd), d_ff_(d_ff) {}
  TORCH_ARG(std::int64_t, n_embd);
  TORCH_ARG(std::int64_t, d_ff);
  /// SwiGLU by default
  TORCH_ARG(MlpKind, kind) = MlpKind::SwiGLU;
  /// biases (GPT-2 style); false by default
  TORCH_ARG(bool, bias) = false;
  /// output dropout in training; 0 by default
  TORCH_ARG(double, dropout) = 0.0;
};

class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(MlpOptions options);
  void reset();
  torch::Tensor forward(const torch::Tensor& x);  // (..., C) -> (..., C)

  MlpOptions options;
  torch::nn::Linear up{nullptr};    // C -> d_ff (GELU) or C -> 2 d_ff (SwiGLU: gate and up fused)
  torch::nn::Linear down{nullptr};  // d_ff -> C (the residual projection)
};
TORCH_MODULE(Mlp);

}  // namespace routelab
