// AdamW with decay / no-decay parameter groups and the warm-up + cosine learning-rate schedule.
#pragma once
#include <memory>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/models/classifier.h"
#include "core/models/language_model.h"

namespace routelab {

/// Learning rate at (0-based) step `step`: linear warm-up from 0 to lr over `warmup` steps, then cosine
/// decay to min_lr at `total`. A pure function of the step, so resume needs no scheduler state.
double lr_at(std::int64_t step, std::int64_t total, std::int64_t warmup, double lr, double min_lr);

/// AdamW over two groups: matrices of linear layers decay by train.weight_decay; norms, biases and
/// embeddings (LanguageModel::decays) do not.
std::unique_ptr<torch::optim::AdamW> make_optimizer(LanguageModel& model, const nlohmann::json& train);
/// The same groups for a classifier (SequenceClassifier::decays).
std::unique_ptr<torch::optim::AdamW> make_optimizer(SequenceClassifier& model, const nlohmann::json& train);

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace routelab
