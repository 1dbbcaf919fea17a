// Layer-wise cosine similarity of token representations (DTRNet, Figure 1): run a trained model on the
// trainer's fixed validation batches, take every layer's output hidden state per token and average, over the
// tokens, the cosine similarity between the states of each pair of layers. The per-layer outputs come from the
// forward itself, through a LayerStateProbe.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/analysis/run_analysis.h"

namespace routelab {

/// The output hidden state of every layer, (B, T, C) each, for tokens (B, T), as the model's own forward computes
/// them in eval mode (the inference routing), reported through a LayerStateProbe. Radial's "layers" are its routing
/// steps (max_depth of them; a token that exited keeps its state). A model that reports no states is a
/// ConfigError naming its architecture.
std::vector<torch::Tensor> layer_outputs(LanguageModel& model, const torch::Tensor& tokens);

/// cos(h_i(t), h_j(t)) averaged over tokens t, for every pair of layers: states is L tensors (B, T, C);
/// returns (L, L) float64, symmetric, diagonal 1 (rows with a zero state count 0).
torch::Tensor mean_token_cosine(const std::vector<torch::Tensor>& states);

struct LayerSimilarityOptions {
  Split split = Split::Val;
  std::int64_t batches = 2;       ///< the trainer's fixed evaluation batches
  std::int64_t batch_size = 0;    ///< 0 = the run's train.batch_size
};

struct LayerSimilarity {
  std::int64_t run_id = 0, step = 0, tokens = 0;
  std::string name, arch;
  std::int64_t layers = 0;
  std::vector<double> cosine;     ///< layers x layers, row-major
  double at(std::int64_t i, std::int64_t j) const { return cosine[static_cast<std::size_t>(i * layers + j)]; }
};

/// Mean token cosine similarity between layer outputs over `options.batches` evaluation batches (every token
/// weighs the same).
LayerSimilarity layer_similarity(LoadedRun& run, const LayerSimilarityOptions& options = {});

}  // namespace routelab
