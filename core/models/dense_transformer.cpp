// Dense Transformer baseline and the trunk (embeddings, final norm, head, init) routed architectures share.
#include "core/models/dense_transformer.h"

#include <cmath>
#include <tuple>
#include <utility>

#include "core/inference/kv_cache.h"
#include "core/models/blocks/part_scope.h"
#include "core/models/blocks/residual_probe.h"
#include "core/util/errors.h"

namespace routelab {

std::int64_t TransformerOptions::ff_dim() const {
  if (d_ff_ > 0) return d_ff_;
  if (style_ == ModelStyle::GPT2) return 4 * n_embd_;
  const std::int64_t raw = (8 * n_embd_ + 2) / 3;
  return (raw + 63) / 64 * 64;
}

const OptionTable<TransformerOptions>& transformer_options_table() {
  using T = OptionType;
  static const auto table = [] {
    OptionTable<TransformerOptions> t;
    t.choice(ROUTELAB_OPTION(style), {"llama", "gpt2"},
             "llama: RMSNorm, RoPE, SwiGLU, no biases (DTRNet); gpt2: LayerNorm, learned positions, GELU, biases "
             "(TSA)")
        .value(ROUTELAB_OPTION(n_layer), T::Int, "number of Transformer blocks", 1, 256)
        .value(ROUTELAB_OPTION(n_embd), T::Int, "model width d", 8, 16384)
        .value(ROUTELAB_OPTION(n_head), T::Int, "query heads (must divide n_embd)", 1, 256)
        .weight_layout()
        .value(ROUTELAB_OPTION(n_kv_head), T::Int,
               "key/value heads for grouped-query attention (0: n_head; must divide n_head)", 0, 256)
        .value(ROUTELAB_OPTION(d_ff), T::Int, "MLP inner width (0: llama 8/3 d rounded up to 64, gpt2 4 d)", 0, 1 << 20)
        // The struct holds the resolved length; a section's 0 means the data's context.
        .resolved(ROUTELAB_OPTION(max_seq_len), T::Int, 0, "longest sequence the model accepts (0: data.context)", 0,
                  1 << 22)
        .value(ROUTELAB_OPTION(tie_weights), T::Bool, "share the token embedding with the output head")
        .value(ROUTELAB_OPTION(rope_theta), T::Float, "RoPE base (llama style)", 1, 1e9)
        .read_when("style", {"llama"})
        .choice(ROUTELAB_OPTION(rope_scaling), {"none", "linear", "yarn"},
                "RoPE context extension for evaluation beyond the training length: linear position interpolation "
                "or YaRN (llama style)")
        .read_when("style", {"llama"})
        .inference()
        .value(ROUTELAB_OPTION(rope_factor), T::Float, "context-extension factor s of rope_scaling", 1, 1024)
        .read_when("style", {"llama"})
        .read_when("rope_scaling", {"linear", "yarn"})
        .inference()
        .value(ROUTELAB_OPTION(rope_original_context), T::Int,
               "training context YaRN's ramp refers to (0: max_seq_len)", 0, 1 << 22)
        .read_when("style", {"llama"})
        .read_when("rope_scaling", {"yarn"})
        .inference()
        .value(ROUTELAB_OPTION(norm_eps), T::Float, "normalisation epsilon", 1e-12, 1)
        .value(ROUTELAB_OPTION(dropout), T::Float,
               "dropout on attention probabilities and residual updates in training", 0, 0.9)
        .training_only()
        .choice(ROUTELAB_OPTION(init), {"gpt3", "normal"},
                "gpt3: N(0,0.02) with residual projections N(0,0.02/sqrt(2L)) (TSA App. A); normal: N(0,0.02) "
                "everywhere")
        .training_only();
    return t;
  }();
  return table;
}

OptionSchema transformer_option_schema() { return transformer_options_table().schema(); }

void check_transformer_options(const nlohmann::json& m, const std::string& path) {
  const auto n_embd = m.at("n_embd").get<std::int64_t>(), n_head = m.at("n_head").get<std::int64_t>();
  const auto n_kv = m.at("n_kv_head").get<std::int64_t>();
  if (n_embd % n_head != 0)
    throw ConfigError(path + ".n_head: " + std::to_string(n_head) + " does not divide n_embd " + std::to_string(n_embd));
  if ((n_embd / n_head) % 2 != 0 && m.at("style") == "llama")
    throw ConfigError(path + ".n_head: head dim " + std::to_string(n_embd / n_head) + " must be even for RoPE");
  if (n_kv > 0 && n_head % n_kv != 0)
    throw ConfigError(path + ".n_kv_head: " + std::to_string(n_kv) + " does not divide n_head " + std::to_string(n_head));
}

TransformerOptions transformer_options_from_json(const nlohmann::json& m, std::int64_t vocab_size,
                                                 std::int64_t context) {
  auto o = transformer_options_table().read(m);
  o.vocab_size(vocab_size);
  if (o.max_seq_len() <= 0) o.max_seq_len(context);
  if (o.rope_original_context() <= 0) o.rope_original_context(o.max_seq_len());
  return o;
}

LayerShape layer_shape(const TransformerOptions& o) {
  LayerShape s;
  s.d = o.n_embd();
  s.d_kv = (o.n_kv_head() > 0 ? o.n_kv_head() : o.n_head()) * (o.n_embd() / o.n_head());
  s.d_ff = o.ff_dim();
  s.gated_mlp = o.style() == ModelStyle::Llama;
  return s;
}

LayerTrace dense_layer_trace(int layer, std::int64_t batch, std::int64_t seq, const LayerShape& shape) {
  LayerTrace t;
  t.layer = layer;
  t.tokens_processed = {{"attn", batch * seq}, {"mlp", batch * seq}};
  t.flops = t.dense_flops = dense_layer_flops(static_cast<double>(batch), static_cast<double>(seq), shape);
  return t;
}

namespace {

NormOptions norm_options(const TransformerOptions& o) {
  return NormOptions(o.n_embd())
      .kind(o.style() == ModelStyle::GPT2 ? NormKind::Layer : NormKind::RMS)
      .eps(o.norm_eps())
      .bias(o.bias());
}

}  // namespace

DenseBlockImpl::DenseBlockImpl(const TransformerOptions& o, std::int64_t layer) : layer_index(static_cast<int>(layer)) {
  norm1 = register_module("norm1", Norm(norm_options(o)));
  norm2 = register_module("norm2", Norm(norm_options(o)));
  attn = register_module("attn", CausalSelfAttention(AttentionOptions(o.n_embd(), o.n_head())
                                                          .n_kv_head(o.n_kv_head())
                                                          .bias(o.bias())
                                                          .rope(o.style() == ModelStyle::Llama)
                                                          .max_positions(o.max_seq_len())
                                                          .rope_theta(o.rope_theta())
                                                          .rope_scaling(o.rope_scaling())
                                                          .rope_factor(o.rope_factor())
                                                          .rope_original_context(o.rope_original_context())
                                                          .dropout(o.dropout())));
  mlp = register_module("mlp", Mlp(MlpOptions(o.n_embd(), o.ff_dim())
                                       .kind(o.style() == ModelStyle::GPT2 ? MlpKind::GELU : MlpKind::SwiGLU)
                                       .bias(o.bias())
                                       .dropout(o.dropout())));
}

torch::Tensor DenseBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& positions) {
  const auto d = forward_deferred(x, {}, positions);
  return d.h + d.m;
}

