// The autograd wrapper of the fused norm kernels. Compiled into the core against a CUDA LibTorch (ROUTELAB_WITH_CUDA)
// and, for the kernel suite, against the CPU emulation (ROUTELAB_CUDA_EMULATION: tensors on the CPU, no stream);
// elsewhere it says the kernels are missing.
#include "core/models/blocks/fused_norm.h"

#include "core/util/cuda_build.h"
#include "core/util/errors.h"
#include "core/util/process.h"

#if ROUTELAB_WITH_CUDA || defined(ROUTELAB_CUDA_EMULATION)
#define ROUTELAB_FUSED_NORM_KERNELS 1
#include "core/models/blocks/cuda/norm_kernels.h"
#include "core/models/blocks/fused_support.h"
#else
#define ROUTELAB_FUSED_NORM_KERNELS 0
#endif
#if ROUTELAB_WITH_CUDA && !defined(ROUTELAB_CUDA_EMULATION)
#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/version.h>

#include <string>
#endif

namespace routelab {

bool fused_norm_enabled(const torch::Device& device) {
#if ROUTELAB_WITH_CUDA && !defined(ROUTELAB_CUDA_EMULATION) && \
    (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))
  static const bool disabled = switched_off_in_environment("ROUTELAB_FUSED_NORM");
  return !disabled && device.is_cuda();
#else
  return false;
#endif
}

std::optional<torch::ScalarType> fused_norm_output_type(const torch::Tensor& x, const torch::Tensor& y,
                                                        const torch::Tensor& weight, const torch::Tensor& gate) {
#if ROUTELAB_WITH_CUDA && !defined(ROUTELAB_CUDA_EMULATION) && \
    (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))
  if (!fused_norm_enabled(x.device()) || x.scalar_type() != torch::kFloat || !x.is_contiguous() || x.dim() == 0 ||
      weight.scalar_type() != torch::kFloat || weight.device() != x.device())
    return std::nullopt;
  if (y.defined() && (y.sizes() != x.sizes() || !y.is_contiguous() || y.device() != x.device() ||
                      (y.scalar_type() != torch::kFloat && y.scalar_type() != torch::kBFloat16)))
    return std::nullopt;
  if (gate.defined() && (!y.defined() || gate.scalar_type() != torch::kFloat || !gate.is_contiguous() ||
                         gate.sizes() != x.sizes().slice(0, x.dim() - 1) || gate.device() != x.device()))
    return std::nullopt;
  if (!at::autocast::is_autocast_enabled(at::kCUDA) ||
      c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::AutocastCUDA))
    return torch::kFloat;
  if (at::autocast::get_autocast_dtype(at::kCUDA) == torch::kBFloat16) return torch::kBFloat16;
  return std::nullopt;  // fp16 autocast: LibTorch's path
#else
  return std::nullopt;
#endif
}

#if ROUTELAB_FUSED_NORM_KERNELS

