// Token-Adaptive Gated Attention Transformer (TAGAT §4-§5, architectures.md §5): per layer a token-wise gate
// picks the top-k of N attention experts (complete post-LN encoder blocks), each expert's output is FiLM-modulated
// per token, the renormalised gate weights mix them, h = LayerNorm(x + y); the [CLS] state feeds a linear head.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config/option_table.h"
#include "core/models/blocks/encoder_block.h"
#include "core/models/classifier.h"
#include "core/models/registry.h"

namespace routelab {

enum class FilmKind {
  OnePlusGamma,  ///< (1 + γ) ⊙ M_i + β: the expert passes through at init (our default)
  Raw,           ///< γ ⊙ M_i + β as in the paper: γ ≈ small at init, so experts start suppressed
};
enum class TagatDispatch {
  Sparse,  ///< each expert's queries and FFN run only on the tokens routed to it (keys/values: whole sequence)
  Dense,   ///< every expert on every token, unselected weights zero: the test oracle
};
enum class PositionalKind { Sinusoidal, Learned };
enum class BalanceScope {
  MeanLoad,  ///< Σ_i (ū_i − 1/N)² of the loads averaged over the layers: the paper's Listing 9
  PerLayer,  ///< the mean over layers of each layer's Σ_i (u_i − 1/N)²: no layer can hide a dead expert
};

struct TagatOptions {
  TagatOptions(std::int64_t vocab_size, std::int64_t num_classes, std::int64_t context)
      : vocab_size_(vocab_size), num_classes_(num_classes), context_(context) {}
  TORCH_ARG(std::int64_t, vocab_size);
  TORCH_ARG(std::int64_t, num_classes);
  /// longest sequence (positional table size)
  TORCH_ARG(std::int64_t, context);
  /// 1: gated modular layers (the paper's Config)
  TORCH_ARG(std::int64_t, n_layer) = 1;
  /// 128: width d
  TORCH_ARG(std::int64_t, n_embd) = 128;
  /// 4: attention heads per expert
  TORCH_ARG(std::int64_t, n_head) = 4;
  /// 4: experts N per layer
  TORCH_ARG(std::int64_t, n_experts) = 4;
  /// 2: experts per token
  TORCH_ARG(std::int64_t, top_k) = 2;
  /// 0.1: FFN dropout inside the experts (paper listing) and before the head (paper §5.8)
  TORCH_ARG(double, dropout) = 0.1;
  /// OnePlusGamma
  TORCH_ARG(FilmKind, film) = FilmKind::OnePlusGamma;
  /// 1: λ_ent of the routing-entropy loss (minimised)
  TORCH_ARG(double, lambda_ent) = 1.0;
  /// 1: λ_bal of the L2 load-balance loss
  TORCH_ARG(double, lambda_bal) = 1.0;
  /// MeanLoad (the paper's Listing 9)
  TORCH_ARG(BalanceScope, balance) = BalanceScope::MeanLoad;
  /// Sparse
  TORCH_ARG(TagatDispatch, dispatch) = TagatDispatch::Sparse;
  /// Sinusoidal (the paper's code)
  TORCH_ARG(PositionalKind, positional) = PositionalKind::Sinusoidal;
  /// false: a learned segment embedding (sentence a / b) added to the input; the seed uses none
  TORCH_ARG(bool, segments) = false;
};

/// The options bound to their model.* keys (vocab_size, num_classes and context come from the data).
const OptionTable<TagatOptions>& tagat_options_table();
TagatOptions tagat_options_from_json(const nlohmann::json& model, std::int64_t vocab_size, std::int64_t num_classes,
                                     std::int64_t context);

/// What one gate decided: the paper's sparse softmax over the top-k logits (§4.2).
struct TopKGate {
  torch::Tensor weights;  ///< (B, T, k) renormalised g~ of the selected experts, summing to one
  torch::Tensor log_weights;  ///< (B, T, k) their logs (log-softmax over the k logits)
  torch::Tensor experts;  ///< (B, T, k) int64 ids, highest logit first
  torch::Tensor dense;    ///< (B, T, N) g~ scattered into the N experts (zero elsewhere)
};
TopKGate top_k_gate(const torch::Tensor& logits, std::int64_t k);

/// The routing losses of one layer over the real tokens (mask (B, T) bool): entropy = mean_t H_t with
/// H_t = -Σ_{i in topk} g~ log g~ (§4.6.2); load (N) = u_i = mean_t g~_{t,i} (§4.6.3; 0 where i is not selected).
struct RoutingLosses {
  torch::Tensor entropy;  ///< scalar
  torch::Tensor load;     ///< (N)
};
RoutingLosses routing_losses(const TopKGate& gate, const torch::Tensor& mask);
/// Σ_i (u_i - 1/N)² over the last dimension of loads (..., N): a scalar for one load vector.
torch::Tensor balance_loss(const torch::Tensor& load);

/// One gated modular layer: gate, N experts, N FiLM meta-networks, the output LayerNorm.
class GatedModularLayerImpl : public torch::nn::Module {
 public:
  explicit GatedModularLayerImpl(const TagatOptions& options);