DenseBlockImpl::Deferred DenseBlockImpl::forward_deferred(const torch::Tensor& x, const torch::Tensor& pending,
                                                          const torch::Tensor& positions,
                                                          const torch::Tensor& pending_gate) {
  Deferred d;
  torch::Tensor n1;
  std::tie(d.input, n1) = norm1->add_into_matmul(x, pending, pending_gate);
  const auto a = attn(n1, positions);  // (B, T, C)
  torch::Tensor n2;
  std::tie(d.h, n2) = norm2->add_into_matmul(d.input, a);  // h = input + a and its norm, in one pass on a GPU
  d.m = mlp(n2);
  if (residual_probe_active()) {
    record_residual(layer_index, "attn", d.input, a);
    record_residual(layer_index, "mlp", d.h, d.m);
  }
  return d;
}

torch::Tensor DenseBlockImpl::update(const torch::Tensor& x, const torch::Tensor& positions, const Compaction* rows,
                                     double* pairs) {
  const auto a = attn(norm1->into_matmul(x), positions, rows ? rows->lengths : std::vector<std::int64_t>{},
                      pairs);                                // (B, T, C)
  const auto [h, n2] = norm2->add_into_matmul(x, a);
  const auto m = mlp(n2);
  if (residual_probe_active()) {
    if (rows) {
      record_residual(layer_index, "attn", x, a, *rows);
      record_residual(layer_index, "mlp", h, m, *rows);
    } else {
      record_residual(layer_index, "attn", x, a);
      record_residual(layer_index, "mlp", h, m);
    }
  }
  return a + m;
}