namespace {

using kernels::check_launch;
using kernels::data_or_null;
using kernels::KernelPlace;

cuda::ElementType element_type(torch::ScalarType t, const char* what) {
  return kernels::element_type(t, std::string("fused norm: ") + what);
}

/// Inputs x, y, gate, weight, bias; outputs {norm(s)} without y, {s, norm(s)} with, s = x + gate y (per row). A
/// missing y, gate or bias is an empty tensor and a false flag (LibTorch 1.13's custom functions take no undefined
/// inputs).
class FusedAddNorm : public torch::autograd::Function<FusedAddNorm> {
 public:
  static torch::autograd::tensor_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                              const torch::Tensor& y_in, const torch::Tensor& gate_in,
                                              const torch::Tensor& weight, const torch::Tensor& bias_in, double eps,
                                              bool rms, int64_t out_type, bool with_y, bool with_gate,
                                              bool with_bias) {
    const auto y = with_y ? y_in : torch::Tensor();
    const auto gate = with_y && with_gate ? gate_in : torch::Tensor();
    const auto bias = with_bias ? bias_in : torch::Tensor();
    const KernelPlace place(x);
    const auto C = x.size(-1), rows = x.numel() / std::max<std::int64_t>(C, 1);
    const auto fp32 = x.options().dtype(torch::kFloat);
    const auto type = static_cast<torch::ScalarType>(out_type);
    auto out = torch::empty(x.sizes(), x.options().dtype(type));
    auto mean = torch::empty({rows}, fp32), rstd = torch::empty({rows}, fp32);
    torch::Tensor sum = y.defined() ? torch::empty(x.sizes(), fp32) : torch::Tensor();
    check_launch(cuda::add_norm_forward(x.data_ptr<float>(), y.defined() ? y.data_ptr() : nullptr,
                                        element_type(y.defined() ? y.scalar_type() : torch::kFloat, "y"),
                                        data_or_null(gate), rows, C, weight.data_ptr<float>(), data_or_null(bias),
                                        static_cast<float>(eps), rms, data_or_null(sum), out.data_ptr(),
                                        element_type(type, "the output"), mean.data_ptr<float>(),
                                        rstd.data_ptr<float>(), place.stream()),
                 "fused norm forward");
    torch::autograd::variable_list saved{y.defined() ? sum : x, weight, mean, rstd};
    if (gate.defined()) {  // the gated backward reads y and the gate
      saved.push_back(y);
      saved.push_back(gate);
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["rms"] = rms;
    ctx->saved_data["with_y"] = y.defined();
    ctx->saved_data["with_gate"] = gate.defined();
    ctx->saved_data["y_type"] = static_cast<int64_t>(y.defined() ? y.scalar_type() : torch::kFloat);
    ctx->saved_data["with_bias"] = bias.defined();
    if (!y.defined()) return {out};
    return {sum, out};
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &s = saved[0], &weight = saved[1], &mean = saved[2], &rstd = saved[3];
    const bool with_y = ctx->saved_data["with_y"].toBool(), with_bias = ctx->saved_data["with_bias"].toBool();
    const bool gated = ctx->saved_data["with_gate"].toBool();
    const auto y = gated ? saved[4] : torch::Tensor(), gate = gated ? saved[5] : torch::Tensor();
    const auto y_type = static_cast<torch::ScalarType>(ctx->saved_data["y_type"].toInt());
    auto grad_sum = with_y ? grads[0] : torch::Tensor();
    auto grad_out = with_y ? grads[1] : grads[0];
    const auto none = torch::Tensor();
    if (!grad_out.defined()) {  // only the sum was used
      const auto g = grad_sum.defined() ? grad_sum.to(torch::kFloat) : torch::zeros_like(s);
      if (!gated) return {g, with_y ? g.to(y_type) : none, none, none, none, none, none, none, none, none, none};
      return {g, (gate.unsqueeze(-1) * g).to(y_type), (g * y.to(torch::kFloat)).sum(-1), none, none, none, none,
              none, none, none, none};
    }
    const KernelPlace place(s);
    const auto C = s.size(-1), rows = s.numel() / std::max<std::int64_t>(C, 1);
    if (grad_out.scalar_type() != torch::kBFloat16 && grad_out.scalar_type() != torch::kFloat)
      grad_out = grad_out.to(torch::kFloat);
    grad_out = grad_out.contiguous();
    if (grad_sum.defined()) grad_sum = grad_sum.to(torch::kFloat).contiguous();
    auto grad_s = torch::empty(s.sizes(), s.options());
    const bool separate_y = with_y && (gated || y_type != torch::kFloat);
    torch::Tensor grad_y = separate_y ? torch::empty(s.sizes(), s.options().dtype(y_type)) : torch::Tensor();
    torch::Tensor grad_gate = gated ? torch::empty(gate.sizes(), gate.options()) : torch::Tensor();
    const auto partial_rows = cuda::norm_partial_rows(rows);
    const auto partials = [&] {  // no rows: the kernels write nothing, and the sums must still be zero
      return rows == 0 ? torch::zeros({partial_rows, C}, s.options()) : torch::empty({partial_rows, C}, s.options());
    };
    auto weight_partials = partials();
    torch::Tensor bias_partials = with_bias ? partials() : torch::Tensor();
    check_launch(cuda::add_norm_backward(grad_out.data_ptr(), element_type(grad_out.scalar_type(), "the gradient"),
                                         data_or_null(grad_sum), s.data_ptr<float>(), weight.data_ptr<float>(),
                                         mean.data_ptr<float>(), rstd.data_ptr<float>(), rows, C,
                                         ctx->saved_data["rms"].toBool(), gated ? y.data_ptr() : nullptr,
                                         data_or_null(gate), grad_s.data_ptr<float>(),
                                         separate_y ? grad_y.data_ptr() : nullptr,
                                         element_type(with_y ? y_type : torch::kFloat, "y"), data_or_null(grad_gate),
                                         weight_partials.data_ptr<float>(), data_or_null(bias_partials),
                                         place.stream()),
                 "fused norm backward");
    if (with_y && !separate_y) grad_y = grad_s;  // fp32 y, no gate: the same gradient, as x + y's own backward gives
    return {grad_s, grad_y, grad_gate, weight_partials.sum(0), with_bias ? bias_partials.sum(0) : none, none, none,
            none, none, none, none};
  }
};

void check_inputs(const torch::Tensor& x, const torch::Tensor& y, const FusedNormSpec& spec,
                  const torch::Tensor& gate = {}) {
  const auto C = x.dim() > 0 ? x.size(-1) : 0;
  if (x.scalar_type() != torch::kFloat || !x.is_contiguous() || C == 0)
    throw ConfigError("fused norm: x must be contiguous fp32 rows");
  if (y.defined() && (y.sizes() != x.sizes() || !y.is_contiguous() || y.device() != x.device()))
    throw ConfigError("fused norm: y must be contiguous, of x's shape and device");
  if (gate.defined() && (gate.scalar_type() != torch::kFloat || !gate.is_contiguous() ||
                         gate.sizes() != x.sizes().slice(0, x.dim() - 1) || gate.device() != x.device()))
    throw ConfigError("fused norm: the gate must be contiguous fp32, one value per row of x, on x's device");
  const auto vector_ok = [&](const torch::Tensor& t) {
    return t.scalar_type() == torch::kFloat && t.dim() == 1 && t.size(0) == C && t.is_contiguous() &&
           t.device() == x.device();
  };
  if (!spec.weight.defined() || !vector_ok(spec.weight) || (spec.bias.defined() && !vector_ok(spec.bias)))
    throw ConfigError("fused norm: weight (and bias) must be fp32 vectors of the rows' width");
  if (spec.rms && spec.bias.defined()) throw ConfigError("fused norm: RMSNorm has no bias");
}

}  // namespace

