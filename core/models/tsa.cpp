// Token-Selective Attention: routers, the soft and sparse gated block updates, TLOps (α, Δ), the depth
// regulariser, traces and the registry entry.
#include "core/models/tsa.h"

#include <algorithm>
#include <sstream>
#include <tuple>

#include "core/inference/kv_cache.h"
#include "core/models/blocks/attention.h"
#include "core/models/blocks/residual_probe.h"
#include "core/models/blocks/routing.h"
#include "core/util/errors.h"
#include "core/util/logging.h"

namespace routelab {
namespace {

/// FLOPs of one router over `tokens` rows: d -> hidden -> 1.
double router_flops(double tokens, std::int64_t d) {
  const auto hidden = static_cast<double>(tsa_router_hidden(d));
  return linear_flops(tokens, static_cast<double>(d), hidden) + linear_flops(tokens, hidden, 1.0);
}

}  // namespace

std::int64_t tsa_router_hidden(std::int64_t n_embd) { return std::max<std::int64_t>(n_embd / 4, 16); }

Tlops tlops_from_active(const std::vector<double>& active) {
  Tlops t;
  if (active.empty()) return t;
  double sum = 0;
  for (const double a : active) sum += a;
  const double routed = static_cast<double>(active.size());  // L - 1
  t.alpha = sum / routed;
  t.saved = tlops_saved(t.alpha, routed);
  return t;
}

TsaRouterImpl::TsaRouterImpl(std::int64_t n_embd) {
  const auto hidden = tsa_router_hidden(n_embd);
  fc1 = register_module("fc1", torch::nn::Linear(torch::nn::LinearOptions(n_embd, hidden).bias(true)));
  fc2 = register_module("fc2", torch::nn::Linear(torch::nn::LinearOptions(hidden, 1).bias(true)));
}

torch::Tensor TsaRouterImpl::logits(const torch::Tensor& h) {
  const Fp32Router fp32;
  return linear(torch::relu(linear(h.to(torch::kFloat), fc1)), fc2).squeeze(-1);  // (B, T)
}

TokenSelectiveAttention::TokenSelectiveAttention(TransformerOptions transformer, TsaOptions options)
    : TransformerTrunk(std::move(transformer)), tsa_options_(std::move(options)) {
  if (options_.n_layer() < 2)
    throw ConfigError("model.n_layer: TSA needs at least 2 layers (the stem and one routed block), got " +
                      std::to_string(options_.n_layer()));
  auto block_list = register_module("blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < options_.n_layer(); ++i) {
    blocks.push_back(DenseBlock(options_, i));
    block_list->push_back(blocks.back());
  }
  auto router_list = register_module("routers", torch::nn::ModuleList());
  for (std::int64_t l = 0; l + 1 < options_.n_layer(); ++l) {
    routers.push_back(TsaRouter(options_.n_embd()));
    router_list->push_back(routers.back());
  }
  sized_ffn.resize(routers.size());
  // App. A: GPT-3 init of the trunk. The paper names only the routers' final bias; their weight matrices get
  // the trunk's N(0, 0.02) (not residual projections, so no 1/sqrt(2L) scale) and fc1's bias zero.
  init_weights();
  torch::NoGradGuard no_grad;
  for (auto& r : routers) r->fc2->bias.fill_(kRouterBiasInit);
}

TokenSelectiveAttention::Gated TokenSelectiveAttention::gated_block(std::size_t index, const torch::Tensor& x,
                                                                    const torch::Tensor& n1,
                                                                    const torch::Tensor& positions,
                                                                    const torch::Tensor& p, bool sparse,
                                                                    LayerTrace* trace) {
  ROUTELAB_PART("router");  // the gates and their application (the block's attention, norms and MLP nest inside)
  auto& block = blocks[index];
  const auto B = x.size(0), T = x.size(1), C = x.size(2);
  const auto active = p.le(kHaltThreshold);  // (B, T) bool: the token runs block `index` in sparse mode
  // Soft (eqs. 3-4): w = 1 - p. Sparse (§3.6): w = 1[p <= 0.5] (1 - p), so halted tokens get no update and a
  // binary gate (p in {0, 1}) gives exactly the soft update. The paper only says the attention update is
  // "gated by the same binary mask"; keeping the (1 - p) factor on the kept tokens is what makes sparse mode
  // the same function as the trained soft model wherever the router is decided.
  auto w = 1.0 - p;  // (B, T) float
  if (sparse) w = w * active.to(w.scalar_type());
  w = w.to(x.scalar_type()).contiguous();
  const auto w3 = w.unsqueeze(-1);  // (B, T, 1)

  // Attention is dense in both modes: every token's keys and values stay exact for the later queries.
  const auto a = block->attn(n1, positions);  // (B, T, C)
  // h = x + Δattn = x + w a (B, T, C); the dense mode takes its norm in the same pass (on a GPU, one fused kernel
  // that also scales the update)
  torch::Tensor h, n2;
  if (sparse)
    h = torch::addcmul(x, w3, a);
  else
    std::tie(h, n2) = block->norm2->add_into_matmul(x, a, w);

  Gated out;
  std::int64_t ffn_tokens = B * T;
  if (!sparse) {
    // Δffn = w mlp(norm(h)) on the updated h (eq. 4), added to h by the next norm's pass (or the final norm's).
    out = {h, block->mlp(n2), w};
    if (residual_probe_active()) {
      record_residual(block->layer_index, "attn", x, w3 * a);
      record_residual(block->layer_index, "mlp", h, w3 * out.m);
    }
  } else if (auto& sizing = sized_ffn[index - 1]; sized_ffn_rows_active(h) && sizing.capacity > 0 &&
                                                  sizing.tokens == B * T) {
    // FFN on a capacity of rows sized from earlier forwards, nothing read back: the active rows first, halted ones
    // (w = 0) filling the rest, their update masked to nothing; run() reads every block's count once.
    ROUTELAB_PART("routing");
    sizing.rows = sized_rows(sizing.capacity, B * T, h.device(), sizing.rows);
    const auto c = compact_sized(active, sizing.rows, /*with_runs=*/false);
    sizing.counts = c.counts;
    ffn_tokens = c.capacity;  // the rows run (priced so); the active count comes with the read
    const auto rows = gather_packed(h, c);  // (capacity, C)
    const auto update = w.reshape({-1}).index_select(0, c.real_flat).unsqueeze(-1) * block->mlp(block->norm2(rows));
    out.h = add_rows(h, c, update);
  } else {
    // FFN only on the active rows: gather them flat (the FFN is per token), run, scatter-add the update.
    ROUTELAB_PART("routing");
    const auto index = active.reshape({-1}).nonzero().squeeze(1);  // (N) flat positions, one host sync
    ffn_tokens = index.size(0);
    size_next_forward(ffn_tokens, B * T, B * T, sizing.capacity, sizing.tokens, sizing.below);
    const auto h_flat = h.reshape({B * T, C});
    torch::Tensor ffn_rows;  // (N, C)
    if (ffn_tokens > 0) {
      const auto rows = h_flat.index_select(0, index);  // (N, C)
      ffn_rows = (w.reshape({-1}).index_select(0, index).unsqueeze(-1) * block->mlp(block->norm2(rows)))
                     .to(h.scalar_type());
      out.h = h_flat.index_add(0, index, ffn_rows).view({B, T, C});
    } else {
      out.h = h;
    }
    if (residual_probe_active()) {
      // Halted tokens skipped both sub-blocks' updates: NaN ratios, as for any skipped sub-block.
      record_residual(block->layer_index, "attn", x, w3 * a, active);
      auto ffn_update = torch::zeros_like(h_flat);
      if (ffn_tokens > 0) ffn_update = ffn_update.index_copy(0, index, ffn_rows);
      record_residual(block->layer_index, "mlp", h, ffn_update.view({B, T, C}), active);
    }
  }

  if (trace) {
    const auto shape = layer_shape(options_);
    const double tokens = static_cast<double>(B * T);
    trace->kind = "tsa";
    trace->routed = true;
    trace->gate = (1.0 - p).detach().to(torch::kFloat);
    trace->decision = active;
    // The shares that depend on the data stay on the device until the model resolves its trace (one read a forward,
    // none in a step captured as a CUDA graph); sized FFN rows: settle_sized_ffn's read of their counts sets them.
    if (!sized_ffn[index - 1].counts.defined())
      trace->on_device["active_share"] = active.sum().to(torch::kDouble) / tokens;  // 1[p <= 0.5], whatever the mode
    if (sparse)
      trace->routed_fraction = static_cast<double>(ffn_tokens) / tokens;
    else
      trace->on_device["routed_fraction"] = trace->gate.mean();
    trace->tokens_processed = {{"attn", B * T}, {"mlp", ffn_tokens}, {"router", B * T}};
    // Sparse: dense attention (projections, scores over the full square as dense_layer_flops counts them,
    // output projection) for every token, the FFN on the active rows; both modes pay the router.
    trace->flops = qkv_flops(tokens, shape) + attention_core_flops(tokens * static_cast<double>(T), shape) +
                   out_proj_flops(tokens, shape) + mlp_flops(static_cast<double>(ffn_tokens), shape) +
                   router_flops(tokens, shape.d);
    trace->dense_flops = dense_layer_flops(static_cast<double>(B), static_cast<double>(T), shape);
  }
  return out;
}

ModelOutput TokenSelectiveAttention::run(const torch::Tensor& tokens, bool trace,
                                         std::vector<torch::Tensor>* logits_out) {
  torch::Tensor positions;
  auto x = embed(tokens, positions);  // (B, T, C)
  const auto B = tokens.size(0), T = tokens.size(1);
  const bool sparse = !is_training() && tsa_options_.inference() == TsaInference::Sparse;
  const auto routed = static_cast<double>(routers.size());  // L - 1
  ModelOutput out;

  // Each block's output h + w m is added by the next norm's pass (one fused kernel on a GPU), as the dense model
  // chains its blocks; the stem's w is 1.
  auto stem = blocks[0]->forward_deferred(x, {}, positions);  // the stem always runs (§2.1)
  Gated prev{stem.h, stem.m, {}};
  if (trace) out.trace.push_back(dense_layer_trace(0, B, T, layer_shape(options_)));
  std::vector<torch::Tensor> active_means;  // mean(1 - p_l), scalars
  for (auto& s : sized_ffn) s.counts = torch::Tensor();
  for (std::size_t l = 0; l < routers.size(); ++l) {
    const auto [h, n1] = blocks[l + 1]->norm1->add_into_matmul(prev.h, prev.m, prev.w);  // the stream after block l
    record_layer_state(h);
    const auto z = routers[l]->logits(h);  // (B, T): p_l = r_l(h) on the stream after block l
    if (logits_out) logits_out->push_back(z.detach());
    const auto p = torch::sigmoid(z);
    active_means.push_back((1.0 - p).mean());
    LayerTrace layer_trace;
    prev = gated_block(l + 1, h, n1, positions, p, sparse, trace ? &layer_trace : nullptr);
    if (trace) {
      layer_trace.layer = static_cast<int>(l + 1);
      out.trace.push_back(std::move(layer_trace));
    }
  }
  if (DeferredTraceReadback::active() && !trace) {  // an untraced forward captured as a CUDA graph: read afterwards
    std::vector<DeferredSizing> sized;
    for (auto& s : sized_ffn) {
      if (!s.counts.defined()) continue;
      DeferredSizing d;
      d.counts = s.counts;
      d.overflow = s.counts.sum().gt(s.rows.capacity);
      d.keep = {s.rows.bounds, s.rows.places};
      d.capacity = &s.capacity;
      d.settle = [&s, rows = s.rows.capacity, tokens = B * T](const std::vector<std::int64_t>& lengths) {
        return s.settle(lengths, rows, tokens) >= 0;
      };
      sized.push_back(std::move(d));
    }
    defer_settling(std::move(sized), out);
  } else if (!settle_sized_ffn(trace ? &out.trace : nullptr, B * T)) {
    // A block had more active tokens than its rows: the forward runs again with every count read exactly (and every
    // capacity sized afresh from them), so it cannot overflow twice. This attempt's activations go first.
    x = positions = torch::Tensor();
    stem = {};
    prev = {};
    active_means.clear();
    out = ModelOutput();
    if (logits_out) logits_out->clear();
    const ExactRoutedCounts exact;
    return run(tokens, trace, logits_out);
  }
  torch::Tensor last;
  out.logits = head(prev.h, prev.m, last, prev.w);
  record_layer_state(last);
  // Eq. 5: λ (1/(L-1)) Σ_l mean(1 - p_l) = λ α, the mean running over batch and positions.
  const auto alpha = torch::stack(active_means).mean();
  out.aux_loss = tsa_options_.depth_coeff() * alpha;

  if (trace) {
    // On the device, read back with the trace (eqs. 6 and 7 are affine in the layers' shares).
    std::vector<torch::Tensor> hard;  // the share of tokens with p <= 0.5 per block (what sparse mode runs)
    for (std::size_t l = 0; l < active_means.size(); ++l) {
      // The layer's share of eq. 5 before λ, so that λ Σ_layers aux = aux_loss.
      out.trace[l + 1].on_device["aux_loss"] = active_means[l].detach() / routed;
      hard.push_back(out.trace[l + 1].decision.sum().to(torch::kDouble) / static_cast<double>(B * T));
    }
    const auto soft_alpha = alpha.detach().to(torch::kDouble), hard_alpha = torch::stack(hard).mean();
    out.stats_on_device["alpha"] = soft_alpha;  // eq. 6 on the soft gates, in every mode
    out.stats_on_device["tlops_saved"] = tlops_saved(soft_alpha, routed);
    out.stats_on_device["alpha_hard"] = hard_alpha;
    out.stats_on_device["tlops_saved_hard"] = tlops_saved(hard_alpha, routed);
    resolve_on_device(out);
  }
  return out;
}

bool TokenSelectiveAttention::settle_sized_ffn(std::vector<LayerTrace>* trace, std::int64_t tokens) {
  std::vector<torch::Tensor> counts;
  for (const auto& s : sized_ffn) counts.push_back(s.counts);
  for (const auto& [l, lengths] : read_sized_counts(counts)) {
    auto& s = sized_ffn[l];
    const auto active = s.settle(lengths, s.rows.capacity, tokens);
    if (active < 0) {
      logger("core")->debug("TSA block {} had more active tokens than its {} FFN rows: the forward runs again", l + 1,
                            s.rows.capacity);
      return false;
    }
    if (trace) {
      auto& t = trace->at(l + 1);  // after the stem's
      t.routed_fraction = t.stats["active_share"] = static_cast<double>(active) / static_cast<double>(tokens);
      t.tokens_processed["mlp"] = active;
    }
  }
  return true;
}

std::int64_t TokenSelectiveAttention::SizedFfn::settle(const std::vector<std::int64_t>& lengths, std::int64_t rows,
                                                       std::int64_t batch_tokens) {
  if (sized_overflow(lengths, rows)) return -1;
  std::int64_t active = 0;
  for (const auto n : lengths) active += n;
  size_next_forward(active, batch_tokens, batch_tokens, capacity, tokens, below);
  return active;
}

ModelOutput TokenSelectiveAttention::forward(const torch::Tensor& tokens, bool trace) {
  return run(tokens, trace, nullptr);
}

std::unique_ptr<DecodeState> TokenSelectiveAttention::begin_decode(std::int64_t batch) {
  return new_decode_state(batch);
}

torch::Tensor TokenSelectiveAttention::decode(DecodeState& state, const torch::Tensor& tokens, DecodeTrace* trace) {
  torch::NoGradGuard no_grad;
  torch::Tensor positions;
  auto x = embed_decode(tokens, state, positions);  // (B, n, C)
  const auto B = tokens.size(0), n = tokens.size(1);
  const bool sparse = tsa_options_.inference() == TsaInference::Sparse;
  x = x + blocks[0]->decode_update(x, positions, state.cache(0));  // the stem
  if (trace) trace->layers.push_back(dense_layer_trace(0, B, n, layer_shape(options_)));
  for (std::size_t l = 0; l < routers.size(); ++l) {
    auto& block = blocks[l + 1];
    const auto p = torch::sigmoid(routers[l]->logits(x));  // (B, n)
    const auto active = p.le(kHaltThreshold);
    auto w = 1.0 - p;
    if (sparse) w = w * active.to(w.scalar_type());
    const auto w3 = w.unsqueeze(-1);
    const auto a = block->attn->forward_cached(block->norm1(x), positions, state.cache(l + 1));  // every token cached
    const auto h = x + w3 * a;
    std::int64_t ffn_tokens = B * n;
    if (!sparse) {
      x = h + w3 * block->mlp(block->norm2(h));
    } else {
      ffn_tokens = active.sum().item<std::int64_t>();
      x = ffn_tokens == 0 ? h : h + torch::where(active.unsqueeze(-1), w3 * block->mlp(block->norm2(h)), torch::zeros_like(h));
    }
    if (trace) {
      LayerTrace t;
      t.layer = static_cast<int>(l + 1);
      t.kind = "tsa";
      t.routed = true;
      t.gate = 1.0 - p;
      t.decision = active;
      t.routed_fraction = sparse ? static_cast<double>(ffn_tokens) / static_cast<double>(B * n) : t.gate.mean().item<double>();
      t.tokens_processed = {{"attn", B * n}, {"mlp", ffn_tokens}};
      trace->layers.push_back(std::move(t));
    }
  }
  state.advance(n);
  return head(x);
}

std::vector<torch::Tensor> TokenSelectiveAttention::router_logits(const torch::Tensor& tokens) {
  std::vector<torch::Tensor> logits;
  run(tokens, false, &logits);
  return logits;
}

std::string TokenSelectiveAttention::describe() const {
  std::ostringstream out;
  out << LanguageModel::describe() << ", depth_coeff " << tsa_options_.depth_coeff() << ", inference "
      << (tsa_options_.inference() == TsaInference::Sparse ? "sparse" : "soft");
  return out.str();
}

const OptionTable<TsaOptions>& tsa_options_table() {
  using T = OptionType;
  static const auto table = [] {
    OptionTable<TsaOptions> t;
    t.value(ROUTELAB_OPTION(depth_coeff), T::Float,
            "lambda of the depth regulariser lambda (1/(L-1)) sum_l mean(1 - p_l) (eq. 5; paper 0.001, swept 0 ... "
            "0.5 in §3.4)",
            0.0, 100.0)
        .training_only()
        .choice(ROUTELAB_OPTION(inference), {"soft", "sparse"},
                "eval-mode execution (no parameters; training is always soft): soft gates updates by (1 - p) as in "
                "training; sparse (§3.6) skips the FFN of tokens with p > 0.5 and gates the dense attention update "
                "by 1[p <= 0.5] (1 - p)")
        .inference();
    return t;
  }();
  return table;
}

namespace {

void check_tsa_options(const nlohmann::json& m, const std::string& path) {
  check_transformer_options(m, path);
  const auto n_layer = m.at("n_layer").get<std::int64_t>();
  if (n_layer < 2)
    throw ConfigError(path + ".n_layer: TSA needs at least 2 layers (the stem and one routed block), got " +
                      std::to_string(n_layer));
}

/// One calibration pass (ArchitectureEntry::force_routed_share), exact in one pass: each router's output bias set
/// so that `fraction` of the tokens stay active (p <= 0.5: they run the FFN in sparse inference), from the routers'
/// logits over `tokens`.
void force_tsa_share(LanguageModel& model, const torch::Tensor& tokens, double fraction) {
  torch::NoGradGuard no_grad;
  auto& tsa = dynamic_cast<TokenSelectiveAttention&>(model);
  const auto logits = tsa.router_logits(tokens);  // per router (B, T), bias included
  for (std::size_t l = 0; l < tsa.routers.size(); ++l) {
    auto bias = tsa.routers[l]->fc2->bias;  // (1)
    const auto z = logits[l].to(torch::kDouble) - bias.to(torch::kDouble).item<double>();  // before the bias
    // active iff z + b <= 0: the lowest k scores, i.e. the top k of -z
    bias.fill_(threshold_for_top(-z, share_count(fraction, z.numel())));  // -z > t  <=>  z + t < 0
  }
}

/// The FLOPs of the eval-mode forward (ArchitectureEntry::price_flops).
FlopsEstimate price_tsa(const FlopsInput& in) {
  const auto t = flops_trunk(in);
  const auto s = layer_shape(t);
  const auto o = tsa_options_table().read(in.model);
  const bool sparse = o.inference() == TsaInference::Sparse;
  std::vector<bool> routed(static_cast<std::size_t>(t.n_layer()), true);
  routed[0] = false;  // the stem
  const auto f = layer_fractions(in, routed, 1.0, 0.0, 1.0);
  FlopsBuilder b(in, s, in.vocab);
  const double d = static_cast<double>(s.d), hidden = static_cast<double>(tsa_router_hidden(s.d));
  b.dense(0, s);
  for (int i = 1; i < t.n_layer(); ++i) {
    auto& l = b.add(i, "tsa", true, sparse ? f[i] : 1.0, s);
    FlopsBuilder::part(l, "router", linear_flops(b.N, d, hidden) + linear_flops(b.N, hidden, 1.0));
    FlopsBuilder::part(l, "attn_qkv", qkv_flops(b.N, s));
    FlopsBuilder::part(l, "attn_core", attention_core_flops(b.B * b.T * b.T, s));
    FlopsBuilder::part(l, "attn_out", out_proj_flops(b.N, s));
    FlopsBuilder::part(l, "mlp", mlp_flops(sparse ? f[i] * b.N : b.N, s));
  }
  b.est.notes.push_back(sparse ? "sparse inference: attention stays dense (O(T^2)); only the FFN skips halted tokens"
                               : "soft inference: every token runs every block (fractions ignored); "
                                 "set inference=sparse to price skipping");
  return b.est;
}

}  // namespace

ArchitectureEntry tsa_architecture() {
  ArchitectureEntry entry{
      "tsa",
      "Token-Selective Attention",
      "TSA (Abdalla Mohammed, arXiv 2605.05222)",
      "A stem block, then after every block a small router whose halting probability p scales both residual "
      "updates of the next block by (1 - p); a depth regulariser lambda mean(1 - p). At inference the soft gate or "
      "sparse execution (tokens with p > 0.5 skip the FFN).",
      schema_of(transformer_options_table(), tsa_options_table()),
      check_tsa_options,
      [](const nlohmann::json& m, const ModelContext& ctx) -> std::shared_ptr<LanguageModel> {
        return std::make_shared<TokenSelectiveAttention>(
            transformer_options_from_json(m, ctx.vocab_size, ctx.context), tsa_options_table().read(m));
      },
  };
  entry.read_back_options = [](const nlohmann::json& m) {
    return read_back(m, transformer_options_table(), tsa_options_table());
  };
  entry.force_routed_share = force_tsa_share;
  entry.speed_options = {{"inference", "sparse"}};
  entry.price_flops = price_tsa;
  entry.routed_fraction_meaning =
      "share of tokens running the FFN of blocks 1..L-1 in sparse inference (default: 1)";
  entry.priced_share_stat = "active_share";
  entry.gate_meaning = "active fraction 1 - p";
  entry.regulariser_option = "depth_coeff";
  // Training is always soft: every block runs every token, gated by (1 - p); the trace's shares and eqs. 6-7 stay on
  // the device (LayerTrace::on_device, ModelOutput::stats_on_device), so the step can be captured and replayed.
  entry.cuda_graph_step = true;
  entry.cuda_graph_forward = true;
  entry.color = 3;
  return entry;
}

}  // namespace routelab
