// The dense decoder-only Transformer baseline in two styles: Llama/SmolLM (RMSNorm, RoPE, SwiGLU, optional
// GQA, no biases; DTRNet) and GPT-2 (LayerNorm, learned positions, GELU, biases; TSA).
#pragma once
#include <nlohmann/json.hpp>

#include "core/config/option_table.h"
#include "core/config/options.h"
#include "core/cost/flops.h"
#include "core/models/blocks/attention.h"
#include "core/models/blocks/mlp.h"
#include "core/models/blocks/norm.h"
#include "core/models/blocks/routing.h"
#include "core/models/language_model.h"
#include "core/models/registry.h"

namespace routelab {

enum class ModelStyle { Llama, GPT2 };

/// Shape and style options shared by every Transformer-based architecture.
struct TransformerOptions {
  TORCH_ARG(ModelStyle, style) = ModelStyle::Llama;
  TORCH_ARG(std::int64_t, vocab_size) = 256;
  TORCH_ARG(std::int64_t, max_seq_len) = 128;
  TORCH_ARG(std::int64_t, n_layer) = 4;
  TORCH_ARG(std::int64_t, n_embd) = 128;
  TORCH_ARG(std::int64_t, n_head) = 4;
  /// 0 = n_head
  TORCH_ARG(std::int64_t, n_kv_head) = 0;
  /// 0 = style default (Llama: 8/3 C rounded up to a multiple of 64; GPT-2: 4 C)
  TORCH_ARG(std::int64_t, d_ff) = 0;
  TORCH_ARG(bool, tie_weights) = true;
  TORCH_ARG(double, rope_theta) = 10000.0;
  TORCH_ARG(RopeScaling, rope_scaling) = RopeScaling::None;  ///< context extension at evaluation
  TORCH_ARG(double, rope_factor) = 1.0;
  TORCH_ARG(std::int64_t, rope_original_context) = 0;        ///< 0: max_seq_len
  TORCH_ARG(double, norm_eps) = 1e-5;
  TORCH_ARG(double, dropout) = 0.0;
  /// "gpt3": N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)) (TSA App. A); "normal": all N(0, 0.02)
  TORCH_ARG(std::string, init) = "gpt3";

 public:  // TORCH_ARG leaves the section private
  std::int64_t ff_dim() const;
  bool bias() const { return style_ == ModelStyle::GPT2; }
};

/// The shared options bound to their keys: the schema every Transformer architecture's registry entry starts
/// from, its defaults those of TransformerOptions (max_seq_len: 0, the data's context).
const OptionTable<TransformerOptions>& transformer_options_table();
/// transformer_options_table().schema()
OptionSchema transformer_option_schema();
void check_transformer_options(const nlohmann::json& model, const std::string& path);
/// Reads the shared options from a resolved model section plus the data-derived context.
TransformerOptions transformer_options_from_json(const nlohmann::json& model, std::int64_t vocab_size,
                                                 std::int64_t context);
/// The matrix shapes of one layer of this model (for FLOPs).
LayerShape layer_shape(const TransformerOptions& options);
/// The trunk a FLOPs pricing function prices: the model section's shared options for the query's vocabulary and
/// sequence length.
TransformerOptions flops_trunk(const FlopsInput& in);
/// The LM head's product h Wᵀ, (..., V), for a head weight W of (V, d). On a GPU, for a vocabulary that is not a
/// multiple of 64 (GPT-2's 50257) and at least 128 rows of h, W is padded with zero rows to the next multiple of 64
/// and the logits are the first V columns of the padded product (a view with the padded row stride): cuBLAS then
/// runs its aligned tensor-core kernels instead of far slower unaligned ones (PyTorch's inductor pads the same
/// way). The logits and gradients are the same numbers; the padding columns (at most 63) are computed and dropped,
/// which the FLOPs model does not price (0.13% of the head at GPT-2's vocabulary).
torch::Tensor vocab_logits(const torch::Tensor& h, const torch::Tensor& weight);
/// h Wᵀ through W padded to a multiple of `align` rows, on any device (vocab_logits' GPU path; tested on the CPU).
torch::Tensor padded_vocab_logits(const torch::Tensor& h, const torch::Tensor& weight, std::int64_t align);
/// The trace of a dense layer that ran every token of a (batch, seq) input.
LayerTrace dense_layer_trace(int layer, std::int64_t batch, std::int64_t seq, const LayerShape& shape);

/// Pre-norm block: x + Attn(Norm(x)), then + MLP(Norm(x)).
class DenseBlockImpl : public torch::nn::Module {
 public:
  DenseBlockImpl(const TransformerOptions& options, std::int64_t layer_index);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& positions);  // (B, T, C) -> (B, T, C)
  /// forward() with both residual adds left to the norms beside them: the block's input is x + pending (the previous
  /// block's MLP update, not yet added; undefined: x alone), added by norm1 in its pass, and the output is h + m,
  /// left for the next norm to add. On a GPU each add is then part of a fused norm pass (norm.h: add_into_matmul).
  struct Deferred {
    torch::Tensor input;  ///< x + pending: the block's input (the previous block's output)
    torch::Tensor h, m;   ///< forward(input) = h + m
  };
  /// With `pending_gate` (B, T) the input is x + pending_gate pending (NormImpl::add_into_matmul's gated sum).
  Deferred forward_deferred(const torch::Tensor& x, const torch::Tensor& pending, const torch::Tensor& positions,
                            const torch::Tensor& pending_gate = {});
  /// The block's residual update f(x) = a + MLP(Norm(x + a)) with a = Attn(Norm(x)), so forward(x) = x + f(x).
  /// With `rows`, x holds the compacted sequences of those routed rows (see causal_attention). `pairs`, when
  /// given, receives the attention's executed (query, key) pairs per head.
  torch::Tensor update(const torch::Tensor& x, const torch::Tensor& positions, const Compaction* rows = nullptr,
                       double* pairs = nullptr);
  /// update() of the packed rows of a sized compaction `rows` (compact_sized): x (N, C) from gather_packed, at
  /// `positions` (N) from packed_positions; its padding rows are attended in runs of their own.
  torch::Tensor update_packed(const torch::Tensor& x, const torch::Tensor& positions, const Compaction& rows);

