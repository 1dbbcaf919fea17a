// Depth Routing Residuals: the paper's modules (DepthMemoryAttention, SummaryPool, DRRLayer, the model loop), the
// causal memory form for language modelling, FLOPs and parameter overhead, seed-weight loading and the registry entry.
#include "core/models/drr.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include "core/inference/kv_cache.h"
#include "core/models/blocks/attention.h"
#include "core/models/blocks/part_scope.h"
#include "core/models/blocks/residual_probe.h"
#include "core/models/blocks/staircase_attention.h"
#include "core/util/errors.h"
#include "core/util/json_fields.h"

namespace routelab {

const OptionTable<DrrOptions>& drr_options_table() {
  using T = OptionType;
  static const auto table = [] {
    OptionTable<DrrOptions> t;
    t.value(ROUTELAB_OPTION(short_window), T::Int, "W: the short-term memory holds the last W layer outputs", 1, 256)
        .value(ROUTELAB_OPTION(summary_tokens), T::Int, "S: summary tokens pooled from each block's output", 1, 1 << 16)
        .value(ROUTELAB_OPTION(block_size), T::Int,
               "layers per block: a summary is pooled after every block_size layers", 1, 256)
        .value(ROUTELAB_OPTION(router_hidden_mult), T::Int, "router hidden width = router_hidden_mult * n_embd", 1, 64)
        .choice(ROUTELAB_OPTION(memory), {"causal", "seed"},
                "causal: position t reads memory at positions <= t and summaries of complete chunks only (language "
                "modelling); seed: the paper's non-causal code, refused for a language model");
    return t;
  }();
  return table;
}

const OptionTable<TransformerOptions>& drr_transformer_options_table() {
  using T = OptionType;
  static const auto table = [] {
    OptionTable<TransformerOptions> t([] { return TransformerOptions().style(ModelStyle::GPT2); });
    t.value(ROUTELAB_OPTION(n_layer), T::Int, "number of DRR layers", 1, 256)
        .value(ROUTELAB_OPTION(n_embd), T::Int, "model width d", 8, 16384)
        .value(ROUTELAB_OPTION(n_head), T::Int,
               "heads of the block's attention and of both memory attentions (must divide n_embd)", 1, 256)
        .weight_layout()
        .resolved(
            ROUTELAB_OPTION(max_seq_len), T::Int, 0,
            "longest sequence the model accepts (0: data.context); the causal form cuts the summary chunks over it", 0,
            1 << 22)
        .value(ROUTELAB_OPTION(tie_weights), T::Bool, "share the token embedding with the output head")
        .value(ROUTELAB_OPTION(norm_eps), T::Float, "LayerNorm epsilon", 1e-12, 1)
        .value(ROUTELAB_OPTION(dropout), T::Float,
               "dropout of the paper: attention and memory-attention probabilities, after the MLP's GELU and after its "
               "output, in training",
               0, 0.9)
        .training_only()
        .choice(ROUTELAB_OPTION(init), {"gpt3", "normal"},
                "gpt3: N(0,0.02) with the block's output projections N(0,0.02/sqrt(2L)); normal: N(0,0.02) everywhere; "
                "the router's last layer always starts at weight 0, bias [2, 0, -0.5]")
        .training_only();
    return t;
  }();
  return table;
}

TransformerOptions drr_transformer_options_from_json(const nlohmann::json& m, std::int64_t vocab_size,
                                                     std::int64_t context) {
  auto o = drr_transformer_options_table().read(m);
  o.vocab_size(vocab_size);
  if (o.max_seq_len() <= 0) o.max_seq_len(context);
  return o;
}

std::vector<SummaryChunk> summary_chunks(std::int64_t length, std::int64_t summary_tokens) {
  std::vector<SummaryChunk> chunks;
  for (std::int64_t i = 0; i < summary_tokens; ++i)
    chunks.push_back({i * length / summary_tokens, ((i + 1) * length + summary_tokens - 1) / summary_tokens});
  return chunks;
}

namespace {

/// The chunks of the causal form that a sequence of `seq` tokens completes.
std::vector<SummaryChunk> complete_chunks(const DrrOptions& o, std::int64_t seq, std::int64_t max_seq_len) {
  auto chunks = summary_chunks(max_seq_len, o.summary_tokens());
  chunks.erase(std::remove_if(chunks.begin(), chunks.end(), [&](const SummaryChunk& c) { return c.end > seq; }),
               chunks.end());
  return chunks;
}

}  // namespace

std::int64_t drr_summary_tokens(const DrrOptions& o, std::int64_t seq, std::int64_t max_seq_len) {
  if (o.memory() == DrrMemory::Seed) return o.summary_tokens();
  return static_cast<std::int64_t>(complete_chunks(o, seq, max_seq_len).size());
}

namespace {

/// Scaled dot-product attention without a causal mask: q (B, H, T, hd) over k, v (B, H, M, hd) -> (B, H, T, hd).
/// `visible` (T, M) bool limits the entries a row reads; a row that sees none reads nothing. Where the caller says each
/// row's visible entries are a `prefix` (the memories' entries go in position order: short_visibility,
/// long_visibility), on the CPU without dropout the staircase kernel scores each row's prefix only; elsewhere the
/// masked rectangle is computed, a row that sees none over every entry (so nothing is NaN, forward or backward) and
/// then zeroed.
torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const torch::Tensor& visible, double dropout, bool training, bool prefix = false) {
  const auto B = q.size(0), H = q.size(1), T = q.size(2), hd = q.size(3), M = k.size(2);
  if (prefix && visible.defined() && staircase_attention_runs(q, k, v, dropout, training)) {
    const auto lens = visible.sum(-1).to(torch::kLong).unsqueeze(0).expand({B, T});  // each row's prefix
    return cpu_staircase_attention(q, k, v, lens, std::vector<std::int64_t>(static_cast<std::size_t>(B), T));
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const auto q3 = q.reshape({B * H, T, hd});
  const auto k3 = k.reshape({B * H, M, hd});
  const auto v3 = v.reshape({B * H, M, hd});
  torch::Tensor scores, any_visible;  // scores (B H, T, M)
  if (visible.defined()) {
    any_visible = visible.any(-1, /*keepdim=*/true);  // (T, 1)
    const auto hidden = visible.logical_or(any_visible.logical_not()).logical_not();  // (T, M)
    const auto bias = torch::zeros({T, M}, q.options()).masked_fill(hidden, -std::numeric_limits<float>::infinity());
    scores = torch::baddbmm(bias, q3, k3.transpose(1, 2), /*beta=*/1.0, /*alpha=*/scale);  // mask and scale in one pass
  } else {
    scores = torch::bmm(q3, k3.transpose(1, 2)).mul_(scale);
  }
  auto probs = torch::softmax(scores, -1);
  if (training && dropout > 0) probs = torch::dropout(probs, dropout, true);
  auto out = torch::bmm(probs.to(v3.scalar_type()), v3).view({B, H, T, hd});
  if (any_visible.defined()) out = out * any_visible.to(out.scalar_type());
  return out;
}

/// (B, N, C) -> (B, H, N, hd)
torch::Tensor split_heads(const torch::Tensor& x, std::int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
}

/// (B, H, N, hd) -> (B, N, C)
torch::Tensor merge_heads(const torch::Tensor& x) {
  return x.transpose(1, 2).reshape({x.size(0), x.size(2), x.size(1) * x.size(3)});
}

/// Short-term memory of the causal form, `window` layer outputs interleaved by position (entry s window + w: position
/// s of the w-th output): (T, window T), visible to position t iff s <= t, the first (t + 1) window entries.
torch::Tensor short_visibility(std::int64_t seq, std::int64_t window, const torch::Device& device) {
  const auto options = torch::TensorOptions().dtype(torch::kLong).device(device);
  const auto ends = (torch::arange(seq, options) + 1) * window;        // (T)
  return torch::arange(seq * window, options).unsqueeze(0) < ends.unsqueeze(1);  // (T, window T)
}

/// Long-term memory of the causal form, `blocks` summaries interleaved by summary token (entry i blocks + j: token i of
/// block j): (T, S' blocks), visible to position t iff token i's chunk ends at or before t (a prefix: the chunks'
/// last positions ascend).
torch::Tensor long_visibility(std::int64_t seq, const torch::Tensor& summary_last, std::int64_t blocks) {
  const auto pos = torch::arange(seq, summary_last.options());
  return summary_last.repeat_interleave(blocks).unsqueeze(0) <= pos.unsqueeze(1);  // (T, S' blocks)
}

/// Tensors (B, n, C) side by side entry by entry: (B, n k, C), entry i k + j the i-th of tensor j.
torch::Tensor interleave(const std::vector<torch::Tensor>& parts) {
  const auto& first = parts.front();
  return torch::stack(parts, 2).reshape({first.size(0), first.size(1) * static_cast<std::int64_t>(parts.size()),
                                         first.size(2)});
}

NormOptions layer_norm(std::int64_t dim, double eps) { return NormOptions(dim).kind(NormKind::Layer).eps(eps).bias(true); }

TransformerOptions gpt2_style(TransformerOptions o) {
  o.style(ModelStyle::GPT2);
  return o;
}

}  // namespace

DepthMemoryAttentionImpl::DepthMemoryAttentionImpl(std::int64_t dim_, std::int64_t num_heads_, double dropout_)
    : dim(dim_), num_heads(num_heads_), dropout(dropout_) {
  reset();
}

void DepthMemoryAttentionImpl::reset() {
  if (dim % num_heads != 0)
    throw ConfigError("model.n_head: " + std::to_string(num_heads) + " does not divide n_embd " + std::to_string(dim));
  const auto make = [&](const char* name) {
    return register_module(name, torch::nn::Linear(torch::nn::LinearOptions(dim, dim).bias(false)));
  };
  q_proj = make("q_proj");
  k_proj = make("k_proj");
  v_proj = make("v_proj");
  out_proj = make("out_proj");
}

torch::Tensor DepthMemoryAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& memory,
                                               const torch::Tensor& visible, bool prefix) {
  if (!memory.defined() || memory.numel() == 0) return torch::zeros_like(x);
  const auto q = split_heads(linear(x, q_proj), num_heads);       // (B, H, T, hd)
  const auto k = split_heads(linear(memory, k_proj), num_heads);  // (B, H, M, hd)
  const auto v = split_heads(linear(memory, v_proj), num_heads);
  return linear(merge_heads(attend(q, k, v, visible, dropout, is_training(), prefix)), out_proj);  // (B, T, C)
}

