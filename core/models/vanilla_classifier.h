// The vanilla Transformer classifier of TAGAT §6.1.3: embeddings + sinusoidal positions, torch-style post-LN
// encoder layers, mean pooling over the real (non-padding) tokens, dropout, a linear head.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config/option_table.h"
#include "core/models/blocks/encoder_block.h"
#include "core/models/classifier.h"
#include "core/models/registry.h"

namespace routelab {

struct VanillaClassifierOptions {
  VanillaClassifierOptions(std::int64_t vocab_size, std::int64_t num_classes, std::int64_t context)
      : vocab_size_(vocab_size), num_classes_(num_classes), context_(context) {}
  TORCH_ARG(std::int64_t, vocab_size);
  TORCH_ARG(std::int64_t, num_classes);
  /// longest sequence (positional table size)
  TORCH_ARG(std::int64_t, context);
  /// 2 encoder layers (§6.1.3)
  TORCH_ARG(std::int64_t, n_layer) = 2;
  /// 128: width d
  TORCH_ARG(std::int64_t, n_embd) = 128;
  /// 4 heads
  TORCH_ARG(std::int64_t, n_head) = 4;
  /// 512: FFN width (the notebook's dim_feedforward)
  TORCH_ARG(std::int64_t, d_ff) = 512;
  /// 0.1: dropout inside the encoder layers (torch's default: attention probabilities, both residual updates, FFN)
  TORCH_ARG(double, dropout) = 0.1;
  /// 0.4: dropout on the pooled representation before the head (the notebook's baseline value)
  TORCH_ARG(double, pool_dropout) = 0.4;
};

/// The options bound to their model.* keys (vocab_size, num_classes and context come from the data).
const OptionTable<VanillaClassifierOptions>& vanilla_classifier_options_table();
VanillaClassifierOptions vanilla_classifier_options_from_json(const nlohmann::json& model, std::int64_t vocab_size,
                                                              std::int64_t num_classes, std::int64_t context);

/// Mean of h (B, T, C) over the positions where mask (B, T) is true -> (B, C).
torch::Tensor masked_mean(const torch::Tensor& h, const torch::Tensor& mask);

class VanillaClassifier : public SequenceClassifier {
 public:
  explicit VanillaClassifier(VanillaClassifierOptions options);
  ClassifierOutput forward(const torch::Tensor& input, const torch::Tensor& mask, const torch::Tensor& segment,
                           bool trace = false) override;
  std::string arch_id() const override { return "vanilla-classifier"; }
  std::int64_t num_layers() const override { return options_.n_layer(); }
  std::int64_t num_classes() const override { return options_.num_classes(); }

  torch::nn::Embedding tok_emb{nullptr};
  torch::Tensor pos_table;  ///< (context, C) sinusoidal buffer
  std::vector<EncoderBlock> layers;
  torch::nn::Linear head{nullptr};

 private:
  VanillaClassifierOptions options_;
};

ArchitectureEntry vanilla_classifier_architecture();

}  // namespace routelab
