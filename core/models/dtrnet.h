// DTRNet: per routed layer a 2-way token router sends each token either through causal attention
// among the routed tokens only (gather -> compacted attention -> scatter, O(k^2)) or through the token-local
// bypass W_O W_V x_norm; both scaled by the router's score, then every token runs the shared MLP.
#pragma once
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/models/blocks/routing.h"
#include "core/models/dense_transformer.h"
#include "core/models/registry.h"

namespace routelab {

enum class DtrRouting { Token, Expert, Skip };
enum class DtrBypass { ValueOutput, None };
enum class DtrAttention { Compact, Masked };

struct DTRNetOptions {
  /// "bilayer": which layers route, any parse_layer_pattern spec (T-D-T-D letters, routed indices 1,3,5, ...)
  TORCH_ARG(std::string, routed_layers) = "bilayer";
  /// Token: attention iff g_attn > g_bypass (the paper); Expert: top `capacity` of each sequence (Table 2);
  /// Skip: every token bypasses (Table 4). Token by default
  TORCH_ARG(DtrRouting, routing) = DtrRouting::Token;
  /// expert-choice share of each sequence routed to attention; 0.25 by default (App. A1)
  TORCH_ARG(double, capacity) = 0.25;
  /// ValueOutput: bypass tokens get W_O W_V x_norm; None: they go to the MLP unchanged (w/o-VO, Table 6)
  TORCH_ARG(DtrBypass, bypass) = DtrBypass::ValueOutput;
  /// lambda of the routing loss; 8e-4 by default (360M setting)
  TORCH_ARG(double, aux_coeff) = 8e-4;
  /// reference-code fallback: when no token of the batch is routed in training, route this random share; 0.15
  TORCH_ARG(double, fallback_fraction) = 0.15;
  /// Compact (gather, attention over the routed tokens, scatter) or Masked (dense T x T mask: the oracle)
  TORCH_ARG(DtrAttention, attention) = DtrAttention::Compact;
  /// weight of the expert-choice variant's causal-predictor BCE; 1 by default
  TORCH_ARG(double, predictor_coeff) = 1.0;
};

/// One routed DTRNet layer.
class DTRNetLayerImpl : public torch::nn::Module {
 public:
  DTRNetLayerImpl(const TransformerOptions& model, const DTRNetOptions& options);

  struct Output {
    torch::Tensor y;               ///< (B, T, C): h + m (forward; decode)
    torch::Tensor input;           ///< forward_deferred: x + pending, the layer's input (the previous layer's output)
    torch::Tensor h, m;            ///< forward_deferred: the stream after attention and the MLP's update, y = h + m
    torch::Tensor gate_attn;       ///< (B, T) float g_attn, differentiable
    torch::Tensor decision;        ///< (B, T) bool, true = attention path
    std::int64_t routed = 0;       ///< tokens on the attention path
    double rows = 0;               ///< rows the routed projections ran: routed tokens plus compaction padding
    double pairs = 0;              ///< (query, key) pairs per head the routed attention computed
    torch::Tensor predictor_loss;  ///< expert choice in training: BCE of the causal predictor; else undefined
    torch::Tensor predictor_logits;  ///< expert choice: (B, T)
    torch::Tensor topk;              ///< expert choice: (B, T) bool top-capacity membership
    /// A sized compaction (compact_sized): the (B) routed counts on the device; `routed` and `pairs` stay unknown
    /// (-1, 0) until the model reads these back once for all its layers (DTRNet::forward).
    torch::Tensor counts;
    torch::Tensor starts;  ///< a sized compaction's cumulative lengths on the device (the runs attention ran)
    /// The capacity's device constants that compaction read: whoever replays this forward as a CUDA graph keeps them
    /// alive (the layer replaces its own when its capacity changes).
    SizedRows sized_rows;
    bool packed = false;   ///< the routed rows ran packed (the form a sized compaction takes)
    /// Unpacked (B, K) rows: a padded sized compaction's rows a sequence (compact_sized_padded, where the attention
    /// runs the padded rows anyway: a GPU in fp32), `counts` on the device and `routed` -1 until the model's read;
    /// 0 where the compaction counted exactly.
    std::int64_t padded_len = 0;
    std::int64_t longest = 0;  ///< unpacked rows: the most tokens a sequence routed (once known on the host)
  };
  /// x (B, T, C), positions (T). A defined `forced_decision` (B, T) bool replaces the routing rule (benchmarks,
  /// tests); the router still scales the paths.
  Output forward(const torch::Tensor& x, const torch::Tensor& positions, const torch::Tensor& forced_decision = {});
  /// forward() of the input x + pending (pending may be undefined) with both residual adds left to the norms beside
  /// them, as DenseBlockImpl::forward_deferred: y = h + m is left to the next layer's norm (fills input, h, m).
  Output forward_deferred(const torch::Tensor& x, const torch::Tensor& pending, const torch::Tensor& positions,
                          const torch::Tensor& forced_decision = {});

  /// Incremental step in eval mode: the new rows x (B, n, C) at `positions` (n); only the tokens on the attention
  /// path are appended to `cache` (the layer's KV holds routed tokens only). Fills y, gate_attn, decision, routed.
  Output decode(const torch::Tensor& x, const torch::Tensor& positions, KVCache& cache);

