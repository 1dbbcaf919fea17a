// Depth Routing Residuals (DRR): before each PreNorm block a token-wise router mixes three paths, the identity,
// attention over the last W layer outputs (short-term memory) and attention over summary tokens pooled every
// block_size layers (long-term memory). Two memory forms: the paper's exact, non-causal one and a causal one for LMs.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/models/dense_transformer.h"
#include "core/models/registry.h"

namespace routelab {

/// Which positions a layer's memory attentions and summaries may read.
enum class DrrMemory {
  /// Language modelling: position t reads layer outputs at positions <= t only, and a summary token only once its
  /// chunk (adaptive_avg_pool1d's boundaries over max_seq_len) has ended at or before t; the block is causal.
  Causal,
  /// The paper's exact code: every position reads every memory entry, summaries pool the whole sequence and the
  /// block's self-attention is bidirectional (for the classification pipeline of issue 5).
  Seed,
};

/// Options of the routing on top of the shared TransformerOptions (GPT-2 style: LayerNorm, learned positions,
/// biased attention and GELU MLP, as the paper's nn.MultiheadAttention block).
struct DrrOptions {
  /// 4: the short-term memory holds the last short_window layer outputs (W)
  TORCH_ARG(std::int64_t, short_window) = 4;
  /// 8: summary tokens per block summary (S)
  TORCH_ARG(std::int64_t, summary_tokens) = 8;
  /// 4: a summary of the residual stream is pooled after every block_size layers
  TORCH_ARG(std::int64_t, block_size) = 4;
  /// 1: router hidden width = router_hidden_mult * n_embd
  TORCH_ARG(std::int64_t, router_hidden_mult) = 1;
  /// Causal (language modelling); Seed gives the paper's non-causal form
  TORCH_ARG(DrrMemory, memory) = DrrMemory::Causal;
};

/// DRR's own options bound to their model.* keys (after the trunk's).
const OptionTable<DrrOptions>& drr_options_table();
/// The trunk options DRR exposes (a subset of the shared ones, always GPT-2 style; max_seq_len 0: data.context).
const OptionTable<TransformerOptions>& drr_transformer_options_table();
/// The trunk options of a resolved DRR model section.
TransformerOptions drr_transformer_options_from_json(const nlohmann::json& model, std::int64_t vocab_size,
                                                     std::int64_t context);

/// One summary token's span of positions [start, end), as adaptive_avg_pool1d(length -> summary_tokens) cuts it:
/// start = floor(i L / S), end = ceil((i + 1) L / S).
struct SummaryChunk {
  std::int64_t start = 0;
  std::int64_t end = 0;
};
std::vector<SummaryChunk> summary_chunks(std::int64_t length, std::int64_t summary_tokens);
/// Summary tokens per block a sequence of `seq` tokens reads: all S in the seed form; in the causal form the
/// chunks (cut over `max_seq_len`) that are complete within the sequence.
std::int64_t drr_summary_tokens(const DrrOptions& options, std::int64_t seq, std::int64_t max_seq_len);

/// Multi-head attention of the current states over a memory bank (the paper's DepthMemoryAttention): q, k, v and
/// output projections without bias, scaled dot-product attention without a causal mask.
class DepthMemoryAttentionImpl : public torch::nn::Module {
 public:
  DepthMemoryAttentionImpl(std::int64_t dim, std::int64_t num_heads, double dropout = 0.0);
  void reset();
  /// x: (B, T, C), memory: (B, M, C), visible: (T, M) bool, undefined = every entry -> (B, T, C). An empty
  /// memory, and a row that sees no entry, give a zero context (the paper's zeros_like for an empty memory).
  /// `prefix`: every row of `visible` is a prefix (entries in position order), which the CPU's staircase kernel
  /// scores without the rest of the rectangle.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& memory, const torch::Tensor& visible = {},
                        bool prefix = false);

  std::int64_t dim, num_heads;
  double dropout;
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, out_proj{nullptr};
};
TORCH_MODULE(DepthMemoryAttention);

/// The paper's SummaryPool: LayerNorm -> Linear -> average pooling over the sequence into S summary tokens.
class SummaryPoolImpl : public torch::nn::Module {
 public:
  SummaryPoolImpl(std::int64_t dim, std::int64_t summary_tokens, double norm_eps = 1e-5);
  /// The paper's form: (B, T, C) -> (B, S, C) through adaptive_avg_pool1d.
  torch::Tensor forward(const torch::Tensor& x);
  /// The causal form: the mean over each of `chunks` (all ending within T) -> (B, chunks.size(), C).
  torch::Tensor pool_chunks(const torch::Tensor& x, const std::vector<SummaryChunk>& chunks);
  /// The same with the chunks' averaging matrix (S', T) already built (chunk_means): nothing copied from the host.
  torch::Tensor pool_chunks(const torch::Tensor& x, const torch::Tensor& means);

  std::int64_t summary_tokens;
  Norm norm{nullptr};
  torch::nn::Linear proj{nullptr};
};
TORCH_MODULE(SummaryPool);

/// The chunks' averaging matrix (S', T) fp32 on `device`: row i holds 1 / len_i over chunk i.
torch::Tensor chunk_means(const std::vector<SummaryChunk>& chunks, std::int64_t seq, const torch::Device& device);

/// What a DRR layer reads: the paper's two lists, and for the causal form the last position of each summary's chunk.
struct DrrMemoryBank {
  bool causal = true;
  std::vector<torch::Tensor> short_term;  ///< the most recent layer outputs, (B, T, C) each, oldest first
  std::vector<torch::Tensor> summaries;   ///< one (B, S', C) per completed block, oldest first
  torch::Tensor summary_last;             ///< causal: (S') int64, last position of each summary token's chunk
};

