// The training step: autocast forward, fp32 loss, backward, global-norm clip, optimizer step.
#include "core/train/step.h"

#include <ATen/autocast_mode.h>

namespace routelab {

torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& target, const torch::Tensor& mask) {
  const auto V = logits.size(-1);
  const auto flat_logits = logits.reshape({-1, V}).to(torch::kFloat);  // (B*T, V)
  const auto flat_target = target.reshape({-1});                       // (B*T)
  if (!mask.defined()) return torch::nn::functional::cross_entropy(flat_logits, flat_target);
  const auto per_token = torch::nn::functional::cross_entropy(
      flat_logits, flat_target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  const auto m = mask.reshape({-1}).to(torch::kFloat);
  return (per_token * m).sum() / m.sum().clamp_min(1.0);
}

AutocastGuard::AutocastGuard(bool enabled, const torch::Device& device) : enabled_(enabled), cuda_(device.is_cuda()) {
  if (!enabled_) return;
  if (cuda_) {
    previous_ = at::autocast::is_enabled();
    previous_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
    at::autocast::set_enabled(true);
  } else {
    previous_ = at::autocast::is_cpu_enabled();
    previous_dtype_ = at::autocast::get_autocast_cpu_dtype();
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::set_cpu_enabled(true);
  }
}

AutocastGuard::~AutocastGuard() {
  if (!enabled_) return;
  if (cuda_) {
    at::autocast::set_enabled(previous_);
    at::autocast::set_autocast_gpu_dtype(previous_dtype_);
  } else {
    at::autocast::set_cpu_enabled(previous_);
    at::autocast::set_autocast_cpu_dtype(previous_dtype_);
  }
  at::autocast::clear_cache();
}

double backward_and_step(const torch::Tensor& total, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                         double grad_clip) {
  optimizer.zero_grad();
  total.backward();
  std::vector<torch::Tensor> params = model.parameters();
  double grad_norm = 0.0;
  if (grad_clip > 0) {
    grad_norm = torch::nn::utils::clip_grad_norm_(params, grad_clip);
  } else {
    std::vector<torch::Tensor> norms;
    for (const auto& p : params)
      if (p.grad().defined()) norms.push_back(p.grad().norm());
    grad_norm = norms.empty() ? 0.0 : torch::stack(norms).norm().item<double>();
  }
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
