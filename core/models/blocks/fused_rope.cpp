// The autograd wrapper of the rotary-embedding kernel; compiled with it against a CUDA LibTorch (ROUTELAB_WITH_CUDA)
// and, for the kernel suite, against the CPU emulation; elsewhere it says the kernel is missing.
#include "core/models/blocks/fused_rope.h"

#include "core/util/cuda_build.h"
#include "core/util/errors.h"
#include "core/util/process.h"

#if ROUTELAB_WITH_CUDA || defined(ROUTELAB_CUDA_EMULATION)
#define ROUTELAB_FUSED_ROPE_KERNEL 1
#include "core/models/blocks/cuda/rope_kernels.h"
#include "core/models/blocks/fused_support.h"
#else
#define ROUTELAB_FUSED_ROPE_KERNEL 0
#endif


namespace routelab {

bool fused_rope_enabled(const torch::Device& device) {
#if ROUTELAB_WITH_CUDA && !defined(ROUTELAB_CUDA_EMULATION)
  static const bool disabled = switched_off_in_environment("ROUTELAB_FUSED_ROPE");
  return !disabled && device.is_cuda();
#else
  return false;
#endif
}

bool fused_rope_applies(const torch::Tensor& x) {
  return fused_rope_enabled(x.device()) && x.dim() == 4 && x.size(3) % 2 == 0 && x.stride(3) == 1 &&
         (x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kFloat);
}

#if ROUTELAB_FUSED_ROPE_KERNEL

namespace {

/// out = rotate(x) (sign 1) or its backward (sign -1), contiguous.
torch::Tensor rotate_rows(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                          const torch::Tensor& positions, float sign) {
  const kernels::KernelPlace place(x);
  auto out = torch::empty(x.sizes(), x.options());  // contiguous
  const std::int64_t strides[4] = {x.stride(0), x.stride(1), x.stride(2), x.stride(3)};
  kernels::check_launch(
      cuda::rope_rotate(x.data_ptr(), kernels::element_type(x.scalar_type(), "rotary embedding: x"), strides,
                        x.size(0), x.size(1), x.size(2), x.size(3), cos.data_ptr<float>(), sin.data_ptr<float>(),
                        positions.data_ptr<std::int64_t>(), positions.dim() == 2, sign, out.data_ptr(),
                        place.stream()),
      sign > 0 ? "rotary embedding forward" : "rotary embedding backward");
  return out;
}

class FusedRope : public torch::autograd::Function<FusedRope> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin, const torch::Tensor& positions) {
    ctx->save_for_backward({cos, sin, positions});
    return rotate_rows(x, cos, sin, positions, 1.0f);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto g = grads[0];
    if (g.stride(-1) != 1) g = g.contiguous();
    return {rotate_rows(g, saved[0], saved[1], saved[2], -1.0f), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor fused_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                         const torch::Tensor& positions) {
  if (x.dim() != 4 || x.size(3) % 2 != 0 || x.stride(3) != 1)
    throw ConfigError("rotary embedding: x must be (B, H, T, hd) with contiguous rows of even width");
  const auto table_ok = [&](const torch::Tensor& t) {
    return t.scalar_type() == torch::kFloat && t.dim() == 2 && t.size(1) == x.size(3) && t.is_contiguous() &&
           t.device() == x.device();
  };
  if (!table_ok(cos) || !table_ok(sin)) throw ConfigError("rotary embedding: cos and sin must be fp32 (P, hd) tables");
  const bool per_sequence = positions.dim() == 2;
  if (positions.scalar_type() != torch::kLong || !positions.is_contiguous() || positions.device() != x.device() ||
      (per_sequence ? positions.size(0) != x.size(0) || positions.size(1) != x.size(2)
                    : positions.dim() != 1 || positions.size(0) != x.size(2)))
    throw ConfigError("rotary embedding: positions must be contiguous int64 (T) or (B, T) on x's device");
  return FusedRope::apply(x, cos, sin, positions);
}

#else

torch::Tensor fused_rope(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) {
  throw ConfigError("rotary embedding: this build's LibTorch has no CUDA");
}

#endif

}  // namespace routelab
