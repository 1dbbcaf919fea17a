// Early exit (Elbayad et al. 2020; the baseline of TSA §3.5): a dense trunk with an output head after every
// block, all tied to the token embedding and trained with the uniform mean of their cross-entropies; at inference a
// token leaves after the first block whose head is confident enough, and its frozen state stays visible to the
// deeper blocks as keys and values (state copying).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/models/blocks/norm.h"
#include "core/models/dense_transformer.h"
#include "core/models/registry.h"

namespace routelab {

/// Options of the exits on top of the shared TransformerOptions.
struct EarlyExitOptions {
  /// 1.0: eval-only confidence threshold τ (no parameters): a token exits after the first block whose head's
  /// max softmax probability is >= τ. Any τ >= 1 disables exiting (the full model), so a fresh run is evaluated
  /// as the full model; τ = 0 exits every token after the first block.
  TORCH_ARG(double, exit_threshold) = 1.0;
  /// false: each earlier exit has its own final norm (exit_norms.<l>); true: every exit reuses final_norm
  TORCH_ARG(bool, shared_exit_norm) = false;
};

/// The options bound to their model.* keys (the schema after the shared options).
const OptionTable<EarlyExitOptions>& early_exit_options_table();

/// Forward FLOPs that block l >= 1 needs when only some tokens are still active: K/V projections for every
/// token (deeper queries read the frozen states of exited ones), the query projection, the scores of the
/// active queries over the whole sequence (the square convention of dense_layer_flops), the output projection
/// and the MLP for the active tokens. `active` holds the active tokens of each sequence.
double early_exit_block_flops(std::int64_t seq, const std::vector<std::int64_t>& active, const LayerShape& shape);

class EarlyExitTransformer : public TransformerTrunk {
 public:
  EarlyExitTransformer(TransformerOptions transformer, EarlyExitOptions options = {});
  /// Training: every token runs every block; logits = the last head, exit_logits = the L-1 earlier heads.
  /// Eval with τ < 1: confidence-based exiting; exit_logits stays empty. token_data["exit_layer"] (B, T) int64
  /// holds the block after which each token left (L-1: it ran them all) when tracing.
  ModelOutput forward(const torch::Tensor& tokens, bool trace = false) override;
  std::string arch_id() const override { return "early-exit"; }
  /// State copying at decode time: a token that exited keeps its frozen state, and every deeper block still caches
  /// the keys/values projected from it, so every block's cache holds every token. token_data["exit_layer"] (B, n).
  std::unique_ptr<DecodeState> begin_decode(std::int64_t batch) override;
  torch::Tensor decode(DecodeState& state, const torch::Tensor& tokens, DecodeTrace* trace = nullptr) override;
  std::string describe() const override;

  const EarlyExitOptions& exit_options() const { return exit_options_; }
  /// Eval-only switch (no parameters change), e.g. for a threshold sweep on one trained model.
  void set_exit_threshold(double threshold) { exit_options_.exit_threshold(threshold); }
  /// Logits (B, T, V) of the head after block l (l = L-1: the model's own head).
  torch::Tensor exit_head(std::size_t l, const torch::Tensor& x);

  std::vector<DenseBlock> blocks;  ///< blocks.<i>
  std::vector<Norm> exit_norms;    ///< exit_norms.<l> for l = 0..L-2; empty with shared_exit_norm

 private:
  bool exiting() const { return !is_training() && exit_options_.exit_threshold() < 1.0; }

  EarlyExitOptions exit_options_;
};

ArchitectureEntry early_exit_architecture();

}  // namespace routelab