/// One DRR layer (the paper's DRRLayer): router, two memory attentions and a PreNorm block on the routed mix.
class DrrLayerImpl : public torch::nn::Module {
 public:
  DrrLayerImpl(const TransformerOptions& transformer, const DrrOptions& options, std::int64_t layer_index);
  /// x: (B, T, C), positions: (T) -> (B, T, C). `gates` (when not null) receives the softmax gates (B, T, 3):
  /// identity, short-term, long-term.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& positions, const DrrMemoryBank& memory,
                        torch::Tensor* gates = nullptr);
  /// The router's logits: (B, T, C) -> (B, T, 3).
  torch::Tensor router_logits(const torch::Tensor& x);
  /// The paper's router init: final weight zero, bias [2.0, 0.0, -0.5] (toward the identity).
  void reset_router();

  DrrOptions options;
  int layer_index = 0;  ///< reported to the residual-ratio probe
  double dropout = 0.0;
  Norm router_norm{nullptr};
  torch::nn::Linear router_hidden{nullptr}, router_out{nullptr};  // C -> h -> 3
  DepthMemoryAttention short_mem_attn{nullptr}, long_mem_attn{nullptr};
  Norm norm1{nullptr}, norm2{nullptr};
  CausalSelfAttention attn{nullptr};  // nn.MultiheadAttention's packed in_proj (q, k, v) and out_proj, with biases
  torch::nn::Linear mlp_up{nullptr}, mlp_down{nullptr};  // C -> 4C -> C, GELU, dropout after each, as the paper
};
TORCH_MODULE(DrrLayer);

/// Parameters and forward FLOPs of DRR against the plain PreNorm (GPT-2 style) stack of the same shape.
/// Computed from the shapes (no model is built); `seq` 0 means max_seq_len.
ArchitectureOverhead drr_overhead(const TransformerOptions& transformer, const DrrOptions& options, std::int64_t seq = 0);

/// Forward FLOPs (2 per multiply-add) of a memory attention of `batch` x `seq` queries over `entries` memory entries
/// per sequence: q and output projections of the queries, k and v projections of the entries, scores and weighted
/// sum over the full (seq, entries) rectangle. 0 when there is no entry (the seed skips the attention).
double depth_memory_attention_flops(double batch, double seq, double entries, std::int64_t dim);
/// Forward FLOPs of DRR layer work on `batch` x `seq` tokens: router, short-term attention over `short_entries`
/// and long-term attention over `long_entries` entries per sequence, the PreNorm block, and (`pools`) the summary
/// pool that runs after it: its projection, and its chunk average when that is a (S', seq) x (seq, C) product per
/// sequence (the causal form, `pool_product_rows` = S'; the paper's adaptive pooling is additions only, 0).
double drr_layer_flops(double batch, double seq, const LayerShape& shape, std::int64_t router_hidden,
                       double short_entries, double long_entries, bool pools, double pool_product_rows);

class DrrTransformer : public TransformerTrunk {
 public:
  /// The trunk is GPT-2 style whatever `transformer.style()` says (the paper's LayerNorm, learned positions, biases).
  DrrTransformer(TransformerOptions transformer, DrrOptions options = {});
  ModelOutput forward(const torch::Tensor& tokens, bool trace = false) override;
  std::string arch_id() const override { return "drr"; }
  /// Causal memory only. Per layer i three caches: "attn" (the block's keys/values, every token), "short" (layer
  /// i's short-term memory keys/values over the outputs of the W layers before it, every token) and "long" (its
  /// long-term memory keys/values over the summary tokens completed so far); the running chunk sums of each block
  /// summary live in DecodeState::tensors.
  std::unique_ptr<DecodeState> begin_decode(std::int64_t batch) override;
  torch::Tensor decode(DecodeState& state, const torch::Tensor& tokens, DecodeTrace* trace = nullptr) override;
  /// Adds the memory form and the overhead against the plain PreNorm stack at T = max_seq_len.
  std::string describe() const override;

  /// Everything a forward pass computes before the LM head.
  struct States {
    std::vector<torch::Tensor> layers;  ///< each layer's output (B, T, C), when asked for
    torch::Tensor final;                ///< final_norm of the last layer's output (the seed model's return value)
    torch::Tensor gates;                ///< (B, T, L, 3) detached gates, when traced
    std::vector<LayerTrace> trace;      ///< when traced
  };
  States states(const torch::Tensor& tokens, bool trace = false, bool keep_layers = false);

  const DrrOptions& drr_options() const { return drr_options_; }
  ArchitectureOverhead overhead(std::int64_t seq = 0) const { return drr_overhead(options_, drr_options_, seq); }

  std::vector<DrrLayer> layers;  ///< registered as "blocks"
  SummaryPool summary_pool{nullptr};

 private:
  DrrOptions drr_options_;
  /// The causal memory's index tensors for sequences of `seq` tokens on `device`, built on the host once and kept: a
  /// training step captured as a CUDA graph copies nothing from the host.
  struct ChunkTensors {
    std::int64_t seq = -1;
    torch::Device device = torch::kCPU;
    torch::Tensor summary_last, means;  ///< DrrMemoryBank::summary_last; chunk_means
  };
  ChunkTensors chunk_tensors_;
};

/// Copies a state dict of the paper's SmallDRRTransformer (its parameter names: embed, pos_embed, layers.<i>.router.0,
/// self_attn.in_proj_weight, mlp.3, ...) into `model`. Throws ConfigError naming the tensor when one is missing,
/// unknown or of another shape. An untied lm_head (the seed has none) is left as it is.
void load_seed_parameters(DrrTransformer& model, const std::map<std::string, torch::Tensor>& seed_state);

ArchitectureEntry drr_architecture();

}  // namespace routelab
