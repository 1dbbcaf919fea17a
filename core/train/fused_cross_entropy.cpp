// The autograd wrapper of the fused cross-entropy kernels; compiled with them only against a CUDA LibTorch
// (ROUTELAB_WITH_CUDA), else it says so.
#include "core/train/fused_cross_entropy.h"

#include "core/util/cuda_build.h"
#include "core/util/errors.h"

#if ROUTELAB_WITH_CUDA
#include <c10/cuda/CUDAStream.h>

#include "core/train/cuda/cross_entropy_kernels.h"
#endif

namespace routelab {

bool fused_cross_entropy_available() { return ROUTELAB_WITH_CUDA != 0; }

#if ROUTELAB_WITH_CUDA

namespace {

cuda::LogitsType logits_type(const torch::Tensor& logits) {
  if (logits.scalar_type() == torch::kBFloat16) return cuda::LogitsType::BFloat16;
  if (logits.scalar_type() == torch::kFloat) return cuda::LogitsType::Float32;
  throw ConfigError(std::string("fused cross-entropy: logits of type ") + c10::toString(logits.scalar_type()) +
                    " (bf16 or fp32)");
}

void check_launch(const char* error, const char* what) {
  if (error && *error) throw std::runtime_error(std::string("fused cross-entropy ") + what + ": " + error);
}

void* current_stream(const torch::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

class FusedCrossEntropy : public torch::autograd::Function<FusedCrossEntropy> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& target) {
    const auto rows = logits.size(0), V = logits.size(1);
    const auto fp32 = logits.options().dtype(torch::kFloat);
    auto loss = torch::empty({rows}, fp32), lse = torch::empty({rows}, fp32);
    check_launch(cuda::cross_entropy_forward(logits.data_ptr(), logits_type(logits), rows, V, logits.stride(0),
                                             target.data_ptr<std::int64_t>(), loss.data_ptr<float>(),
                                             lse.data_ptr<float>(), current_stream(logits)),
                 "forward");
    ctx->save_for_backward({logits, target, lse});
    return loss;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &logits = saved[0], &target = saved[1], &lse = saved[2];
    const auto grad_loss = grads[0].to(torch::kFloat).contiguous();
    auto grad = torch::empty(logits.sizes(), logits.options());  // contiguous
    check_launch(cuda::cross_entropy_backward(logits.data_ptr(), logits_type(logits), logits.size(0), logits.size(1),
                                              logits.stride(0), target.data_ptr<std::int64_t>(), lse.data_ptr<float>(),
                                              grad_loss.data_ptr<float>(), grad.data_ptr(), grad.stride(0),
                                              current_stream(logits)),
                 "backward");
    return {grad, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor fused_cross_entropy_rows(const torch::Tensor& logits, const torch::Tensor& target) {
  if (!logits.is_cuda()) throw ConfigError("fused cross-entropy: the logits are on " + logits.device().str());
  if (logits.dim() != 2 || logits.stride(1) != 1 || target.dim() != 1 || target.size(0) != logits.size(0))
    throw ConfigError("fused cross-entropy: expected logits (N, V) with contiguous columns and target (N)");
  return FusedCrossEntropy::apply(logits, target.to(torch::kLong).contiguous());
}

#else

torch::Tensor fused_cross_entropy_rows(const torch::Tensor&, const torch::Tensor&) {
  throw ConfigError("fused cross-entropy: this build's LibTorch has no CUDA");
}

#endif

}  // namespace routelab