torch::Tensor fused_norm(const torch::Tensor& x, const FusedNormSpec& spec) {
  check_inputs(x, {}, spec);
  const auto absent = torch::empty({0}, x.options());
  return FusedAddNorm::apply(x, absent, absent, spec.weight, spec.bias.defined() ? spec.bias : absent, spec.eps,
                             spec.rms, static_cast<int64_t>(spec.out_type), false, false, spec.bias.defined())[0];
}

std::pair<torch::Tensor, torch::Tensor> fused_add_norm(const torch::Tensor& x, const torch::Tensor& y,
                                                       const FusedNormSpec& spec, const torch::Tensor& gate) {
  if (!y.defined()) throw ConfigError("fused norm: fused_add_norm needs y");
  check_inputs(x, y, spec, gate);
  const auto absent = torch::empty({0}, x.options());
  auto out = FusedAddNorm::apply(x, y, gate.defined() ? gate : absent, spec.weight,
                                 spec.bias.defined() ? spec.bias : absent, spec.eps, spec.rms,
                                 static_cast<int64_t>(spec.out_type), true, gate.defined(), spec.bias.defined());
  return {out[0], out[1]};
}

#else

torch::Tensor fused_norm(const torch::Tensor&, const FusedNormSpec&) {
  throw ConfigError("fused norm: this build's LibTorch has no CUDA");
}

std::pair<torch::Tensor, torch::Tensor> fused_add_norm(const torch::Tensor&, const torch::Tensor&,
                                                       const FusedNormSpec&, const torch::Tensor&) {
  throw ConfigError("fused norm: this build's LibTorch has no CUDA");
}

#endif

}  // namespace routelab