  struct Output {
    torch::Tensor h;         ///< (B, T, C) LayerNorm(x + y)
    TopKGate gate;
    RoutingLosses losses;
    std::vector<std::int64_t> tokens_per_expert;  ///< (token, expert) queries each expert ran (sparse dispatch)
  };
  Output forward(const torch::Tensor& x, const torch::Tensor& mask);

  TagatOptions options;
  torch::nn::Linear gate{nullptr};  // C -> N
  std::vector<EncoderBlock> experts;
  std::vector<torch::nn::Linear> films;  // C -> 2C each: [γ, β]
  torch::nn::LayerNorm norm{nullptr};

 private:
  /// FiLM_i(expert output rows) with the meta-network reading the rows' layer inputs x_rows.
  torch::Tensor modulate(std::size_t i, const torch::Tensor& expert_rows, const torch::Tensor& x_rows);
};
TORCH_MODULE(GatedModularLayer);

class Tagat : public SequenceClassifier {
 public:
  explicit Tagat(TagatOptions options);
  ClassifierOutput forward(const torch::Tensor& input, const torch::Tensor& mask, const torch::Tensor& segment,
                           bool trace = false) override;
  std::string arch_id() const override { return "tagat"; }
  std::int64_t num_layers() const override { return options_.n_layer(); }
  std::int64_t num_classes() const override { return options_.num_classes(); }
  std::string describe() const override;
  const TagatOptions& options() const { return options_; }
  /// Switches dispatch without touching parameters (the dense oracle of the same weights).
  void set_dispatch(TagatDispatch dispatch);

  torch::nn::Embedding tok_emb{nullptr};
  torch::nn::Embedding pos_emb{nullptr};  ///< learned positions only
  torch::nn::Embedding seg_emb{nullptr};  ///< with segments only
  torch::Tensor pos_table;                ///< (context, C) sinusoidal buffer
  std::vector<GatedModularLayer> layers;
  torch::nn::Linear head{nullptr};        ///< C -> num_classes on [CLS]

  /// Forward FLOPs of one gated layer from its routing: `per_sequence` (B, N) real tokens of each sequence routed
  /// to each expert, `lengths` (B) real tokens per sequence (both double, CPU). An expert that runs computes K/V over
  /// the real tokens and queries, scores, FFN and FiLM for its own tokens; `dense`: the oracle's cost, every
  /// expert on every real token (the reference of the trace's FLOPs ratio).
  double layer_flops(const torch::Tensor& per_sequence, const torch::Tensor& lengths, bool dense) const;

 private:
  TagatOptions options_;
};

ArchitectureEntry tagat_architecture();

}  // namespace routelab
