// SwiGLU fuses the gate and up projections into one matmul; GELU is the exact (erf) form, as GPT-2 in PyTorch.
#include "core/models/blocks/mlp.h"

#include "core/models/blocks/attention.h"
#include "core/models/blocks/part_scope.h"

namespace routelab {

MlpImpl::MlpImpl(MlpOptions options_) : options(std::move(options_)) { reset(); }

void MlpImpl::reset() {
  const auto C = options.n_embd(), F = options.d_ff();
  const auto up_out = options.kind() == MlpKind::SwiGLU ? 2 * F : F;
  up = register_module("up", torch::nn::Linear(torch::nn::LinearOptions(C, up_out).bias(options.bias())));
  down = register_module("down", torch::nn::Linear(torch::nn::LinearOptions(F, C).bias(options.bias())));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  ROUTELAB_PART("mlp");
  torch::Tensor hidden;
  if (options.kind() == MlpKind::SwiGLU) {
    const auto gate_up = linear(x, up).chunk(2, -1);        // 2 x (..., F)
    hidden = torch::silu(gate_up[0]) * gate_up[1];  // (..., F)
  } else {
    hidden = torch::gelu(linear(x, up));                    // (..., F)
  }
  auto out = linear(hidden, down);
  if (is_training() && options.dropout() > 0) out = torch::dropout(out, options.dropout(), true);
  return out;
}

}  // namespace routelab