SummaryPoolImpl::SummaryPoolImpl(std::int64_t dim, std::int64_t summary_tokens_, double norm_eps)
    : summary_tokens(summary_tokens_) {
  norm = register_module("norm", Norm(layer_norm(dim, norm_eps)));
  proj = register_module("proj", torch::nn::Linear(torch::nn::LinearOptions(dim, dim).bias(true)));
}

torch::Tensor SummaryPoolImpl::forward(const torch::Tensor& x) {
  const auto projected = linear(norm(x), proj);                                       // (B, T, C)
  const auto pooled = torch::adaptive_avg_pool1d(projected.transpose(1, 2), {summary_tokens});  // (B, C, S)
  return pooled.transpose(1, 2).contiguous();                                          // (B, S, C)
}

torch::Tensor chunk_means(const std::vector<SummaryChunk>& chunks, std::int64_t seq, const torch::Device& device) {
  // At T = max_seq_len this is adaptive_avg_pool1d.
  auto means = torch::zeros({static_cast<std::int64_t>(chunks.size()), seq}, torch::kFloat);
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const auto& c = chunks[i];
    const auto len = c.end - c.start;
    means[static_cast<std::int64_t>(i)].narrow(0, c.start, len).fill_(1.0 / static_cast<double>(len));
  }
  return means.to(device);
}

