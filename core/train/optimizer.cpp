// Parameter groups follow GPT-style practice (TSA App. A): no decay on biases, norms and embeddings.
// The update is torch::optim::AdamW's, issued once per parameter group (PyTorch's foreach / fused AdamW).
#include "core/train/optimizer.h"

#include <cmath>
#include <map>
#include <sstream>
#include <tuple>
#include <type_traits>

#include <torch/version.h>

#include "core/util/errors.h"

// at::_fused_adamw_ exists on CUDA from 2.0 and on the CPU from 2.4; the Tensor-scale _foreach_mul_ from 2.1.
#define ROUTELAB_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))
#define ROUTELAB_HAS_FUSED_ADAMW ROUTELAB_TORCH_AT_LEAST(2, 4)
#define ROUTELAB_HAS_FOREACH_MUL_TENSOR ROUTELAB_TORCH_AT_LEAST(2, 1)

namespace routelab {

double lr_at(std::int64_t step, std::int64_t total, std::int64_t warmup, double lr, double min_lr) {
  if (warmup > 0 && step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (total <= warmup) return lr;
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(total - warmup));
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

namespace {

/// One group's parameters that have a gradient on one device and dtype, with their state tensors.
struct Bucket {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  std::vector<std::int64_t> steps;  ///< after this step's increment
};

}  // namespace

MultiTensorAdamW::MultiTensorAdamW(std::vector<torch::optim::OptimizerParamGroup> groups,
                                   torch::optim::AdamWOptions defaults, AdamWKernel kernel)
    : torch::optim::AdamW(std::move(groups), defaults), kernel_(kernel) {
  if (defaults.amsgrad()) throw ConfigError("MultiTensorAdamW: amsgrad is not supported");
  if (kernel_ == AdamWKernel::Fused && !fused_available())
    throw ConfigError("MultiTensorAdamW: this LibTorch (" TORCH_VERSION ") has no fused AdamW kernel");
}

bool MultiTensorAdamW::fused_available() { return ROUTELAB_HAS_FUSED_ADAMW; }

AdamWKernel MultiTensorAdamW::default_kernel() {
  return fused_available() ? AdamWKernel::Fused : AdamWKernel::Foreach;
}

void MultiTensorAdamW::keep_learning_rates_on_device() {
  if (kernel_ != AdamWKernel::Fused)
    throw ConfigError("MultiTensorAdamW: learning rates on the device need the fused kernel (LibTorch >= 2.4)");
  device_lrs_.clear();
  for (auto& group : param_groups()) {
    const auto device = group.params().empty() ? torch::Device(torch::kCPU) : group.params().front().device();
    // fp32: what the kernel reads (the scalar path's double rate is rounded to fp32 there too).
    device_lrs_.push_back(torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(device)));
  }
  stage_learning_rates();
}

void MultiTensorAdamW::stage_learning_rates() {
  for (std::size_t i = 0; i < device_lrs_.size(); ++i)
    device_lrs_[i].fill_(static_cast<const torch::optim::AdamWOptions&>(param_groups()[i].options()).lr());
}

void MultiTensorAdamW::skip_next_step_if(const torch::Tensor& flag) {
  if (kernel_ != AdamWKernel::Fused)
    throw ConfigError("MultiTensorAdamW: skipping a step on a flag on the device needs the fused kernel (LibTorch >= "
                      "2.4)");
  skip_flag_ = flag.to(torch::kFloat);
}

void MultiTensorAdamW::count_replayed_step(std::int64_t steps) {
  for (auto& group : param_groups())
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& state = static_cast<torch::optim::AdamWParamState&>(*state_.at(state_key(state_, p)));
      state.step(state.step() + steps);
      if (auto found = step_tensors_.find(p.unsafeGetTensorImpl()); found != step_tensors_.end())
        found->second.first = state.step();
    }
}

