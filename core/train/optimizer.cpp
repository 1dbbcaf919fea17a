// Parameter groups follow GPT-style practice (seed 003 App. A): no decay on biases, norms and embeddings.
#include "core/train/optimizer.h"

#include <cmath>

namespace routelab {

double lr_at(std::int64_t step, std::int64_t total, std::int64_t warmup, double lr, double min_lr) {
  if (warmup > 0 && step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (total <= warmup) return lr;
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(total - warmup));
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

namespace {

/// AdamW over the decay / no-decay groups of any model type with a decays(name, parameter) rule.
template <typename Model>
std::unique_ptr<torch::optim::AdamW> grouped_adamw(Model& model, const nlohmann::json& train) {
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
  return std::make_unique<torch::optim::AdamW>(std::move(groups), defaults);
}

}  // namespace

std::unique_ptr<torch::optim::AdamW> make_optimizer(LanguageModel& model, const nlohmann::json& train) {
  return grouped_adamw(model, train);
}

std::unique_ptr<torch::optim::AdamW> make_optimizer(SequenceClassifier& model, const nlohmann::json& train) {
  return grouped_adamw(model, train);
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
}

}  // namespace routelab