torch::Tensor SummaryPoolImpl::pool_chunks(const torch::Tensor& x, const std::vector<SummaryChunk>& chunks) {
  return pool_chunks(x, chunk_means(chunks, x.size(1), x.device()));
}

torch::Tensor SummaryPoolImpl::pool_chunks(const torch::Tensor& x, const torch::Tensor& means) {
  const auto projected = linear(norm(x), proj);                         // (B, T, C)
  return torch::matmul(means.to(projected.scalar_type()), projected);  // (B, S', C)
}

DrrLayerImpl::DrrLayerImpl(const TransformerOptions& t, const DrrOptions& options_, std::int64_t layer)
    : options(options_), layer_index(static_cast<int>(layer)), dropout(t.dropout()) {
  const auto C = t.n_embd(), hidden = C * options.router_hidden_mult();
  router_norm = register_module("router_norm", Norm(layer_norm(C, t.norm_eps())));
  router_hidden = register_module("router_hidden", torch::nn::Linear(torch::nn::LinearOptions(C, hidden).bias(true)));
  router_out = register_module("router_out", torch::nn::Linear(torch::nn::LinearOptions(hidden, 3).bias(true)));
  short_mem_attn = register_module("short_mem_attn", DepthMemoryAttention(C, t.n_head(), t.dropout()));
  long_mem_attn = register_module("long_mem_attn", DepthMemoryAttention(C, t.n_head(), t.dropout()));
  norm1 = register_module("norm1", Norm(layer_norm(C, t.norm_eps())));
  attn = register_module("attn", CausalSelfAttention(AttentionOptions(C, t.n_head())
                                                          .bias(true)
                                                          .rope(false)
                                                          .max_positions(t.max_seq_len())
                                                          .dropout(t.dropout())));
  norm2 = register_module("norm2", Norm(layer_norm(C, t.norm_eps())));
  mlp_up = register_module("mlp_up", torch::nn::Linear(torch::nn::LinearOptions(C, t.ff_dim()).bias(true)));
  mlp_down = register_module("mlp_down", torch::nn::Linear(torch::nn::LinearOptions(t.ff_dim(), C).bias(true)));
  reset_router();
}

void DrrLayerImpl::reset_router() {
  torch::NoGradGuard no_grad;
  router_out->weight.zero_();
  router_out->bias.copy_(torch::tensor({2.0f, 0.0f, -0.5f}));  // identity, short-term, long-term
}

torch::Tensor DrrLayerImpl::router_logits(const torch::Tensor& x) {
  return linear(torch::gelu(linear(router_norm(x), router_hidden)), router_out);  // (B, T, 3)
}