torch::Tensor MultiTensorAdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  const auto skip = std::exchange(skip_flag_, torch::Tensor());
  for (std::size_t group_index = 0; group_index < param_groups().size(); ++group_index) {
    auto& group = param_groups()[group_index];
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    const double lr = o.lr(), wd = o.weight_decay(), eps = o.eps();
    const auto [beta1, beta2] = o.betas();
    // Parameters on different devices or of different dtypes cannot share one multi-tensor call.
    std::map<std::tuple<int, int, int>, Bucket> buckets;  // (device type, device index, dtype)
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& slot = state_[state_key(state_, p)];
      if (!slot) {
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& state = static_cast<torch::optim::AdamWParamState&>(*slot);
      state.step(state.step() + 1);
      auto& b = buckets[{static_cast<int>(p.device().type()), p.device().index(), static_cast<int>(p.scalar_type())}];
      b.params.push_back(p);
      b.grads.push_back(p.grad());
      b.exp_avgs.push_back(state.exp_avg());
      b.exp_avg_sqs.push_back(state.exp_avg_sq());
      b.steps.push_back(state.step());
    }
    for (auto& [where, b] : buckets) {
#if ROUTELAB_HAS_FUSED_ADAMW
      if (kernel_ == AdamWKernel::Fused) {
        std::vector<torch::Tensor> steps;
        steps.reserve(b.params.size());
        for (std::size_t i = 0; i < b.params.size(); ++i) {
          auto& [count, tensor] = step_tensors_[b.params[i].unsafeGetTensorImpl()];
          if (!tensor.defined() || count != b.steps[i] - 1)  // new, or the state was loaded or rewound
            tensor = torch::full({}, static_cast<double>(b.steps[i] - 1),
                                 torch::TensorOptions().dtype(torch::kFloat).device(b.params[i].device()));
          count = b.steps[i];
          steps.push_back(tensor);
        }
        at::_foreach_add_(steps, 1);  // the kernel reads the count after this step, as PyTorch's fused AdamW
        const auto found_inf = skip.defined() ? c10::optional<at::Tensor>(skip) : c10::nullopt;
        if (!device_lrs_.empty())
          at::_fused_adamw_(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, {}, steps, device_lrs_[group_index], beta1,
                            beta2, wd, eps, /*amsgrad=*/false, /*maximize=*/false, c10::nullopt, found_inf);
        else
          at::_fused_adamw_(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, {}, steps, lr, beta1, beta2, wd, eps,
                            /*amsgrad=*/false, /*maximize=*/false, c10::nullopt, found_inf);
        // A skipped step leaves the counts too (as PyTorch's fused AdamW after a GradScaler's found_inf).
        if (skip.defined()) at::_foreach_sub_(steps, std::vector<torch::Tensor>(steps.size(), skip));
        continue;
      }
#endif
      // torch::optim::AdamW's arithmetic, operation for operation: decoupled decay, moments, bias-corrected step.
      std::vector<at::Scalar> denom_scale, step_size;
      for (const auto s : b.steps) {
        denom_scale.emplace_back(std::sqrt(1.0 - std::pow(beta2, static_cast<double>(s))));
        step_size.emplace_back(-lr / (1.0 - std::pow(beta1, static_cast<double>(s))));
      }
      if (wd != 0) at::_foreach_mul_(b.params, 1.0 - lr * wd);
      at::_foreach_mul_(b.exp_avgs, beta1);
      at::_foreach_add_(b.exp_avgs, b.grads, 1.0 - beta1);
      at::_foreach_mul_(b.exp_avg_sqs, beta2);
      at::_foreach_addcmul_(b.exp_avg_sqs, b.grads, b.grads, 1.0 - beta2);
      auto denom = at::_foreach_sqrt(b.exp_avg_sqs);
      at::_foreach_div_(denom, denom_scale);
      at::_foreach_add_(denom, eps);
      at::_foreach_addcdiv_(b.params, b.exp_avgs, denom, step_size);
    }
  }
  return loss;
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return torch::zeros({});
  torch::NoGradGuard no_grad;
  const auto norms = at::_foreach_norm(grads, 2);  // one norm per gradient, (P) 0-dim tensors
  const auto total = norms.size() == 1 ? norms[0] : torch::stack(norms).norm();
  if (max_norm > 0) {
    const auto scale = (max_norm / (total + 1e-6)).clamp_max(1.0);  // 1.0 leaves a gradient bit for bit
#if ROUTELAB_HAS_FOREACH_MUL_TENSOR
    at::_foreach_mul_(grads, scale);
#else
    at::_foreach_mul_(grads, scale.item<double>());  // LibTorch 1.x: CPU only in practice, where reading is free
#endif
  }
  return total;
}

namespace {

/// AdamW over the decay / no-decay groups of any model type with a decays(name, parameter) rule.
template <typename Model>
std::unique_ptr<MultiTensorAdamW> grouped_adamw(Model& model, const nlohmann::json& train) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& item : model.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    (model.decays(item.key(), item.value()) ? decay : no_decay).push_back(item.value());
  }
  auto defaults = torch::optim::AdamWOptions(train.at("lr").get<double>())
                      .betas({train.at("beta1").get<double>(), train.at("beta2").get<double>()})
                      .eps(train.at("eps").get<double>())
                      .weight_decay(train.at("weight_decay").get<double>());
  auto no_decay_options = std::make_unique<torch::optim::AdamWOptions>(defaults);
  no_decay_options->weight_decay(0.0);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(defaults));
  groups.emplace_back(no_decay, std::move(no_decay_options));
  return std::make_unique<MultiTensorAdamW>(std::move(groups), defaults);
}

}  // namespace

std::unique_ptr<MultiTensorAdamW> make_optimizer(LanguageModel& model, const nlohmann::json& train) {
  return grouped_adamw(model, train);
}

std::unique_ptr<MultiTensorAdamW> make_optimizer(SequenceClassifier& model, const nlohmann::json& train) {
  return grouped_adamw(model, train);
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
}

}  // namespace routelab
