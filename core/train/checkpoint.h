// Checkpoints: model, optimizer, RNG, step and the resolved config in one file, written atomically.
#pragma once
#include <string>

#include <torch/torch.h>

#include "core/models/language_model.h"

namespace routelab {

struct CheckpointMeta {
  std::int64_t step = 0;
  std::int64_t tokens_seen = 0;
  double elapsed_s = 0;
  std::string config_json;
  std::string tokenizer_json;
};

/// Writes to `path` (via a temporary file and rename: a crash never leaves a torn checkpoint). Returns bytes.
/// `model` is any module (a LanguageModel or a SequenceClassifier).
std::int64_t save_checkpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                             const CheckpointMeta& meta);

/// Loads weights (and optimizer state and the default CPU RNG when `optimizer` is given) into an already
/// built model of the same config. Shape or key mismatches are CheckpointErrors naming the file.
CheckpointMeta load_checkpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer* optimizer,
                               torch::Device device = torch::kCPU);

}  // namespace routelab