  /// Router logits (B, T, 2) in fp32: [attention, bypass], from the raw residual stream.
  torch::Tensor router_logits(const torch::Tensor& x);
  /// Forward FLOPs of this layer as its forward `out` on (batch, seq) executed them (padding rows included).
  double flops(std::int64_t batch, std::int64_t seq, const Output& out) const;

  int layer_index = 0;  ///< reported to the residual-ratio probe
  /// The packed rows the routed attention of training forwards is sized by for batches of `capacity_tokens` tokens
  /// (B T), so that the forward reads no count back (compact_sized), or with unpacked rows the rows a sequence
  /// (compact_sized_padded); 0, or another batch size: counted exactly, one wait for the device. The model's forward
  /// sets both from the counts it reads back. Eval forwards keep their own (eval_capacity, eval_capacity_tokens), so
  /// an evaluation between training steps leaves the sizes a captured training step runs (CudaGraphStep) as they are.
  std::int64_t capacity = 0, capacity_tokens = 0;
  std::int64_t eval_capacity = 0, eval_capacity_tokens = 0;
  /// Forwards (or checks of a captured step) in a row whose routing wanted a smaller capacity (DTRNet::forward
  /// shrinks a capacity only after a number of them), per mode.
  int below = 0, eval_below = 0;
  /// One mode's sizing: references to its capacity, batch size and count of forwards below.
  struct Sizing {
    std::int64_t& capacity;
    std::int64_t& tokens;
    int& below;
  };
  /// This mode's sizing (training: capacity, capacity_tokens, below; eval: the eval ones), or `training`'s.
  Sizing sizing(bool training) {
    if (training) return {capacity, capacity_tokens, below};
    return {eval_capacity, eval_capacity_tokens, eval_below};
  }
  Sizing sizing() { return sizing(is_training()); }

  DTRNetOptions options;
  LayerShape shape;
  Norm norm1{nullptr}, norm2{nullptr};
  CausalSelfAttention attn{nullptr};
  Mlp mlp{nullptr};
  torch::nn::Linear router_in{nullptr}, router_out{nullptr};  // d -> d/2 -> SiLU -> 2
  CausalPredictor predictor{nullptr};                          // expert choice only

 private:
  /// `known`: the decision's compaction where the router built it already (expert choice in training, k tokens a
  /// sequence: no wait for the device); else compacted here.
  torch::Tensor attend_compact(const torch::Tensor& n, const torch::Tensor& positions, const torch::Tensor& decision,
                               Output& out, const Compaction* known = nullptr);
  torch::Tensor attend_masked(const torch::Tensor& n, const torch::Tensor& positions, const torch::Tensor& decision);

  SizedRows sized_rows_;  ///< the current capacity's device constants (compact_sized)
};
TORCH_MODULE(DTRNetLayer);

class DTRNet : public TransformerTrunk {
 public:
  DTRNet(TransformerOptions model, DTRNetOptions options);
  ModelOutput forward(const torch::Tensor& tokens, bool trace = false) override;
  std::string arch_id() const override { return "dtrnet"; }
  std::unique_ptr<DecodeState> begin_decode(std::int64_t batch) override;
  torch::Tensor decode(DecodeState& state, const torch::Tensor& tokens, DecodeTrace* trace = nullptr) override;
  std::string describe() const override;

  const DTRNetOptions& dtr_options() const { return dtr_; }
  /// Per layer: whether it routes (the parsed routed_layers).
  const std::vector<bool>& routed_pattern() const { return pattern_; }
  /// Per layer: the routed layer, or undefined for a dense one.
  std::vector<DTRNetLayer> routed;
  std::vector<DenseBlock> dense;

 private:
  /// After the layers: reads back once the counts of the layers that sized their compactions (`outs`, by layer),
  /// fills their routed tokens and attention pairs, and sizes every packed layer's next forward of `tokens` tokens.
  /// False when a layer routed more rows than its capacity (or none, where the reference code's fallback applies):
  /// the forward must run again, counting exactly.
  bool settle_sized_layers(std::vector<std::optional<DTRNetLayerImpl::Output>>& outs, std::int64_t tokens);
  /// settle_sized_layers under DeferredTraceReadback (a step captured as a CUDA graph): nothing is read back; the
  /// sized layers' counts stay on the device, an overflow becomes `out.overflow`, and `out.check_shapes` reads the
  /// counts once the forward has run and sizes the layers' next forwards from them. Returns each sized layer's routed
  /// tokens, a 0-dim tensor on the device, by layer (undefined elsewhere).
  std::vector<torch::Tensor> defer_sized_layers(const std::vector<std::optional<DTRNetLayerImpl::Output>>& outs,
                                                std::int64_t tokens, ModelOutput& out);
  /// Sizes the next forward of `tokens` tokens of every layer whose count `outs` holds on the host: packed rows by the
  /// routed total, unpacked ones by the longest sequence.
  void size_next_forwards(const std::vector<std::optional<DTRNetLayerImpl::Output>>& outs, std::int64_t tokens);

  DTRNetOptions dtr_;
  std::vector<bool> pattern_;
};

/// DTRNet's options bound to their model.* keys (the schema after the shared options).
const OptionTable<DTRNetOptions>& dtrnet_options_table();
ArchitectureEntry dtrnet_architecture();

}  // namespace routelab
