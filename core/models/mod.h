// Mixture-of-Depths (Raposo et al. 2024; the MoD baseline of DTRNet): on routed layers an expert-choice
// top-k of each sequence runs the whole block, scaled by its router weight; the rest skip it. A causal
// predictor replaces the non-causal top-k at evaluation and generation.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/models/blocks/routing.h"
#include "core/models/dense_transformer.h"
#include "core/models/registry.h"

namespace routelab {

/// The router weight that scales the block's update of a selected token.
enum class MoDRouterWeight {
  Sigmoid,  ///< w = sigmoid(router logit), as the DTRNet repo's MoD
  Logit,    ///< r = w_theta^T x, the raw logit, as Raposo et al. write it
};

/// How a selected token's new value is formed from its block update f(x).
enum class MoDResidual {
  Paper,      ///< x + w f(x) (Raposo et al.)
  Reference,  ///< (1 + w) x + w f(x): the DTRNet repo scales the block's output including its residual
};

/// Options of the routing on top of the shared TransformerOptions.
struct MoDOptions {
  /// "alternate": odd layers routed (T-M-T-M, DTRNet and the DTRNet repo); any parse_layer_pattern spec
  TORCH_ARG(std::string, routed_layers) = "alternate";
  /// 0.125: fraction of each sequence a routed layer processes, k = floor(capacity T) (paper 0.125,
  /// DTRNet's matched-FLOPs baseline 0.7); in (0, 1]
  TORCH_ARG(double, capacity) = 0.125;
  /// Sigmoid: w = sigmoid(router logit), as the DTRNet repo; Logit gives Raposo et al.'s raw r
  TORCH_ARG(MoDRouterWeight, router_weight) = MoDRouterWeight::Sigmoid;
  /// Paper: x + w f(x); Reference gives the DTRNet repo's (1 + w) x + w f(x)
  TORCH_ARG(MoDResidual, residual) = MoDResidual::Paper;
  /// 1.0: weight of the mean over routed layers of the predictor's BCE in the auxiliary loss
  TORCH_ARG(double, predictor_coeff) = 1.0;
};

/// MoD's options bound to their model.* keys (the schema after the shared options).
const OptionTable<MoDOptions>& mod_options_table();

/// k = floor(capacity T) tokens per sequence of length T.
std::int64_t mod_capacity_tokens(double capacity, std::int64_t seq_len);

/// One routed layer: a dense block that only the selected tokens run, its router and its causal predictor.
class MoDLayerImpl : public torch::nn::Module {
 public:
  MoDLayerImpl(const TransformerOptions& transformer, const MoDOptions& options, std::int64_t layer_index);

  /// x: (B, T, C), positions: (T) absolute positions -> (B, T, C). In training the top-k decides and
  /// `predictor_loss` receives the predictor's BCE against it; in eval mode the predictor decides and
  /// `predictor_loss` is left undefined. `trace` (when not null) is filled with this layer's routing.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& positions, torch::Tensor& predictor_loss,
                        LayerTrace* trace = nullptr);
  /// Incremental step in eval mode: the predictor selects among the new rows x (B, n, C); only selected tokens run
  /// the block and enter `cache`. `decision` and `gate` (B, n) receive the selection and sigmoid(router logit).
  torch::Tensor decode(const torch::Tensor& x, const torch::Tensor& positions, KVCache& cache, torch::Tensor& decision,
                       torch::Tensor& gate);
  /// (B, T, C) -> (B, T) float router logits.
  torch::Tensor router_logits(const torch::Tensor& x);

  EvalSizing sizing;  ///< eval mode: the compaction sized from earlier forwards (nothing read back)

  MoDOptions options;
  LayerShape shape;
  DenseBlock block{nullptr};
  torch::nn::Linear router{nullptr};  // C -> 1, on the raw residual stream
  CausalPredictor predictor{nullptr};
};
TORCH_MODULE(MoDLayer);

class MixtureOfDepths : public TransformerTrunk {
 public:
  MixtureOfDepths(TransformerOptions transformer, MoDOptions options = {});
  ModelOutput forward(const torch::Tensor& tokens, bool trace = false) override;
  std::string arch_id() const override { return "mod"; }
  std::unique_ptr<DecodeState> begin_decode(std::int64_t batch) override;
  torch::Tensor decode(DecodeState& state, const torch::Tensor& tokens, DecodeTrace* trace = nullptr) override;
  std::string describe() const override;

  const MoDOptions& mod_options() const { return mod_options_; }
  /// Which layers route (from MoDOptions::routed_layers).
  const std::vector<bool>& routed() const { return routed_; }

  /// Layer i is dense_blocks[i] when dense and mod_layers[i] when routed; the other holder is empty.
  /// Both live in the module list "blocks": blocks.<i>.* (dense), blocks.<i>.block.* / router / predictor.
  std::vector<DenseBlock> dense_blocks;
  std::vector<MoDLayer> mod_layers;

 private:
  /// After the layers: reads back once the counts of the layers whose compaction was sized, fills their routed
  /// fractions and token counts in `trace` (when given), and sizes their next forward of `tokens` tokens. False when a
  /// sequence routed more tokens than its layer's rows held: the forward must run again, counting exactly.
  bool settle_sized_layers(std::vector<LayerTrace>* trace, std::int64_t tokens);

  MoDOptions mod_options_;
  std::vector<bool> routed_;
};

ArchitectureEntry mod_architecture();

}  // namespace routelab
