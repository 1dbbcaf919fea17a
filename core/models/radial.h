// Radial Networks (Dotzel et al. 2024, §5): a router picks, for every token at every routing step, which of L layers runs next
// or the exit (layers may be reused); the keys/values of every executed (token, step) share one unified store
// (§5.2) that later steps and later tokens attend to.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/models/blocks/staircase_attention.h"
#include "core/models/dense_transformer.h"
#include "core/models/registry.h"

namespace routelab {

/// Options of the routing on top of the shared TransformerOptions (n_layer = L distinct layers).
struct RadialOptions {
  /// 0: routing steps S after which the exit is forced (at most S layer executions per token); 0 = n_layer
  TORCH_ARG(std::int64_t, max_depth) = 0;
  /// 0: steps during which the exit is masked out of the router's choice (every token runs at least this many)
  TORCH_ARG(std::int64_t, min_depth) = 0;
  /// 0: hidden width of the router MLP; 0 = n_embd / 2
  TORCH_ARG(std::int64_t, router_hidden) = 0;
  /// 1.0: Gumbel-softmax temperature in training (shapes the straight-through gradient; the sample is the argmax)
  TORCH_ARG(double, temperature) = 1.0;
  /// true: Gumbel noise on the router logits in training; false: the noise-free argmax, same gradient
  TORCH_ARG(bool, gumbel_noise) = true;
  /// 0.01: weight of the mean expected depth (in layers per token) in the auxiliary loss
  TORCH_ARG(double, depth_coeff) = 0.01;
  /// 0.0: fraction of training over which depth_coeff ramps linearly from 0 (0: constant from the first step)
  TORCH_ARG(double, depth_warmup) = 0.0;
  /// 0.0: initial bias of the router's exit logit (the layer logits start at 0)
  TORCH_ARG(double, exit_bias) = 0.0;
  /// 0.0: > 0 adds a learned bias per routing step and choice to the router's logits, initialised so that step s
  /// prefers layer s (and the exit after the last layer) by this many logits: the router starts on the sequential
  /// path of the stack it was distilled from. 0: none (the paper's router sees the hidden state only)
  TORCH_ARG(double, sequential_prior) = 0.0;

 public:  // TORCH_ARG leaves the section private
  /// S for a model of n_layer layers.
  std::int64_t steps(std::int64_t n_layer) const { return max_depth_ > 0 ? max_depth_ : n_layer; }
};

/// The options bound to their model.* keys (the schema after the shared options).
const OptionTable<RadialOptions>& radial_options_table();

/// The unified KV store of §5.2: the keys and values of every executed (token, step), each tagged with its token
/// position and routing step. The query of token t at step s sees exactly the entries (t', s') with t' <= t and
/// s' <= s. The parallel forward appends one block per step (the compacted tokens that ran at that step); an
/// incremental decoder can append one token's entries per step and apply the same rule, so it holds exactly
/// these entries.
struct UnifiedKVStore {
  torch::Tensor keys;      ///< (B, Hkv, N, hd), rotated by token position (RoPE)
  torch::Tensor values;    ///< (B, Hkv, N, hd)
  torch::Tensor position;  ///< (B, N) int64 token position of each entry
  torch::Tensor step;      ///< (B, N) int64 routing step of each entry
  torch::Tensor valid;     ///< (B, N) bool: false on padding entries

  /// Appends n entries per sequence: k, v (B, Hkv, n, hd), position (B, n), valid (B, n), all at `step`.
  void append(const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& position, std::int64_t step,
              const torch::Tensor& valid);
  std::int64_t size() const { return keys.defined() ? keys.size(2) : 0; }
  /// (B, Tq, N) bool: the valid entries with position <= q_position and step <= q_step, for queries at
  /// q_position (B, Tq) int64 and q_step (B, Tq) int64.
  torch::Tensor visible(const torch::Tensor& q_position, const torch::Tensor& q_step) const;
};

/// Attention of q (B, H, Tq, hd) over the store's entries where `visible` (B, Tq, N) holds; a query with no visible
/// entry (padding) gets a zero output. Softmax in fp32. With `rows` (one per sequence) only the first rows[b]
/// queries of sequence b are real (the compacted tokens of a step); the rest must see nothing. `pairs`, when given,
/// receives the (query, entry) pairs per head the kernel scored: the real rows on the CPU kernel, every row of the
/// padded batch elsewhere. -> (B, H, Tq, hd)
torch::Tensor unified_attention(const torch::Tensor& q, const UnifiedKVStore& store, const torch::Tensor& visible,
                                double dropout = 0.0, bool training = false,
                                const std::vector<std::int64_t>& rows = {}, double* pairs = nullptr);

/// unified_attention for queries at q_position (B, Tq) int64 that see every valid entry of the store at or before
/// their position (a routing step of the parallel forward, when the store holds no later step's entry), the first
/// rows[b] queries of sequence b real. The entries are taken in position order, where each query row sees a prefix
/// of them: with the rows in position order (compacted tokens) only about half of the (query, entry) rectangle is
/// scored (blocks/staircase_attention.h). `pairs` receives the rectangle of the real rows, as dense attention is
/// priced over its square whatever its causal kernel skips. Only where staircase_attention_runs(q, store.keys,
/// store.values, ...).
torch::Tensor unified_attention_to_position(const torch::Tensor& q, const UnifiedKVStore& store,
                                            const torch::Tensor& q_position, const std::vector<std::int64_t>& rows,
                                            double* pairs = nullptr);

/// The router: a small MLP on the normalised hidden state -> L + 1 logits (layers 0..L-1, then the exit).
class RadialRouterImpl : public torch::nn::Module {
 public:
  RadialRouterImpl(const TransformerOptions& transformer, std::int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x);  // (..., C) -> (..., L + 1) float logits