torch::Tensor DrrLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& positions, const DrrMemoryBank& memory,
                                    torch::Tensor* gates_out) {
  const auto T = x.size(1);
  const bool training = is_training();

  // Short-term memory: the last W layer outputs side by side, (B, w T, C).
  torch::Tensor short_ctx;
  const auto window = std::min<std::int64_t>(options.short_window(), static_cast<std::int64_t>(memory.short_term.size()));
  if (window > 0) {
    ROUTELAB_PART("depth memory");
    const std::vector<torch::Tensor> recent(memory.short_term.end() - window, memory.short_term.end());
    const auto bank = interleave(recent);  // (B, T w, C) by position
    const auto visible = memory.causal ? short_visibility(T, window, x.device()) : torch::Tensor();
    short_ctx = short_mem_attn(x, bank, visible, /*prefix=*/true);
  }
  // Long-term memory: every block summary so far, (B, S' Nb, C).
  torch::Tensor long_ctx;
  if (!memory.summaries.empty() && memory.summaries.front().size(1) > 0) {
    ROUTELAB_PART("depth memory");
    const auto bank = interleave(memory.summaries);  // (B, S' Nb, C) by summary token
    const auto blocks = static_cast<std::int64_t>(memory.summaries.size());
    const auto visible = memory.causal ? long_visibility(T, memory.summary_last, blocks) : torch::Tensor();
    long_ctx = long_mem_attn(x, bank, visible, /*prefix=*/true);
  }

  std::optional<PartScope> router_part(std::in_place, ROUTELAB_PART_PREFIX "router");  // the gates and their mix
  const auto gates = torch::softmax(router_logits(x), -1);  // (B, T, 3)
  if (gates_out) *gates_out = gates.detach();
  // hybrid = g0 x + g1 short + g2 long; an absent memory is the paper's zero context, so its term is left out.
  auto hybrid = gates.narrow(-1, 0, 1) * x;  // (B, T, C)
  if (short_ctx.defined()) hybrid = hybrid + gates.narrow(-1, 1, 1) * short_ctx;
  if (long_ctx.defined()) hybrid = hybrid + gates.narrow(-1, 2, 1) * long_ctx;
  router_part.reset();

  // PreNorm block on the routed input: x = hybrid + Attn(LN(hybrid)); x = x + MLP(LN(x)).
  const auto h = norm1->into_matmul(hybrid);
  torch::Tensor attn_out;
  if (memory.causal) {
    attn_out = attn(h, positions);
  } else {  // the paper's nn.MultiheadAttention: bidirectional
    ROUTELAB_PART("attention");
    const auto qkv = attn->project(h, positions);
    attn_out = attn->output(attend(qkv.q, qkv.k, qkv.v, {}, dropout, training));
  }
  const auto [mid, n2] = norm2->add_into_matmul(hybrid, attn_out);  // mid = hybrid + attn_out and its norm
  std::optional<PartScope> mlp_part(std::in_place, ROUTELAB_PART_PREFIX "mlp");
  auto up = torch::gelu(linear(n2, mlp_up));                          // (B, T, 4C)
  if (training && dropout > 0) up = torch::dropout(up, dropout, true);
  auto mlp_out = linear(up, mlp_down);
  if (training && dropout > 0) mlp_out = torch::dropout(mlp_out, dropout, true);
  mlp_part.reset();
  if (residual_probe_active()) {
    record_residual(layer_index, "attn", hybrid, attn_out);
    record_residual(layer_index, "mlp", mid, mlp_out);
  }
  return mid + mlp_out;
}

double depth_memory_attention_flops(double batch, double seq, double entries, std::int64_t dim) {
  if (entries <= 0) return 0.0;
  const double d = static_cast<double>(dim), queries = batch * seq;
  return linear_flops(queries, d, d) + 2.0 * linear_flops(batch * entries, d, d) + 4.0 * queries * entries * d +
         linear_flops(queries, d, d);
}

double drr_layer_flops(double batch, double seq, const LayerShape& shape, std::int64_t router_hidden,
                       double short_entries, double long_entries, bool pools, double pool_product_rows) {
  const double tokens = batch * seq, d = static_cast<double>(shape.d), h = static_cast<double>(router_hidden);
  double flops = linear_flops(tokens, d, h) + linear_flops(tokens, h, 3.0);  // router
  flops += depth_memory_attention_flops(batch, seq, short_entries, shape.d);
  flops += depth_memory_attention_flops(batch, seq, long_entries, shape.d);
  flops += dense_layer_flops(batch, seq, shape);  // the PreNorm block
  if (pools) flops += linear_flops(tokens, d, d) + linear_flops(batch * pool_product_rows, seq, d);
  return flops;
}

ArchitectureOverhead drr_overhead(const TransformerOptions& transformer, const DrrOptions& options, std::int64_t seq) {
  const auto t = gpt2_style(transformer);
  const auto shape = layer_shape(t);
  const double d = static_cast<double>(t.n_embd()), F = static_cast<double>(t.ff_dim());
  const double V = static_cast<double>(t.vocab_size()), N = static_cast<double>(t.max_seq_len());
  const double L = static_cast<double>(t.n_layer());
  const double h = d * static_cast<double>(options.router_hidden_mult());
  ArchitectureOverhead o;
  o.seq = seq > 0 ? seq : t.max_seq_len();

  // Plain GPT-2 style PreNorm layer: two LayerNorms, packed qkv and output projection, GELU MLP, all with biases.
  const double base_layer = 2 * (2 * d) + (3 * d * d + 3 * d) + (d * d + d) + (d * F + F) + (F * d + d);
  // DRR adds per layer the router (LayerNorm, d -> h -> 3) and two bias-free memory attentions, plus one shared pool.
  const double router = 2 * d + (d * h + h) + (h * 3 + 3);
  const double memories = 2 * 4 * d * d;
  const double pool = 2 * d + d * d + d;
  o.base_stack_params = L * base_layer;
  o.arch_stack_params = L * (base_layer + router + memories) + pool;
  const double outside = V * d + N * d + 2 * d + (t.tie_weights() ? 0.0 : V * d);  // embeddings, final norm, head
  o.base_params = o.base_stack_params + outside;
  o.arch_params = o.arch_stack_params + outside;

  const double T = static_cast<double>(o.seq);
  const auto summary = static_cast<double>(drr_summary_tokens(options, o.seq, t.max_seq_len()));
  for (std::int64_t i = 0; i < t.n_layer(); ++i) {
    const double window = static_cast<double>(std::min(options.short_window(), i));
    const double blocks = static_cast<double>(i / options.block_size());
    const bool pools = (i + 1) % options.block_size() == 0 && summary > 0;
    o.base_stack_flops += dense_layer_flops(1.0, T, shape);
    o.arch_stack_flops += drr_layer_flops(1.0, T, shape, static_cast<std::int64_t>(h), window * T, blocks * summary, pools,
                                         options.memory() == DrrMemory::Causal ? summary : 0.0);
  }
  const double head = linear_flops(T, d, V);
  o.base_flops = o.base_stack_flops + head;
  o.arch_flops = o.arch_stack_flops + head;
  return o;
}