torch::Tensor DenseBlockImpl::update_packed(const torch::Tensor& x, const torch::Tensor& positions,
                                            const Compaction& rows) {
  const auto a = attn->forward_packed(norm1->into_matmul(x), positions, rows.starts, rows.longest);  // (N, C)
  return a + mlp(norm2->add_into_matmul(x, a).second);
}

torch::Tensor DenseBlockImpl::decode_update(const torch::Tensor& x, const torch::Tensor& positions, KVCache& cache,
                                            const torch::Tensor& keep, const torch::Tensor& hidden) {
  const auto a = attn->forward_cached(norm1(x), positions, cache, keep, hidden);  // (B, n, C)
  return a + mlp(norm2(x + a));
}

torch::Tensor DenseBlockImpl::decode_update_rows(const torch::Tensor& x, const torch::Tensor& positions,
                                                KVCache& cache, const torch::Tensor& run, bool store_skipped) {
  if (x.size(1) == 1 && !store_skipped) return decode_update(x, positions, cache, run);
  const auto c = compact(run);  // (B, K) rows of each sequence that run the block, in causal order
  const auto rows_position = compacted_positions(positions, c);  // (B, K)
  const auto rows = gather_rows(x, c);                           // (B, K, C)
  torch::Tensor a;                                               // (B, K, C); padding rows are dropped below
  if (store_skipped) {
    const auto [q_all, k, v] = attn->project(norm1(x), positions);  // every row's keys and values are stored
    cache.append(k, v, positions, {}, 0, run.logical_not());
    if (c.total == 0) return torch::zeros_like(x);
    const auto H = q_all.size(1), hd = q_all.size(3);
    const auto q = q_all.gather(2, c.index.view({c.index.size(0), 1, c.max_len, 1}).expand({-1, H, -1, hd}));
    a = attn->output(cache.attend(q, rows_position));
  } else {
    if (c.total == 0) return torch::zeros_like(x);
    a = attn->forward_cached(norm1(rows), rows_position, cache, c.valid);  // compaction padding is not stored
  }
  const auto f = a + mlp(norm2(rows + a));
  return scatter_rows(torch::zeros_like(x), c, f);
}

TransformerTrunk::TransformerTrunk(TransformerOptions options) : options_(std::move(options)) {
  tok_emb = register_module("tok_emb", torch::nn::Embedding(options_.vocab_size(), options_.n_embd()));
  if (options_.style() == ModelStyle::GPT2)
    pos_emb = register_module("pos_emb", torch::nn::Embedding(options_.max_seq_len(), options_.n_embd()));
  final_norm = register_module("final_norm", Norm(norm_options(options_)));
  if (!options_.tie_weights())
    lm_head = register_module("lm_head", torch::nn::Linear(
                                             torch::nn::LinearOptions(options_.n_embd(), options_.vocab_size()).bias(false)));
}