  /// Incremental form of update(): the new rows x (B, n, C) at `positions` attend through `cache` (see
  /// CausalSelfAttentionImpl::forward_cached for `keep` and `hidden`). -> f(x) (B, n, C)
  torch::Tensor decode_update(const torch::Tensor& x, const torch::Tensor& positions, KVCache& cache,
                              const torch::Tensor& keep = {}, const torch::Tensor& hidden = {});
  /// decode_update() computed for the rows `run` (B, n) selects only; the other rows of the result are zero.
  /// A multi-token call (a prefill) gathers the selected rows into compacted sequences at their original
  /// positions, so skipped rows cost no attention, projection or MLP work; a single-token call masks. Only the
  /// selected rows enter the cache, unless `store_skipped`: then every row's keys and values are stored and the
  /// skipped ones hidden from every query (D-LLM's official prefill), and only queries and the MLP are compacted.
  torch::Tensor decode_update_rows(const torch::Tensor& x, const torch::Tensor& positions, KVCache& cache,
                                   const torch::Tensor& run, bool store_skipped = false);

  int layer_index = 0;  ///< reported to the residual-ratio probe

  Norm norm1{nullptr}, norm2{nullptr};
  CausalSelfAttention attn{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(DenseBlock);

/// Embeddings, final norm and (tied) head shared by the Transformer architectures.
class TransformerTrunk : public LanguageModel {
 public:
  explicit TransformerTrunk(TransformerOptions options);
  std::int64_t num_layers() const override { return options_.n_layer(); }
  std::int64_t vocab_size() const override { return options_.vocab_size(); }
  const TransformerOptions& options() const { return options_; }

 protected:
  /// A decode state for `batch` sequences with the context limit max_seq_len and, when `layer_caches`, one
  /// self-attention cache per layer ("layer").
  std::unique_ptr<DecodeState> new_decode_state(std::int64_t batch, bool layer_caches = true) const;
  /// Decode-time embedding of tokens (B, n) at the absolute positions state.length() ... + n - 1 (returned through
  /// `positions`, (n)); throws ConfigError past the context limit.
  torch::Tensor embed_decode(const torch::Tensor& tokens, const DecodeState& state, torch::Tensor& positions);
  /// tokens (B, T) -> embeddings (B, T, C); positions (T) are returned through `positions`.
  torch::Tensor embed(const torch::Tensor& tokens, torch::Tensor& positions);
  /// (B, T, C) -> logits (B, T, V)
  torch::Tensor head(const torch::Tensor& x);
  /// head(x + pending), the add done by the final norm's pass (DenseBlockImpl::forward_deferred); `stream` receives
  /// x + pending (x + pending_gate pending with a gate, one value per row: NormImpl::add_into_matmul).
  torch::Tensor head(const torch::Tensor& x, const torch::Tensor& pending, torch::Tensor& stream,
                     const torch::Tensor& pending_gate = {});
  /// TSA App. A init (or plain N(0, 0.02)): call at the end of the subclass constructor. Parameters
  /// whose name ends with one of `residual_suffixes` get the 0.02/sqrt(2L) scale under "gpt3".
  void init_weights(const std::vector<std::string>& residual_suffixes = {"attn.proj.weight", "mlp.down.weight"});

  TransformerOptions options_;
  torch::nn::Embedding tok_emb{nullptr};
  torch::nn::Embedding pos_emb{nullptr};  // GPT-2 style only
  Norm final_norm{nullptr};
  torch::nn::Linear lm_head{nullptr};     // untied only
};

class DenseTransformer : public TransformerTrunk {
 public:
  explicit DenseTransformer(TransformerOptions options);
  ModelOutput forward(const torch::Tensor& tokens, bool trace = false) override;
  std::string arch_id() const override { return "dense"; }
  std::unique_ptr<DecodeState> begin_decode(std::int64_t batch) override;
  torch::Tensor decode(DecodeState& state, const torch::Tensor& tokens, DecodeTrace* trace = nullptr) override;

  std::vector<DenseBlock> blocks;
};

/// The dense baseline's registry entry.
ArchitectureEntry dense_architecture();

}  // namespace routelab
