// D-LLM (Jiang et al. 2024; baseline of DTRNet): a per-layer decision module lets each token execute or skip
// the whole block, skipped tokens are evicted as keys, and a rate loss steers the executed fraction to a target.
// Follows the official code (Jyk-122/D-LLM, llama/model_train.py) where the paper is silent.
#pragma once
#include <string>
#include <vector>

#include "core/models/blocks/routing.h"
#include "core/models/dense_transformer.h"
#include "core/models/dllm_eviction.h"
#include "core/models/registry.h"

namespace routelab {

/// How the rate-loss weight λ grows over training.
enum class RateSchedule {
  /// λ(t) = λ_max sin(π/2 t), official `adjust_lambda_active`
  Sine,
  /// λ(t) = λ_max
  Constant,
};

struct DLLMOptions {
  /// which layers have a decision module (parse_layer_pattern); "after-2" (layers 0 and 1 always execute)
  TORCH_ARG(std::string, routed_layers) = "after-2";
  /// decision-module hidden width; 512 (official dynamic_router_hdim)
  TORCH_ARG(std::int64_t, router_hidden) = 512;
  /// first tokens of every sequence that always execute; 2 (official dynamic_reserve_initials)
  TORCH_ARG(std::int64_t, reserved_tokens) = 2;
  /// target executed fraction (the paper's acceleration rate Ω); 0.5 (official dynamic_active_target)
  TORCH_ARG(double, target) = 0.5;
  /// λ_max of the rate loss; 5.0 (official lambda_active)
  TORCH_ARG(double, rate_coeff) = 5.0;
  /// Sine by default
  TORCH_ARG(RateSchedule, rate_schedule) = RateSchedule::Sine;
  /// Gumbel-softmax temperature in training; 1.0
  TORCH_ARG(double, gumbel_tau) = 1.0;
  /// at inference a token executes iff softmax p_exec >= threshold; 0.5
  TORCH_ARG(double, threshold) = 0.5;
  /// Multiplicative by default
  TORCH_ARG(Eviction, eviction) = Eviction::Multiplicative;
};

/// Linear(d -> hidden, bias) -> RMSNorm(eps = the model's norm_eps, as official) -> SiLU -> Linear(hidden -> 2,
/// bias), in fp32 on the raw residual. Column 0 = skip, column 1 = execute.
class DecisionModuleImpl : public torch::nn::Module {
 public:
  DecisionModuleImpl(std::int64_t n_embd, std::int64_t hidden, double eps);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) -> (B, T, 2) fp32 logits

  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  Norm norm{nullptr};
};
TORCH_MODULE(DecisionModule);

class DLLM : public TransformerTrunk {
 public:
  DLLM(TransformerOptions options, DLLMOptions dllm = {});
  ModelOutput forward(const torch::Tensor& tokens, bool trace = false) override;
  std::string arch_id() const override { return "dllm"; }
  /// The official decode path (Jyk-122/D-LLM llama/model.py): a prefill (n > 1) runs every token through every
  /// layer and stores every key/value, the skipped ones masked; a decode step (n = 1) stores keys/values only for
  /// the sequences whose token executes. Logits equal the eval-mode forward either way.
  std::unique_ptr<DecodeState> begin_decode(std::int64_t batch) override;
  torch::Tensor decode(DecodeState& state, const torch::Tensor& tokens, DecodeTrace* trace = nullptr) override;
  void set_progress(double fraction) override;

  const DLLMOptions& dllm_options() const { return dllm_; }
  /// Per layer: whether it has a decision module.
  const std::vector<bool>& routed() const { return routed_; }
  /// λ(t) of the rate loss at the current training progress.
  double rate_weight() const;
  /// λ(t) as a 0-dim fp32 tensor on `device`, which set_progress rewrites in place: a training step captured as a
  /// CUDA graph reads each step's λ from it (the rate loss is computed on the device, never from the host's value).
  torch::Tensor rate_weight_on(const torch::Device& device);

  // The pieces of one dynamic layer, public so tests can compare the two execution forms on equal decisions.
  /// Straight-through hard Gumbel-softmax sample of the execute flag: exactly 0/1 forward, soft gradient. -> (B, T)
  torch::Tensor sample_execute(const torch::Tensor& logits) const;
  /// Training form: every token runs the block, skipped keys are evicted by `w` (B, T), x + w f(x). -> (B, T, C)
  /// `pairs`, when given, receives the attention's computed (query, key) pairs per head.
  torch::Tensor evicting_layer(std::size_t layer, const torch::Tensor& x, const torch::Tensor& positions,
                               const torch::Tensor& w, double* pairs = nullptr);
  /// The block update f(x) of the training form, from x and its norm n1 (norm1's): x + w f(x) is evicting_layer.
  torch::Tensor evicting_update(std::size_t layer, const torch::Tensor& x, const torch::Tensor& n1,
                                const torch::Tensor& positions, const torch::Tensor& w, double* pairs = nullptr);
  /// The inference rule: a token executes layer `layer` when its execute probability reaches the threshold, or
  /// when it is one of the reserved first tokens. x (B, T, C) on the raw residual, positions (T). -> (B, T) bool;
  /// `p_exec` receives the probabilities (B, T) when given.
  torch::Tensor executes(std::size_t layer, const torch::Tensor& x, const torch::Tensor& positions,
                         torch::Tensor* p_exec = nullptr);
  /// The rule itself, from execute probabilities p_exec (B, T) already computed.
  torch::Tensor execute_rule(const torch::Tensor& p_exec, const torch::Tensor& positions) const;
  /// Inference form: only the executed tokens of `executed` run the block, on compacted sequences. -> (B, T, C)
  /// `pairs`, when given, receives the attention's executed (query, key) pairs per head.
  torch::Tensor skipping_layer(std::size_t layer, const torch::Tensor& x, const torch::Tensor& positions,
                               const Compaction& executed, double* pairs = nullptr);
  /// mean over tokens past the first `reserved` of |activation - target|; activation (B, T) = executed fraction
  /// of each token over all layers.
  static torch::Tensor rate_loss(const torch::Tensor& activation, std::int64_t reserved, double target);

  std::vector<DenseBlock> blocks;
  std::vector<DecisionModule> routers;  ///< per layer; empty holder where the layer always executes
  std::vector<EvalSizing> sizing;  ///< eval mode, per layer (set by the forwards; a test may shrink a capacity)

 private:
  /// Attention dropout in training mode (0 in eval): with it the evicting attention runs materialised.
  double training_dropout() const;
  LayerTrace routed_layer_trace(int layer, const torch::Tensor& p_exec, const torch::Tensor& executed,
                                const Compaction& counts, double pairs) const;

  /// After the layers (eval): reads back once the counts of the layers whose compaction was sized, fills their routed
  /// fractions and token counts in `trace` (when given), and sizes their next forward of `tokens` tokens. False when a
  /// sequence executed more tokens than its layer's rows held: the forward must run again, counting exactly.
  bool settle_sized_layers(std::vector<LayerTrace>* trace, std::int64_t tokens);

  DLLMOptions dllm_;
  std::vector<bool> routed_;
  double progress_ = 0.0;
  torch::Tensor rate_weight_;  ///< rate_weight() on the device the forwards run on (rate_weight_on)
};

/// D-LLM's options bound to their model.* keys (the schema after the shared options).
const OptionTable<DLLMOptions>& dllm_options_table();
ArchitectureEntry dllm_architecture();

}  // namespace routelab
