// The training step: autocast forward, fp32 loss, backward, global-norm clip, optimizer step.
#include "core/train/step.h"

#include <optional>

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include "core/dist/grad_sync.h"
#include "core/models/blocks/part_scope.h"
#include "core/models/blocks/residual_probe.h"
#include "core/train/fused_cross_entropy.h"
#include "core/train/optimizer.h"
#include "core/util/errors.h"

namespace routelab {

torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& target, const torch::Tensor& mask) {
  ROUTELAB_PART("loss");
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

AutocastOff::AutocastOff(const torch::Device& device) : cuda_(device.is_cuda()), previous_(autocast_enabled(cuda_)) {
  set_autocast(cuda_, false);
}

AutocastOff::~AutocastOff() { set_autocast(cuda_, previous_); }

void zero_grads(torch::nn::Module& model) {
  // Zeroed in place, not dropped (LibTorch 2.x's zero_grad default): a parameter that no token reached this step
  // still gets AdamW's decay and momentum update, the same on every LibTorch.
  ROUTELAB_PART("optimizer");
  std::vector<torch::Tensor> grads;
  for (const auto& p : model.parameters())
    if (p.grad().defined()) grads.push_back(p.grad());
  if (!grads.empty()) at::_foreach_zero_(grads);
}

torch::Tensor clip_and_step(torch::nn::Module& model, torch::optim::Optimizer& optimizer, double grad_clip,
                            const torch::Tensor& skip) {
  ROUTELAB_PART("optimizer");
  if (skip.defined()) {
    auto* adamw = dynamic_cast<MultiTensorAdamW*>(&optimizer);
    if (!adamw)
      throw ConfigError("a step whose forward may overflow its routed shapes needs RouteLab's AdamW (fused kernel)");
    adamw->skip_next_step_if(skip);
  }
  const auto grad_norm = clip_grad_norm(model.parameters(), grad_clip);
  optimizer.step();
  return grad_norm;
}

torch::Tensor backward_and_step(const torch::Tensor& total, torch::nn::Module& model,
                                torch::optim::Optimizer& optimizer, double grad_clip, const torch::Tensor& skip) {
  zero_grads(model);
  total.backward();
  return clip_and_step(model, optimizer, grad_clip, skip);
}

Batch batch_rows(const Batch& b, std::int64_t start, std::int64_t rows) {
  return {b.input.narrow(0, start, rows), b.target.narrow(0, start, rows),
          b.loss_mask.defined() ? b.loss_mask.narrow(0, start, rows) : torch::Tensor()};
}

namespace {

/// The forward of one (micro-)batch and its losses: the final head's CE, and the CE term to back-propagate (the
/// mean over every head for early exit).
struct MicroPass {
  ModelOutput output;
  torch::Tensor loss, lm_total, aux;
};

MicroPass forward_losses(LanguageModel& model, const Batch& batch, bool bf16, bool trace, const Teacher* teacher) {
  MicroPass p;
  AutocastGuard autocast(bf16, batch.input.device());
  const bool match_layers = teacher && teacher->hidden_weight > 0;
  std::vector<torch::Tensor> student_states;
  {
    std::optional<LayerStateProbe> probe;
    if (match_layers) probe.emplace(/*keep_graph=*/true);
    p.output = model.forward(batch.input, trace);
    if (probe) student_states = std::move(probe->states);
  }
  ROUTELAB_PART("loss");  // the losses from the logits (a teacher's forward: its model's parts)
  p.loss = lm_loss(p.output.logits, batch.target, batch.loss_mask);
  p.lm_total = p.loss;
  if (teacher) {
    torch::Tensor teacher_logits;
    std::vector<torch::Tensor> teacher_states;
    {
      torch::NoGradGuard no_grad;
      std::optional<LayerStateProbe> probe;
      if (match_layers) probe.emplace();
      teacher_logits = teacher->model->forward(batch.input, false).logits;  // (B, T, V)
      if (probe) teacher_states = std::move(probe->states);
    }
    const auto kl = distill_kl(p.output.logits, teacher_logits, batch.loss_mask);
    p.lm_total = p.lm_total + teacher->weight * kl;
    if (trace) p.output.stats["distill_kl"] = kl.item<double>();
    if (match_layers) {
      const auto hidden = distill_hidden_loss(student_states, teacher_states, batch.loss_mask);
      p.lm_total = p.lm_total + teacher->hidden_weight * hidden;
      if (trace) p.output.stats["distill_hidden"] = hidden.item<double>();
    }
  }
  if (!p.output.exit_logits.empty()) {  // uniform mean over every head (early exit)
    for (const auto& exit : p.output.exit_logits)
      p.lm_total = p.lm_total + lm_loss(exit, batch.target, batch.loss_mask);
    p.lm_total = p.lm_total / static_cast<double>(p.output.exit_logits.size() + 1);
    p.output.exit_logits.clear();
  }
  p.aux = p.output.aux_loss.to(torch::kFloat);
  return p;
}

}  // namespace

StepResult train_step(LanguageModel& model, torch::optim::Optimizer& optimizer, const Batch& batch, double grad_clip,
                      bool bf16, bool trace, std::int64_t micro_batches, const Teacher* teacher,
                      const StepShare* share) {
  const auto rows = batch.input.size(0);
  if (micro_batches < 1 || rows % micro_batches != 0)
    throw ConfigError("train.grad_accum: " + std::to_string(micro_batches) + " micro-batches do not divide a batch of " +
                      std::to_string(rows) + " sequences");
  StepResult result;
  if (micro_batches == 1 && !share) {
    auto p = forward_losses(model, batch, bf16, trace, teacher);
    p.output.logits = torch::Tensor();
    result.grad_norm =
        backward_and_step(ROUTELAB_IN_PART("loss", p.lm_total + p.aux), model, optimizer, grad_clip, p.output.overflow);
    result.loss = p.loss.detach();
    result.aux_loss = p.output.aux_loss.detach();
    result.output = std::move(p.output);
    return result;
  }
  const auto rows_each = rows / micro_batches;
  // Each micro-batch's mean loss weighs by its share of the step's counted positions (1/k without a mask, or its
  // share of the step's rows over every rank), so the accumulated gradient is that of the step's mean.
  const auto counted = share ? share->global_counted
                       : batch.loss_mask.defined() ? batch.loss_mask.sum().to(torch::kFloat).clamp_min(1.0)
                                                   : torch::Tensor();
  const double row_share = share ? static_cast<double>(rows_each) / static_cast<double>(share->global_rows) : 0.0;
  zero_grads(model);
  std::vector<ModelOutput> outputs;
  torch::Tensor loss, aux;
  for (std::int64_t i = 0; i < micro_batches; ++i) {
    const auto micro = batch_rows(batch, i * rows_each, rows_each);
    auto p = forward_losses(model, micro, bf16, trace, teacher);
    p.output.logits = torch::Tensor();
    const auto k = static_cast<double>(micro_batches);
    const auto weight = counted.defined() ? micro.loss_mask.sum().to(torch::kFloat) / counted : torch::Tensor();
    const auto weigh = [&](const torch::Tensor& t) {
      return weight.defined() ? t * weight : share ? t * row_share : t / k;
    };
    const auto weigh_aux = [&](const torch::Tensor& t) { return share ? t * row_share : t / k; };
    if (share && share->sync && i + 1 == micro_batches) share->sync->arm();  // the last pass sends the gradients
    (weigh(p.lm_total) + weigh_aux(p.aux)).backward();
    const auto weighted = weigh(p.loss.detach()), aux_part = weigh_aux(p.output.aux_loss.detach());
    loss = loss.defined() ? loss + weighted : weighted;
    aux = aux.defined() ? aux + aux_part : aux_part;
    outputs.push_back(std::move(p.output));
  }
  if (share && share->sync) share->sync->finish();
  result.output = merge_micro_batches(std::move(outputs));
  result.grad_norm = clip_and_step(model, optimizer, grad_clip, result.output.overflow);
  result.loss = loss;
  result.aux_loss = aux;
  return result;
}

}  // namespace routelab