torch::Tensor TransformerTrunk::embed(const torch::Tensor& tokens, torch::Tensor& positions) {
  ROUTELAB_PART("embedding");
  const auto T = tokens.size(1);
  if (T > options_.max_seq_len())
    throw ConfigError("sequence of " + std::to_string(T) + " tokens exceeds model.max_seq_len " +
                      std::to_string(options_.max_seq_len()));
  positions = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));  // (T)
  auto x = tok_emb(tokens);                                                                         // (B, T, C)
  if (pos_emb) x = x + pos_emb(positions);
  if (is_training() && options_.dropout() > 0) x = torch::dropout(x, options_.dropout(), true);
  return x;
}

std::unique_ptr<DecodeState> TransformerTrunk::new_decode_state(std::int64_t batch, bool layer_caches) const {
  auto state = std::make_unique<DecodeState>(arch_id(), batch, options_.max_seq_len());
  const auto hd = options_.n_embd() / options_.n_head();
  const auto kv = options_.n_kv_head() > 0 ? options_.n_kv_head() : options_.n_head();
  if (layer_caches)
    for (std::int64_t i = 0; i < options_.n_layer(); ++i) state->add_cache(KVCache("layer", static_cast<int>(i), batch, kv, hd));
  return state;
}

torch::Tensor TransformerTrunk::embed_decode(const torch::Tensor& tokens, const DecodeState& state,
                                             torch::Tensor& positions) {
  if (tokens.dim() != 2 || tokens.size(0) != state.batch())
    throw ConfigError("decode: expected tokens (" + std::to_string(state.batch()) + ", n), got " +
                      c10::str(tokens.sizes()));
  const auto n = tokens.size(1);
  state.check_room(n);
  positions = torch::arange(state.length(), state.length() + n,
                            torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));  // (n)
  auto x = tok_emb(tokens);  // (B, n, C)
  if (pos_emb) x = x + pos_emb(positions);
  return x;
}

torch::Tensor padded_vocab_logits(const torch::Tensor& h, const torch::Tensor& weight, std::int64_t align) {
  const auto V = weight.size(0);
  if (V % align == 0) return at::linear(h, weight);
  const auto padded = torch::constant_pad_nd(weight, {0, 0, 0, align - V % align});  // zero rows after row V-1
  return at::linear(h, padded).narrow(-1, 0, V);
}

torch::Tensor vocab_logits(const torch::Tensor& h, const torch::Tensor& weight) {
  ROUTELAB_PART("head");
  constexpr std::int64_t kAlign = 64, kMinRows = 128;
  if (!h.is_cuda() || h.numel() < kMinRows * h.size(-1)) return at::linear(h, weight);
  return padded_vocab_logits(h, weight, kAlign);
}

torch::Tensor TransformerTrunk::head(const torch::Tensor& x) {
  const auto h = final_norm->into_matmul(x);
  return vocab_logits(h, options_.tie_weights() ? tok_emb->weight : lm_head->weight);  // (B, T, V)
}

torch::Tensor TransformerTrunk::head(const torch::Tensor& x, const torch::Tensor& pending, torch::Tensor& stream,
                                     const torch::Tensor& pending_gate) {
  torch::Tensor h;
  std::tie(stream, h) = final_norm->add_into_matmul(x, pending, pending_gate);
  return vocab_logits(h, options_.tie_weights() ? tok_emb->weight : lm_head->weight);
}

void TransformerTrunk::init_weights(const std::vector<std::string>& residual_suffixes) {
  torch::NoGradGuard no_grad;
  const double std_base = 0.02;
  const double std_residual = options_.init() == "gpt3" ? std_base / std::sqrt(2.0 * options_.n_layer()) : std_base;
  for (auto& item : named_parameters()) {
    const auto& name = item.key();
    auto& p = item.value();
    const bool is_norm = name.find("norm") != std::string::npos;
    if (is_norm) continue;  // norms keep ones/zeros
    if (p.dim() < 2) {
      p.zero_();  // biases
      continue;
    }
    bool residual = false;
    for (const auto& suffix : residual_suffixes)
      residual = residual || (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0);
    p.normal_(0.0, residual ? std_residual : std_base);
  }
}