  Norm norm{nullptr};
  torch::nn::Linear fc1{nullptr};  // C -> hidden
  torch::nn::Linear fc2{nullptr};  // hidden -> L + 1
};
TORCH_MODULE(RadialRouter);

/// Internals of one forward, step by step (tests, analysis, a decoder's reference).
struct RadialRecord {
  struct Step {
    torch::Tensor choice;          ///< (B, T) int64: the router's choice (L = exit; exited tokens read L)
    torch::Tensor query_index;     ///< (B, K) int64: token positions of the tokens that ran at this step
    torch::Tensor query_valid;     ///< (B, K) bool
    torch::Tensor q;               ///< (B, H, K, hd) their queries (rotated)
    torch::Tensor heads;           ///< (B, H, K, hd) their attention outputs over the store
    std::int64_t store_size = 0;   ///< entries (incl. padding) in the store when this step attended
    torch::Tensor hidden;          ///< (B, T, C) the stream after this step
  };
  std::vector<Step> steps;
  UnifiedKVStore store;  ///< the final store
};

class RadialNetwork : public TransformerTrunk {
 public:
  RadialNetwork(TransformerOptions transformer, RadialOptions options = {});
  ModelOutput forward(const torch::Tensor& tokens, bool trace = false) override;
  /// forward() that also fills `record` (when not null) with every step's internals.
  ModelOutput run(const torch::Tensor& tokens, bool trace, RadialRecord* record);
  std::string arch_id() const override { return "radial"; }
  /// One unified cache ("unified"): each executed (token, step) appends its entry tagged with the step; the query
  /// of (t, s) reads the entries with t' <= t and s' <= s, as the parallel forward's store. A forced path must be
  /// the (S) form while decoding.
  std::unique_ptr<DecodeState> begin_decode(std::int64_t batch) override;
  torch::Tensor decode(DecodeState& state, const torch::Tensor& tokens, DecodeTrace* trace = nullptr) override;
  std::string describe() const override;
  /// Training progress for the depth_coeff ramp (depth_warmup).
  void set_progress(double fraction) override { progress_ = fraction; }
  /// depth_coeff times the ramp at the current progress.
  double depth_weight() const;

  const RadialOptions& radial_options() const { return radial_; }
  std::int64_t max_depth() const { return steps_; }
  /// The option index that means "exit" (= L).
  std::int64_t exit_choice() const { return options_.n_layer(); }

  /// Overrides the router's choices: (S) or (B, T, S) int64 in [0, L] (L or -1 = exit); an undefined tensor gives
  /// the decisions back to the router. The straight-through weights and the expected depth still come from the
  /// router. For tests and analysis (the path 0, 1, ..., L-1 gives a sequential stack with a unified cache).
  void set_forced_path(const torch::Tensor& path) { forced_path_ = path; }

  /// The first step's input: token embeddings (+ learned positions for GPT-2 style). (B, T) -> (B, T, C)
  torch::Tensor embed_tokens(const torch::Tensor& tokens);
  /// Final norm and head. (..., C) -> (..., V)
  torch::Tensor output_logits(const torch::Tensor& hidden) { return head(hidden); }

  std::vector<DenseBlock> layers;  ///< module list "layers": layers.<l>.norm1 / attn / norm2 / mlp
  RadialRouter router{nullptr};
  /// (S, L + 1) learned bias of the router's logits per step (model.sequential_prior > 0; undefined otherwise).
  torch::Tensor step_bias;

  /// The step bias is a bias: never decayed.
  bool decays(const std::string& name, const torch::Tensor& parameter) const override;

 private:
  struct Pass;  // one forward's per-token routing state (radial.cpp)
  /// The router's logits at step `s`: router(h) plus the step's bias where there is one. (..., C) -> (..., L + 1)
  torch::Tensor step_logits(const torch::Tensor& h, std::int64_t s);
  /// The forced path (set_forced_path) as (B, T, S) choices in [0, L]; undefined when none is set.
  torch::Tensor forced_choices(std::int64_t B, std::int64_t T, const torch::TensorOptions& options) const;
  /// The router's step `s` on the stream `h`: every token's choice (L = exit; an exited token stays out), with
  /// the straight-through weight of the chosen option when training; updates the pass's depth and gate sums.
  torch::Tensor route(const torch::Tensor& h, std::int64_t s, const torch::Tensor& forced, Pass& pass,
                      torch::Tensor& weight);
  /// Runs at step `s` the chosen layer of every token still routing, attending over the unified store; returns
  /// false (and leaves `h`) when every token has exited.
  bool execute(torch::Tensor& h, const torch::Tensor& positions, const torch::Tensor& choice,
               const torch::Tensor& weight, std::int64_t s, UnifiedKVStore& store, Pass& pass,
               RadialRecord* record);

  RadialOptions radial_;
  std::int64_t steps_ = 0;
  double progress_ = 1.0;  // a model used outside the trainer gets the full coefficient
  torch::Tensor forced_path_;
};

ArchitectureEntry radial_architecture();

}  // namespace routelab