DrrTransformer::DrrTransformer(TransformerOptions transformer, DrrOptions options)
    : TransformerTrunk(gpt2_style(std::move(transformer))), drr_options_(std::move(options)) {
  const auto& o = drr_options_;
  if (o.short_window() < 1) throw ConfigError("model.short_window: " + std::to_string(o.short_window()) + " must be at least 1");
  if (o.summary_tokens() < 1)
    throw ConfigError("model.summary_tokens: " + std::to_string(o.summary_tokens()) + " must be at least 1");
  if (o.block_size() < 1) throw ConfigError("model.block_size: " + std::to_string(o.block_size()) + " must be at least 1");
  if (o.router_hidden_mult() < 1)
    throw ConfigError("model.router_hidden_mult: " + std::to_string(o.router_hidden_mult()) + " must be at least 1");
  if (options_.n_kv_head() > 0 && options_.n_kv_head() != options_.n_head())
    throw ConfigError("model.n_kv_head: DRR's attention (nn.MultiheadAttention) has no grouped-query heads");
  auto list = register_module("blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < options_.n_layer(); ++i) {
    layers.push_back(DrrLayer(options_, drr_options_, i));
    list->push_back(layers.back());
  }
  summary_pool = register_module("summary_pool", SummaryPool(options_.n_embd(), o.summary_tokens(), options_.norm_eps()));
  // The trunk's init (GPT-3 residual scaling on the block's output projections; memory attentions, router hidden
  // layer and pool N(0, 0.02); biases zero), then the paper's router init, which the generic init overwrote.
  init_weights({"attn.proj.weight", "mlp_down.weight"});
  for (auto& layer : layers) layer->reset_router();
}

DrrTransformer::States DrrTransformer::states(const torch::Tensor& tokens, bool trace, bool keep_layers) {
  const auto B = tokens.size(0), T = tokens.size(1);
  if (T > options_.max_seq_len())
    throw ConfigError("sequence of " + std::to_string(T) + " tokens exceeds model.max_seq_len " +
                      std::to_string(options_.max_seq_len()));
  const auto& o = drr_options_;
  const auto positions = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));  // (T)
  auto x = ROUTELAB_IN_PART("embedding", tok_emb(tokens) + pos_emb(positions));  // (B, T, C): no embedding dropout

  DrrMemoryBank memory;
  memory.causal = o.memory() == DrrMemory::Causal;
  if (memory.causal && (chunk_tensors_.seq != T || chunk_tensors_.device != tokens.device())) {
    // Chunks cut over max_seq_len, not T: a position's output then never depends on how many tokens follow it.
    const auto chunks = complete_chunks(o, T, options_.max_seq_len());
    std::vector<std::int64_t> last;
    for (const auto& c : chunks) last.push_back(c.end - 1);
    chunk_tensors_ = {T, tokens.device(), torch::tensor(last, torch::kLong).to(tokens.device()),
                      chunk_means(chunks, T, tokens.device())};
  }
  if (memory.causal) memory.summary_last = chunk_tensors_.summary_last;  // (S')
  const auto summary = memory.causal ? chunk_tensors_.summary_last.size(0) : o.summary_tokens();

  States out;
  std::vector<torch::Tensor> layer_gates;
  const auto shape = layer_shape(options_);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto window = static_cast<std::int64_t>(memory.short_term.size());
    const auto blocks = static_cast<std::int64_t>(memory.summaries.size());
    torch::Tensor gates;
    x = layers[i]->forward(x, positions, memory, trace ? &gates : nullptr);  // (B, T, C)
    memory.short_term.push_back(x);
    if (static_cast<std::int64_t>(memory.short_term.size()) > o.short_window()) memory.short_term.erase(memory.short_term.begin());
    const bool pools = (static_cast<std::int64_t>(i) + 1) % o.block_size() == 0 && summary > 0;
    if (pools)
      memory.summaries.push_back(
          ROUTELAB_IN_PART("depth memory", memory.causal ? summary_pool->pool_chunks(x, chunk_tensors_.means)
                                                         : summary_pool(x)));
    if (keep_layers) out.layers.push_back(x);
    record_layer_state(x);
    if (!trace) continue;

    layer_gates.push_back(gates);
    // The mean gates (3) stay on the device until the model resolves its trace (one read a forward).
    const auto means = gates.to(torch::kDouble).mean(std::vector<std::int64_t>{0, 1});
    LayerTrace t;
    t.layer = static_cast<int>(i);
    t.kind = "drr";
    t.routed = true;
    // The "expensive path" of a DRR token is its memory share 1 - g_identity; no path is skipped (every token
    // computes all three), so the decision marks the tokens whose largest gate is a memory path.
    t.gate = 1.0 - gates.select(-1, 0).to(torch::kFloat);  // (B, T)
    t.decision = gates.argmax(-1).ne(0);                     // (B, T)
    const double short_entries = static_cast<double>(std::min(window, o.short_window()) * T);
    const double long_entries = static_cast<double>(blocks * summary);
    t.tokens_processed = {{"attn", B * T},
                          {"mlp", B * T},
                          {"router", B * T},
                          {"short_memory", short_entries > 0 ? B * T : 0},
                          {"long_memory", long_entries > 0 ? B * T : 0},
                          // decoded token by token, the layer caches every token and its memory entries
                          {"kv", B * T + B * static_cast<std::int64_t>(std::llround(short_entries + long_entries))}};
    t.flops = drr_layer_flops(static_cast<double>(B), static_cast<double>(T), shape,
                              options_.n_embd() * o.router_hidden_mult(), short_entries, long_entries, pools,
                              memory.causal ? static_cast<double>(summary) : 0.0);
    t.dense_flops = dense_layer_flops(static_cast<double>(B), static_cast<double>(T), shape);
    t.on_device = {{"routed_fraction", 1.0 - means[0]},
                   {"gate_identity", means[0]},
                   {"gate_short", means[1]},
                   {"gate_long", means[2]}};
    t.stats = {{"short_entries", short_entries}, {"long_entries", long_entries}};
    out.trace.push_back(std::move(t));
  }
  out.final = final_norm(x);
  if (trace) out.gates = torch::stack(layer_gates, 2);  // (B, T, L, 3)
  return out;
}