DenseTransformer::DenseTransformer(TransformerOptions options) : TransformerTrunk(std::move(options)) {
  auto list = register_module("blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < options_.n_layer(); ++i) {
    blocks.push_back(DenseBlock(options_, i));
    list->push_back(blocks.back());
  }
  init_weights();
}

std::unique_ptr<DecodeState> DenseTransformer::begin_decode(std::int64_t batch) { return new_decode_state(batch); }

torch::Tensor DenseTransformer::decode(DecodeState& state, const torch::Tensor& tokens, DecodeTrace* trace) {
  torch::NoGradGuard no_grad;
  torch::Tensor positions;
  auto x = embed_decode(tokens, state, positions);  // (B, n, C)
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    x = x + blocks[i]->decode_update(x, positions, state.cache(i));
    if (trace) trace->layers.push_back(dense_layer_trace(static_cast<int>(i), tokens.size(0), tokens.size(1), layer_shape(options_)));
  }
  state.advance(tokens.size(1));
  return head(x);
}

ModelOutput DenseTransformer::forward(const torch::Tensor& tokens, bool trace) {
  torch::Tensor positions;
  auto x = embed(tokens, positions);  // (B, T, C)
  ModelOutput out;
  // Each block's output x + pending is added by the next norm's pass (forward_deferred), so a layer's state is
  // recorded once the next block (or the head) has formed it.
  torch::Tensor pending;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    auto d = blocks[i]->forward_deferred(x, pending, positions);
    if (i > 0) record_layer_state(d.input);
    x = std::move(d.h);
    pending = std::move(d.m);
    if (trace) out.trace.push_back(dense_layer_trace(static_cast<int>(i), tokens.size(0), tokens.size(1), layer_shape(options_)));
  }
  torch::Tensor last;
  out.logits = head(x, pending, last);
  if (!blocks.empty()) record_layer_state(last);
  out.aux_loss = torch::zeros({}, out.logits.options().dtype(torch::kFloat));
  return out;
}

TransformerOptions flops_trunk(const FlopsInput& in) {
  return transformer_options_from_json(in.model, static_cast<std::int64_t>(in.vocab), in.query.seq);
}

namespace {

/// The FLOPs of the eval-mode forward (ArchitectureEntry::price_flops): every layer dense.
FlopsEstimate price_dense(const FlopsInput& in) {
  const auto t = flops_trunk(in);
  const auto s = layer_shape(t);
  FlopsBuilder b(in, s, in.vocab);
  for (int i = 0; i < t.n_layer(); ++i) b.dense(i, s);
  return b.est;
}

}  // namespace

ArchitectureEntry dense_architecture() {
  ArchitectureEntry entry{
      "dense",
      "Dense Transformer",
      "baseline of DTRNet (SmolLM/Llama style) and TSA (GPT-2 style)",
      "Decoder-only pre-norm Transformer: every token runs every attention and MLP sub-layer.",
      transformer_option_schema(),
      check_transformer_options,
      [](const nlohmann::json& m, const ModelContext& ctx) -> std::shared_ptr<LanguageModel> {
        return std::make_shared<DenseTransformer>(transformer_options_from_json(m, ctx.vocab_size, ctx.context));
      },
  };
  entry.read_back_options = [](const nlohmann::json& m) { return read_back(m, transformer_options_table()); };
  entry.price_flops = price_dense;
  entry.routed_fraction_meaning = "no routing: fractions are ignored";
  entry.color = 7;  // black: the baseline every figure compares with
  entry.cuda_graph_step = true;
  entry.cuda_graph_forward = true;
  return entry;
}

}  // namespace routelab
