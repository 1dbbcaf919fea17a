// The training step: autocast forward, fp32 loss, backward, global-norm clip, optimizer step.
#include "core/train/step.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include "core/train/fused_cross_entropy.h"
#include "core/train/optimizer.h"

namespace routelab {

torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& target, const torch::Tensor& mask) {
  const auto V = logits.size(-1);
  if (logits.is_cuda() && fused_cross_entropy_available()) {  // RouteLab's kernels: fp32 arithmetic, no fp32 copy
    const auto per_token = fused_cross_entropy_rows(logits.reshape({-1, V}), target.reshape({-1}));
    if (!mask.defined()) return per_token.mean();
    const auto m = mask.reshape({-1}).to(torch::kFloat);
    return (per_token * m).sum() / m.sum().clamp_min(1.0);
  }
  const auto flat_logits = logits.reshape({-1, V}).to(torch::kFloat);  // (B*T, V)
  const auto flat_target = target.reshape({-1});                       // (B*T)
  if (!mask.defined()) return torch::nn::functional::cross_entropy(flat_logits, flat_target);
  const auto per_token = torch::nn::functional::cross_entropy(
      flat_logits, flat_target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  const auto m = mask.reshape({-1}).to(torch::kFloat);
  return (per_token * m).sum() / m.sum().clamp_min(1.0);
}

// LibTorch 2.4 replaced the per-device autocast calls (set_enabled, set_cpu_enabled, ...) with calls that take the
// device type; the old ones print a deprecation warning on every use.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
namespace {
bool autocast_enabled(bool cuda) { return at::autocast::is_autocast_enabled(cuda ? at::kCUDA : at::kCPU); }
void set_autocast(bool cuda, bool enabled) { at::autocast::set_autocast_enabled(cuda ? at::kCUDA : at::kCPU, enabled); }
at::ScalarType autocast_dtype(bool cuda) { return at::autocast::get_autocast_dtype(cuda ? at::kCUDA : at::kCPU); }
void set_autocast_dtype(bool cuda, at::ScalarType t) { at::autocast::set_autocast_dtype(cuda ? at::kCUDA : at::kCPU, t); }
}  // namespace
#else
namespace {
bool autocast_enabled(bool cuda) { return cuda ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled(); }
void set_autocast(bool cuda, bool enabled) {
  if (cuda)
    at::autocast::set_enabled(enabled);
  else
    at::autocast::set_cpu_enabled(enabled);
}
at::ScalarType autocast_dtype(bool cuda) {
  return cuda ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
void set_autocast_dtype(bool cuda, at::ScalarType t) {
  if (cuda)
    at::autocast::set_autocast_gpu_dtype(t);
  else
    at::autocast::set_autocast_cpu_dtype(t);
}
}  // namespace
#endif

AutocastGuard::AutocastGuard(bool enabled, const torch::Device& device) : enabled_(enabled), cuda_(device.is_cuda()) {
  if (!enabled_) return;
  previous_ = autocast_enabled(cuda_);
  previous_dtype_ = autocast_dtype(cuda_);
  set_autocast_dtype(cuda_, at::kBFloat16);
  set_autocast(cuda_, true);
}

AutocastGuard::~AutocastGuard() {
  if (!enabled_) return;
  set_autocast(cuda_, previous_);
  set_autocast_dtype(cuda_, previous_dtype_);
  at::autocast::clear_cache();
}

torch::Tensor backward_and_step(const torch::Tensor& total, torch::nn::Module& model,
                                torch::optim::Optimizer& optimizer, double grad_clip) {
  // Gradients are zeroed in place, not dropped (LibTorch 2.x's zero_grad default): a parameter that no token reached
  // this step still gets AdamW's decay and momentum update, the same on every LibTorch.
  const auto params = model.parameters();
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (!grads.empty()) at::_foreach_zero_(grads);
  total.backward();
  const auto grad_norm = clip_grad_norm(params, grad_clip);
  optimizer.step();
  return grad_norm;
}

StepResult train_step(LanguageModel& model, torch::optim::Optimizer& optimizer, const Batch& batch, double grad_clip,
                      bool bf16, bool trace) {
  StepResult result;
  torch::Tensor loss, total;
  {
    AutocastGuard autocast(bf16, batch.input.device());
    result.output = model.forward(batch.input, trace);
    loss = lm_loss(result.output.logits, batch.target, batch.loss_mask);
    total = loss;
    if (!result.output.exit_logits.empty()) {  // uniform mean over every head (early exit)
      for (const auto& exit : result.output.exit_logits) total = total + lm_loss(exit, batch.target, batch.loss_mask);
      total = total / static_cast<double>(result.output.exit_logits.size() + 1);
      result.output.exit_logits.clear();
    }
    total = total + result.output.aux_loss.to(torch::kFloat);
  }
  result.output.logits = torch::Tensor();
  result.grad_norm = backward_and_step(total, model, optimizer, grad_clip);
  result.loss = loss.detach();
  result.aux_loss = result.output.aux_loss.detach();
  return result;
}

}  // namespace routelab