ModelOutput DrrTransformer::forward(const torch::Tensor& tokens, bool trace) {
  auto s = states(tokens, trace);
  ModelOutput out;
  out.logits = vocab_logits(s.final, options_.tie_weights() ? tok_emb->weight : lm_head->weight);  // (B, T, V)
  out.aux_loss = torch::zeros({}, out.logits.options().dtype(torch::kFloat));  // DRR has no auxiliary loss
  if (trace) {
    if (!s.trace.empty()) {  // the mean over layers of each path's mean gate, read back with the trace
      for (const auto* path : {"gate_identity", "gate_short", "gate_long"}) {
        std::vector<torch::Tensor> layers;
        for (const auto& t : s.trace) layers.push_back(t.on_device.at(path));
        out.stats_on_device[path] = torch::stack(layers).mean();
      }
    }
    out.token_data["drr_gates"] = s.gates;
    out.trace = std::move(s.trace);
    resolve_on_device(out);
  }
  return out;
}

std::unique_ptr<DecodeState> DrrTransformer::begin_decode(std::int64_t batch) {
  const auto& o = drr_options_;
  if (o.memory() != DrrMemory::Causal)
    throw ConfigError("drr decode: model.memory 'seed' reads later positions; incremental decoding needs 'causal'");
  auto state = new_decode_state(batch, /*layer_caches=*/false);
  const auto H = options_.n_head(), hd = options_.n_embd() / H;
  for (std::int64_t i = 0; i < options_.n_layer(); ++i) {
    const int layer = static_cast<int>(i);
    state->add_cache(KVCache("attn", layer, batch, H, hd));
    state->add_cache(KVCache("short", layer, batch, H, hd, std::min(i, o.short_window())));
    state->add_cache(KVCache("long", layer, batch, H, hd, 0, (i / o.block_size()) * o.summary_tokens()));
  }
  return state;
}

