// Token-Selective Attention (TSA, §2 and §3.6): a stem block, then a small router after every block whose
// halting probability p softly gates both residual updates of the next block; at inference either the same soft
// gate or sparse execution, where halted tokens (p > 0.5) skip the FFN through gather/scatter.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/models/blocks/routing.h"
#include "core/models/dense_transformer.h"
#include "core/models/registry.h"

namespace routelab {

/// How an eval-mode forward uses the halting probabilities (training is always soft).
enum class TsaInference {
  Soft,    ///< h += (1 - p) Δ for both sub-blocks, as in training (§2.3)
  Sparse,  ///< §3.6: h += 1[p <= 0.5] (1 - p) Δ; the FFN runs only on the active rows, attention stays dense
};

/// Options of the routing on top of the shared TransformerOptions.
struct TsaOptions {
  /// 0.001: λ of the depth regulariser λ (1/(L-1)) Σ_l mean(1 - p_l) (eq. 5; the paper's language setting)
  TORCH_ARG(double, depth_coeff) = 0.001;
  /// Soft: eval-mode forwards gate softly as in training; Sparse gives §3.6's sparse execution
  TORCH_ARG(TsaInference, inference) = TsaInference::Soft;
};

/// The options bound to their model.* keys (the schema after the shared options).
const OptionTable<TsaOptions>& tsa_options_table();

/// Hidden width of a router: max(d/4, 16) (§2.2).
std::int64_t tsa_router_hidden(std::int64_t n_embd);

/// α = (1/(L-1)) Σ_l active_l over the L-1 routing decisions (eq. 6) and the TLOps saving
/// Δ = 1 - (1 + (L-1) α) / L (eq. 7), the stem counted as always active. Also used by early exit.
struct Tlops {
  double alpha = 1.0;
  double saved = 0.0;
};
/// `active`: the mean active share of each routed block (L-1 values for L layers).
Tlops tlops_from_active(const std::vector<double>& active);
/// Δ (eq. 7) from α over `routed` = L-1 routing decisions: of a double, or of a 0-dim tensor left on the device.
template <typename Alpha>
Alpha tlops_saved(const Alpha& alpha, double routed) {
  return 1.0 - (1.0 + routed * alpha) / (routed + 1.0);
}

/// r_l(h) = sigmoid(W2 ReLU(W1 h + b1) + b2) (eq. 2), read from the raw residual stream after block l.
class TsaRouterImpl : public torch::nn::Module {
 public:
  explicit TsaRouterImpl(std::int64_t n_embd);
  /// (B, T, C) -> (B, T) float logits (before the sigmoid).
  torch::Tensor logits(const torch::Tensor& h);
  /// (B, T, C) -> (B, T) float halting probability p.
  torch::Tensor forward(const torch::Tensor& h) { return torch::sigmoid(logits(h)); }

  torch::nn::Linear fc1{nullptr};  // C -> max(C/4, 16)
  torch::nn::Linear fc2{nullptr};  // hidden -> 1, bias initialised to -1 (§2.2)
};
TORCH_MODULE(TsaRouter);

class TokenSelectiveAttention : public TransformerTrunk {
 public:
  /// Final-bias init of every router: sigmoid(-1) ~ 0.27 halting at the start (§2.2, App. A).
  static constexpr double kRouterBiasInit = -1.0;
  /// Sparse inference: a token with p > 0.5 skips the block's FFN (§3.6).
  static constexpr double kHaltThreshold = 0.5;

  TokenSelectiveAttention(TransformerOptions transformer, TsaOptions options = {});
  ModelOutput forward(const torch::Tensor& tokens, bool trace = false) override;
  std::string arch_id() const override { return "tsa"; }
  /// Every token's keys/values are cached in every block (attention stays dense in both modes).
  std::unique_ptr<DecodeState> begin_decode(std::int64_t batch) override;
  torch::Tensor decode(DecodeState& state, const torch::Tensor& tokens, DecodeTrace* trace = nullptr) override;
  std::string describe() const override;

  const TsaOptions& tsa_options() const { return tsa_options_; }
  /// Eval-only switch (no parameters change), e.g. to re-evaluate a trained model in sparse mode.
  void set_inference(TsaInference mode) { tsa_options_.inference(mode); }
  /// The router logits (B, T) of every routing decision l = 0..L-2 in the mode the model is in (the bench
  /// calibrates router biases from them).
  std::vector<torch::Tensor> router_logits(const torch::Tensor& tokens);

  std::vector<DenseBlock> blocks;  ///< blocks.<i>: block 0 is the stem
  std::vector<TsaRouter> routers;  ///< routers.<l>: reads the stream after block l, gates block l + 1
  /// Sparse inference's FFN rows of a gated block sized from earlier forwards (sized_ffn_rows_active: a GPU), so that
  /// no block waits for its count of active tokens: the capacity for batches of `tokens` tokens (size_next_forward),
  /// the rows built for it, and this forward's (B) active counts where the block ran sized (undefined otherwise).
  struct SizedFfn {
    std::int64_t capacity = 0, tokens = 0;
    int below = 0;
    SizedRows rows;
    torch::Tensor counts;
    /// After a forward whose `rows` FFN rows held `lengths` active tokens a sequence: -1 where they did not fit, else
    /// their total, by which the next forward of `batch_tokens` tokens is sized.
    std::int64_t settle(const std::vector<std::int64_t>& lengths, std::int64_t rows, std::int64_t batch_tokens);
  };
  std::vector<SizedFfn> sized_ffn;  ///< one a router: block l + 1's

 private:
  /// Runs the whole model; fills `logits_out` with each router's logits when given.
  ModelOutput run(const torch::Tensor& tokens, bool trace, std::vector<torch::Tensor>* logits_out);
  /// A gated block's output left as h + w m for the next norm's pass (m undefined: h is the output).
  struct Gated {
    torch::Tensor h, m, w;  ///< (B, T, C), (B, T, C), (B, T) fp32
  };
  /// Block l + 1 gated by p = p_l (B, T) on its input x and x's norm n1. Sparse execution when `sparse` (the output
  /// then is h alone). Fills `trace` when given.
  Gated gated_block(std::size_t block, const torch::Tensor& x, const torch::Tensor& n1, const torch::Tensor& positions,
                    const torch::Tensor& p, bool sparse, LayerTrace* trace);
  /// Reads the counts of every block that ran sized (one wait), fills their traces' counts and sizes their next
  /// forwards; false when a block's active tokens overflowed its rows (the forward must run again, counting exactly).
  bool settle_sized_ffn(std::vector<LayerTrace>* trace, std::int64_t tokens);

  TsaOptions tsa_options_;
};

ArchitectureEntry tsa_architecture();

}  // namespace routelab