torch::Tensor DrrTransformer::decode(DecodeState& state, const torch::Tensor& tokens, DecodeTrace* trace) {
  torch::NoGradGuard no_grad;
  const auto& o = drr_options_;
  torch::Tensor positions;
  auto x = embed_decode(tokens, state, positions);  // (B, n, C): no embedding dropout, as states()
  const auto B = tokens.size(0), n = tokens.size(1), C = options_.n_embd(), H = options_.n_head();
  const auto L = static_cast<std::int64_t>(layers.size());
  const auto first = state.length(), last = first + n - 1;  // positions of the new rows
  const auto chunks = summary_chunks(options_.max_seq_len(), o.summary_tokens());
  const auto cache = [&](std::int64_t layer, int which) -> KVCache& { return state.cache(static_cast<std::size_t>(3 * layer + which)); };
  const auto memory_kv = [&](DepthMemoryAttention& m, const torch::Tensor& rows) {
    return std::make_pair(split_heads(linear(rows, m->k_proj), H), split_heads(linear(rows, m->v_proj), H));
  };
  const auto memory_read = [&](DepthMemoryAttention& m, KVCache& c, const torch::Tensor& q_rows) {
    const auto heads = c.attend(split_heads(linear(q_rows, m->q_proj), H), positions);  // (B, H, n, hd)
    return linear(merge_heads(heads), m->out_proj);                                       // (B, n, C)
  };
  std::vector<torch::Tensor> outputs;  // each layer's output for the new rows
  for (std::int64_t i = 0; i < L; ++i) {
    auto& layer = layers[static_cast<std::size_t>(i)];
    // Short-term memory: the new rows of the last W layer outputs join layer i's memory at their positions.
    const auto window = std::min(i, o.short_window());
    for (std::int64_t j = i - window; j < i; ++j) {
      const auto [k, v] = memory_kv(layer->short_mem_attn, outputs[static_cast<std::size_t>(j)]);
      cache(i, 1).append(k, v, positions);
    }
    torch::Tensor short_ctx, long_ctx;
    if (window > 0) short_ctx = memory_read(layer->short_mem_attn, cache(i, 1), x);
    if (cache(i, 2).max_length() > 0) long_ctx = memory_read(layer->long_mem_attn, cache(i, 2), x);
    const auto gates = torch::softmax(layer->router_logits(x), -1);  // (B, n, 3)
    auto hybrid = gates.narrow(-1, 0, 1) * x;
    if (short_ctx.defined()) hybrid = hybrid + gates.narrow(-1, 1, 1) * short_ctx;
    if (long_ctx.defined()) hybrid = hybrid + gates.narrow(-1, 2, 1) * long_ctx;
    const auto attn_out = layer->attn->forward_cached(layer->norm1->into_matmul(hybrid), positions, cache(i, 0));
    const auto [mid, n2] = layer->norm2->add_into_matmul(hybrid, attn_out);
    x = mid + linear(torch::gelu(linear(n2, layer->mlp_up)), layer->mlp_down);
    outputs.push_back(x);
    if (trace) {
      LayerTrace t;
      t.layer = static_cast<int>(i);
      t.kind = "drr";
      t.routed = true;
      t.gate = 1.0 - gates.select(-1, 0);
      t.decision = gates.argmax(-1).ne(0);
      t.routed_fraction = t.decision.to(torch::kFloat).mean().item<double>();
      t.stats = {{"gate_identity", gates.select(-1, 0).mean().item<double>()},
                 {"gate_short", gates.select(-1, 1).mean().item<double>()},
                 {"gate_long", gates.select(-1, 2).mean().item<double>()}};
      trace->layers.push_back(std::move(t));
    }
    if ((i + 1) % o.block_size() != 0 || i + 1 == L) continue;
    // Block summary: running sums of the pooled projection per chunk; a chunk whose last position arrives becomes
    // a summary token that the long-term memories of all later layers take in, visible from that position on.
    const auto key = "pool." + std::to_string(i);
    auto& sums = state.tensors[key];
    if (!sums.defined()) sums = torch::zeros({B, o.summary_tokens(), C}, x.options());
    const auto projected = linear(summary_pool->norm(x), summary_pool->proj);  // (B, n, C)
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      const auto from = std::max(chunks[c].start, first), to = std::min(chunks[c].end - 1, last);
      if (from > to) continue;
      sums.select(1, static_cast<std::int64_t>(c)).add_(projected.narrow(1, from - first, to - from + 1).sum(1));
      if (chunks[c].end - 1 > last) continue;
      const auto summary = (sums.select(1, static_cast<std::int64_t>(c)) /
                            static_cast<double>(chunks[c].end - chunks[c].start)).unsqueeze(1);  // (B, 1, C)
      const auto at = torch::full({1}, chunks[c].end - 1, positions.options());
      for (std::int64_t later = i + 1; later < L; ++later) {
        const auto [k, v] = memory_kv(layers[static_cast<std::size_t>(later)]->long_mem_attn, summary);
        cache(later, 2).append(k, v, at);
      }
    }
  }
  state.advance(n);
  return vocab_logits(final_norm(x), options_.tie_weights() ? tok_emb->weight : lm_head->weight);
}

std::string DrrTransformer::describe() const {
  const auto o = overhead();
  std::ostringstream out;
  out << LanguageModel::describe() << ", " << (drr_options_.memory() == DrrMemory::Causal ? "causal" : "seed (non-causal)")
      << " memory, W " << drr_options_.short_window() << ", S " << drr_options_.summary_tokens() << ", block "
      << drr_options_.block_size() << std::fixed << std::setprecision(1) << "; vs plain PreNorm: +"
      << 100 * o.param_overhead() << "% parameters (layers +" << 100 * o.stack_param_overhead() << "%), +"
      << 100 * o.flops_overhead() << "% forward FLOPs at T=" << o.seq << " (layers +" << 100 * o.stack_flops_overhead()
      << "%)";
  return out.str();
}

void load_seed_parameters(DrrTransformer& model, const std::map<std::string, torch::Tensor>& seed_state) {
  // Seed name -> RouteLab name, for the parts that are not spelled the same.
  const auto translate = [](const std::string& name) -> std::string {
    if (name == "embed.weight") return "tok_emb.weight";
    if (name == "pos_embed.weight") return "pos_emb.weight";
    if (name.rfind("layers.", 0) != 0) return name;  // summary_pool.*, final_norm.*
    const auto dot = name.find('.', 7);
    const auto layer = name.substr(7, dot - 7), rest = name.substr(dot + 1);
    static const std::vector<std::pair<std::string, std::string>> renames = {
        {"router.0.", "router_norm."},           {"router.1.", "router_hidden."},
        {"router.3.", "router_out."},            {"self_attn.in_proj_weight", "attn.qkv.weight"},
        {"self_attn.in_proj_bias", "attn.qkv.bias"}, {"self_attn.out_proj.", "attn.proj."},
        {"mlp.0.", "mlp_up."},                   {"mlp.3.", "mlp_down."},
    };
    for (const auto& [from, to] : renames)
      if (rest.rfind(from, 0) == 0) return "blocks." + layer + "." + to + rest.substr(from.size());
    return "blocks." + layer + "." + rest;
  };
  torch::NoGradGuard no_grad;
  auto params = model.named_parameters();
  std::set<std::string> loaded;
  for (const auto& [seed_name, value] : seed_state) {
    const auto name = translate(seed_name);
    auto* target = params.find(name);
    if (!target) throw ConfigError("seed parameter '" + seed_name + "' has no counterpart ('" + name + "') in the DRR model");
    if (target->sizes() != value.sizes())
      throw ConfigError("seed parameter '" + seed_name + "': shape " + c10::str(value.sizes()) + " differs from " +
                        name + " " + c10::str(target->sizes()));
    target->copy_(value);
    loaded.insert(name);
  }
  for (const auto& item : params)
    if (!loaded.count(item.key()) && item.key() != "lm_head.weight")
      throw ConfigError("DRR parameter '" + item.key() + "' is missing from the reference state");
}

namespace {

void check_drr_options(const nlohmann::json& m, const std::string& path) {
  const auto n_embd = m.at("n_embd").get<std::int64_t>(), n_head = m.at("n_head").get<std::int64_t>();
  if (n_embd % n_head != 0)
    throw ConfigError(path + ".n_head: " + std::to_string(n_head) + " does not divide n_embd " + std::to_string(n_embd));
  if (m.at("memory") == "seed")
    throw ConfigError(path + ".memory: 'seed' lets a position read later positions (the paper's memory attention "
                             "and pooled summaries see the whole sequence, its block attention is bidirectional); a "
                             "language model needs 'causal'");
}

/// The FLOPs of the eval-mode forward (ArchitectureEntry::price_flops).
FlopsEstimate price_drr(const FlopsInput& in) {
  const auto t = drr_transformer_options_from_json(in.model, static_cast<std::int64_t>(in.vocab), in.query.seq);
  const auto s = layer_shape(t);
  const auto o = drr_options_table().read(in.model);
  FlopsBuilder b(in, s, in.vocab);
  const double d = static_cast<double>(s.d), h = d * static_cast<double>(o.router_hidden_mult());
  const bool causal = o.memory() == DrrMemory::Causal;
  const auto summary = static_cast<double>(drr_summary_tokens(o, in.query.seq, t.max_seq_len()));
  for (int i = 0; i < t.n_layer(); ++i) {
    auto& l = b.add(i, "drr", true, 1.0, s);
    const double window = static_cast<double>(std::min<std::int64_t>(o.short_window(), i));
    const double blocks = static_cast<double>(i / o.block_size());
    const bool pools = (i + 1) % o.block_size() == 0 && summary > 0;
    FlopsBuilder::part(l, "router", linear_flops(b.N, d, h) + linear_flops(b.N, h, 3.0));
    FlopsBuilder::part(l, "memory_short", depth_memory_attention_flops(b.B, b.T, window * b.T, s.d));
    FlopsBuilder::part(l, "memory_long", depth_memory_attention_flops(b.B, b.T, blocks * summary, s.d));
    FlopsBuilder::part(l, "attn_qkv", qkv_flops(b.N, s));
    FlopsBuilder::part(l, "attn_core", attention_core_flops(b.B * b.T * b.T, s));
    FlopsBuilder::part(l, "attn_out", out_proj_flops(b.N, s));
    FlopsBuilder::part(l, "mlp", mlp_flops(b.N, s));
    if (pools) {
      // Projection, then (causal form) the chunk average as a (S', T) x (T, C) product per sequence.
      FlopsBuilder::part(l, "summary_pool", linear_flops(b.N, d, d) + (causal ? linear_flops(b.B * summary, b.T, d) : 0.0));
    }
  }
  b.est.notes.push_back("every token computes all three paths (identity, short- and long-term memory): no FLOPs "
                        "depend on the gates; fractions are ignored");
  if (causal)
    b.est.notes.push_back("the causal summary pool averages through a matrix product (2 S' T d per sequence)");
  return b.est;
}

}  // namespace

ArchitectureEntry drr_architecture() {
  ArchitectureEntry entry{
      "drr",
      "Depth Routing Residuals",
      "DRR (the paper and its PyTorch code)",
      "Before each PreNorm block a token-wise router mixes the identity, attention over the last W layer outputs and "
      "attention over summary tokens pooled every block_size layers; causal memory for language modelling.",
      schema_of(drr_transformer_options_table(), drr_options_table()),
      check_drr_options,
      [](const nlohmann::json& m, const ModelContext& ctx) -> std::shared_ptr<LanguageModel> {
        check_drr_options(m, "model");
        return std::make_shared<DrrTransformer>(drr_transformer_options_from_json(m, ctx.vocab_size, ctx.context),
                                                drr_options_table().read(m));
      },
  };
  // Every layer caches every token, plus the depth-memory entries it attends (short- and long-term, per sequence).
  entry.kv_entries = [](const LayerRouting& layer, double seq) {
    const auto entries = [&](const char* key) {
      const auto it = layer.stats.find(key);
      return it != layer.stats.end() && std::isfinite(it->second) ? it->second : 0.0;
    };
    return seq + entries("short_entries") + entries("long_entries");
  };
  entry.read_back_options = [](const nlohmann::json& m) {
    return read_back(m, drr_transformer_options_table(), drr_options_table());
  };
  entry.overhead = [](const nlohmann::json& m, std::int64_t vocab, std::int64_t context) {
    return drr_overhead(drr_transformer_options_from_json(m, vocab, context), drr_options_table().read(m), context);
  };
  entry.price_flops = price_drr;
  // Every token computes all three paths (the gates only mix them): fixed shapes, the mean gates left on the device
  // (LayerTrace::on_device, ModelOutput::stats_on_device), so the step can be captured and replayed.
  entry.cuda_graph_step = true;
  entry.cuda_graph_forward = true;
  entry.routed_fraction_meaning =
      "no FLOPs depend on the gates: fractions are ignored";
  entry.color = 6;
  return entry;
}

}  // namespace routelab
