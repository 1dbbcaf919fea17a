// Mixture-of-Depths: expert-choice top-k routing of whole blocks on compacted sequences, the causal
// predictor that decides at inference, and the registry entry.
#include "core/models/mod.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

#include "core/inference/kv_cache.h"
#include "core/models/blocks/attention.h"
#include "core/models/blocks/residual_probe.h"
#include "core/util/errors.h"
#include "core/util/logging.h"

namespace routelab {

const OptionTable<MoDOptions>& mod_options_table() {
  using T = OptionType;
  static const auto table = [] {
    OptionTable<MoDOptions> t;
    t.value(ROUTELAB_OPTION(routed_layers), T::String,
            "layers that route: alternate (odd layers, T-M-T-M as the paper and DTRNet), another named pattern, a "
            "letter per layer (T dense, M routed) or routed indices like 1,3")
        .value(ROUTELAB_OPTION(capacity), T::Float,
               "fraction of each sequence a routed layer processes, k = floor(capacity T) in training (paper 0.125; "
               "DTRNet's matched-FLOPs baseline 0.7); must be above 0",
               0.0, 1.0)
        .training_only()
        .choice(ROUTELAB_OPTION(router_weight), {"sigmoid", "logit"},
                "what scales a selected token's update: sigmoid of the router logit (DTRNet repo) or the raw logit "
                "(Raposo et al.)")
        .choice(ROUTELAB_OPTION(residual), {"paper", "reference"},
                "paper: x + w f(x); reference: (1 + w) x + w f(x), as the DTRNet repo computes it")
        .value(ROUTELAB_OPTION(predictor_coeff), T::Float,
               "weight of the causal predictor's BCE (mean over routed layers) in the loss; it trains only the "
               "predictor",
               0.0, 100.0)
        .training_only();
    return t;
  }();
  return table;
}

std::int64_t mod_capacity_tokens(double capacity, std::int64_t seq_len) {
  // The reference code's int(T * topk) truncates 0.29 * 100 = 28.999... to 28; the small slack gives the
  // floor of the decimal product the user wrote.
  const auto k = static_cast<std::int64_t>(std::floor(capacity * static_cast<double>(seq_len) + 1e-9));
  return std::clamp<std::int64_t>(k, 0, seq_len);
}

MoDLayerImpl::MoDLayerImpl(const TransformerOptions& transformer, const MoDOptions& options_,
                           std::int64_t layer_index)
    : options(options_), shape(layer_shape(transformer)) {
  block = register_module("block", DenseBlock(transformer, layer_index));
  // Linear(d -> 1) with a bias on the raw residual stream, as the DTRNet repo's TokenRouter (the paper's
  // r = w^T x has no bias; the bias does not change a top-k, only the scale of the update).
  router = register_module("router", torch::nn::Linear(torch::nn::LinearOptions(transformer.n_embd(), 1).bias(true)));
  predictor = register_module("predictor", CausalPredictor(transformer.n_embd()));
}

torch::Tensor MoDLayerImpl::router_logits(const torch::Tensor& x) {
  const Fp32Router fp32;
  return linear(x.to(torch::kFloat), router).squeeze(-1);  // (B, T)
}

torch::Tensor MoDLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& positions,
                                    torch::Tensor& predictor_loss, LayerTrace* trace) {
  ROUTELAB_PART("router");  // the router, its rule and weights (the block's attention, norms and MLP nest inside)
  const auto B = x.size(0), T = x.size(1);
  const auto k = mod_capacity_tokens(options.capacity(), T);
  // The top-k reads every token's logit, but only the selected tokens' weights carry a gradient: in a training step
  // the logits are taken without one and the selected rows' again from the gathered rows (w below), so the router's
  // backward runs over those rows, not as (B T, C) products and a gradient of x that is zero but on them.
  const bool reweigh = is_training() && torch::GradMode::is_enabled();
  torch::Tensor logits;  // (B, T)
  {
    std::optional<torch::NoGradGuard> no_grad;
    if (reweigh) no_grad.emplace();
    logits = router_logits(x);
  }
  const auto predicted = predictor(x);   // (B, T), reads x.detach()
  // Top-k over the whole sequence looks at the future: it decides only in training. Evaluation still
  // computes it when tracing, to report how well the predictor imitates it.
  torch::Tensor topk, decision;  // (B, T) bool
  Compaction c;
  if (is_training()) {  // k tokens a sequence: compacted without waiting for the device
    auto routing = topk_routing(logits.detach(), k);
    topk = decision = routing.decision;
    c = std::move(routing.compaction);
    predictor_loss = CausalPredictorImpl::loss(predicted, topk);
    sizing.clear_read();
  } else {
    if (trace) topk = topk_decision(logits.detach(), k);
    decision = predicted.detach().gt(0);  // sigmoid > 0.5
    // Sized from earlier forwards where it can be (packed rows in half precision on a GPU, padded rows in fp32):
    // nothing read back here; the model reads every layer's counts once after its last layer.
    c = sizing.compact(decision, x, block->attn->head_dim());
  }
  auto out = x;       // unselected tokens pass unchanged
  double pairs = 0;   // (query, key) pairs per head the compacted attention computed
  if (c.capacity > 0) {  // packed rows sized in eval: the padding rows' updates are masked, the model prices the runs
    const auto x_sel = gather_packed(x, c);  // (N, C), the routed rows first
    const auto f = block->update_packed(x_sel, packed_positions(positions, c), c);
    auto w = logits.reshape({-1}).index_select(0, c.real_flat);  // (N)
    if (options.router_weight() == MoDRouterWeight::Sigmoid) w = torch::sigmoid(w);
    out = add_rows(x, c, w.unsqueeze(-1) * (options.residual() == MoDResidual::Paper ? f : x_sel + f));
  } else if (c.total > 0 || c.padded_sized) {
    const auto x_sel = gather_rows(x, c);  // (B, K, C) in causal order
    // Selected tokens keep their original positions (RoPE rows), as the reference code gathers them.
    const auto pos_sel = compacted_positions(positions, c);  // (B, K)
    const auto f = block->update(x_sel, pos_sel, &c, &pairs);  // (B, K, C)
    auto w = reweigh ? router_logits(x_sel) : logits.gather(1, c.index);  // (B, K): the router learns through w
    if (options.router_weight() == MoDRouterWeight::Sigmoid) w = torch::sigmoid(w);
    w = w.unsqueeze(-1);  // (B, K, 1)
    // Paper: x + w f; reference: (1 + w) x + w f = x + w (x + f). The update is added to the selected rows of x in
    // one pass, whose backward passes x's gradient through (no copy of it with those rows zeroed).
    out = add_rows(x, c, w * (options.residual() == MoDResidual::Paper ? f : x_sel + f));  // (B, T, C)
  }

  if (trace) {
    const double tokens = static_cast<double>(B * T);
    trace->kind = "mod";
    trace->routed = true;
    // The gate is the router's probability even when the predictor made the decision (eval).
    trace->gate = torch::sigmoid(logits.detach()).to(torch::kFloat);
    trace->decision = decision;
    trace->routed_fraction = static_cast<double>(c.total) / tokens;  // a sized form's: set by the model's read
    trace->aux_loss = 0.0;  // the predictor's BCE in training, from on_device below
    trace->tokens_processed = {{"attn", c.total}, {"mlp", c.total}, {"router", B * T}};
    // Priced as executed: the block runs over the padded (B, K) rows (the padding of shorter sequences too).
    const double d = static_cast<double>(shape.d);
    trace->flops = (c.total > 0 || c.padded_sized ? block_flops(c.padded_rows(), pairs, shape) : 0.0) +
                   2.0 * linear_flops(tokens, d, 1.0) +                             // router + predictor
                   (reweigh && c.total > 0 ? linear_flops(c.padded_rows(), d, 1.0) : 0.0);  // the selected rows' w
    trace->dense_flops = dense_layer_flops(static_cast<double>(B), static_cast<double>(T), shape);
    trace->stats["topk_fraction"] = static_cast<double>(k) / static_cast<double>(T);
    // The values read from the device wait in on_device: the model reads them back together after its last layer,
    // and a training step captured as a CUDA graph after each replay (nothing here waits for the device).
    if (predictor_loss.defined()) trace->on_device["aux_loss"] = predictor_loss.detach();
    trace->on_device["predictor_agreement"] = CausalPredictorImpl::agreement_on_device(predicted, topk);
    trace->on_device["predictor_fraction"] = predicted.detach().gt(0).sum().to(torch::kDouble) / tokens;
  }
  return out;
}

torch::Tensor MoDLayerImpl::decode(const torch::Tensor& x, const torch::Tensor& positions, KVCache& cache,
                                   torch::Tensor& decision, torch::Tensor& gate) {
  const auto logits = router_logits(x);    // (B, n)
  decision = predictor(x).gt(0);           // (B, n): the causal predictor, as the eval-mode forward
  gate = torch::sigmoid(logits);
  if (!decision.any().item<bool>()) return x;  // nobody runs the block: no cache entry, no compute
  const auto f = block->decode_update_rows(x, positions, cache, decision);  // (B, n, C); selected rows only
  auto w = options.router_weight() == MoDRouterWeight::Sigmoid ? gate : logits;
  w = w.unsqueeze(-1).to(x.scalar_type());  // (B, n, 1)
  const auto rows = options.residual() == MoDResidual::Paper ? x + w * f : (1 + w) * x + w * f;
  return torch::where(decision.unsqueeze(-1), rows, x);
}

MixtureOfDepths::MixtureOfDepths(TransformerOptions transformer, MoDOptions options)
    : TransformerTrunk(std::move(transformer)), mod_options_(std::move(options)) {
  routed_ = parse_layer_pattern(mod_options_.routed_layers(), options_.n_layer(), "model.routed_layers");
  const double capacity = mod_options_.capacity();
  if (!(capacity > 0.0 && capacity <= 1.0))
    throw ConfigError("model.capacity: " + std::to_string(capacity) + " is outside (0, 1]");
  auto list = register_module("blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < options_.n_layer(); ++i) {
    if (routed_[static_cast<std::size_t>(i)]) {
      dense_blocks.emplace_back(nullptr);
      mod_layers.push_back(MoDLayer(options_, mod_options_, i));
      list->push_back(mod_layers.back());
    } else {
      dense_blocks.push_back(DenseBlock(options_, i));
      mod_layers.emplace_back(nullptr);
      list->push_back(dense_blocks.back());
    }
  }
  // Router and predictor get N(0, 0.02) weights and zero biases, as the reference code initialises them.
  init_weights();
}

ModelOutput MixtureOfDepths::forward(const torch::Tensor& tokens, bool trace) {
  torch::Tensor positions;
  auto x = embed(tokens, positions);  // (B, T, C)
  const auto B = tokens.size(0), T = tokens.size(1);
  ModelOutput out;
  std::vector<torch::Tensor> predictor_losses;
  for (std::size_t i = 0; i < routed_.size(); ++i) {
    if (!routed_[i]) {
      x = dense_blocks[i]->forward(x, positions);
      record_layer_state(x);
      if (trace) out.trace.push_back(dense_layer_trace(static_cast<int>(i), B, T, layer_shape(options_)));
      continue;
    }
    LayerTrace layer_trace;
    torch::Tensor loss;
    x = mod_layers[i]->forward(x, positions, loss, trace ? &layer_trace : nullptr);
    record_layer_state(x);
    if (loss.defined()) predictor_losses.push_back(loss);
    if (trace) {
      layer_trace.layer = static_cast<int>(i);
      out.trace.push_back(std::move(layer_trace));
    }
  }
  if (DeferredTraceReadback::active() && !trace) {  // an untraced forward captured as a CUDA graph: read afterwards
    std::vector<DeferredSizing> sized;
    for (auto& layer : mod_layers)
      if (layer && layer->sizing.counts.defined()) sized.push_back(layer->sizing.defer(B * T));
    defer_settling(std::move(sized), out);
  } else if (!settle_sized_layers(trace ? &out.trace : nullptr, B * T)) {
    // A sequence routed more tokens than its layer's rows held: the forward runs again with every count read exactly
    // (and every capacity sized afresh from them), so it cannot overflow twice. This attempt's activations go first.
    x = positions = torch::Tensor();
    out = ModelOutput();
    const ExactRoutedCounts exact;
    return forward(tokens, trace);
  }
  out.logits = head(x);
  if (trace) resolve_on_device(out);
  // The reference code adds the mean over MoD layers of the predictor BCE with coefficient 1. The BCE reads
  // a detached residual stream, so it trains the predictors and nothing else.
  out.aux_loss = predictor_losses.empty()
                     ? torch::zeros({}, out.logits.options().dtype(torch::kFloat))
                     : mod_options_.predictor_coeff() * torch::stack(predictor_losses).mean();
  return out;
}

bool MixtureOfDepths::settle_sized_layers(std::vector<LayerTrace>* trace, std::int64_t tokens) {
  std::vector<torch::Tensor> counts;
  for (const auto& layer : mod_layers) counts.push_back(layer ? layer->sizing.counts : torch::Tensor());
  for (const auto& [i, lengths] : read_sized_counts(counts)) {
    auto& layer = *mod_layers[i];
    if (!layer.sizing.settle(lengths, trace ? &trace->at(i) : nullptr, tokens, layer.shape)) {
      logger("core")->debug("MoD layer {} routed more tokens than its sized rows held: the forward runs again", i);
      return false;
    }
  }
  return true;
}

std::unique_ptr<DecodeState> MixtureOfDepths::begin_decode(std::int64_t batch) { return new_decode_state(batch); }

torch::Tensor MixtureOfDepths::decode(DecodeState& state, const torch::Tensor& tokens, DecodeTrace* trace) {
  torch::NoGradGuard no_grad;
  torch::Tensor positions;
  auto x = embed_decode(tokens, state, positions);  // (B, n, C)
  const auto B = tokens.size(0), n = tokens.size(1);
  for (std::size_t i = 0; i < routed_.size(); ++i) {
    auto& cache = state.cache(i);
    if (!routed_[i]) {
      x = x + dense_blocks[i]->decode_update(x, positions, cache);
      if (trace) trace->layers.push_back(dense_layer_trace(static_cast<int>(i), B, n, layer_shape(options_)));
      continue;
    }
    torch::Tensor decision, gate;
    x = mod_layers[i]->decode(x, positions, cache, decision, gate);
    if (trace) {
      LayerTrace t;
      t.layer = static_cast<int>(i);
      t.kind = "mod";
      t.routed = true;
      t.gate = gate;
      t.decision = decision;
      const auto selected = decision.sum().item<std::int64_t>();
      t.routed_fraction = static_cast<double>(selected) / static_cast<double>(B * n);
      t.tokens_processed = {{"attn", selected}, {"mlp", selected}};
      trace->layers.push_back(std::move(t));
    }
  }
  state.advance(n);
  return head(x);
}

std::string MixtureOfDepths::describe() const {
  std::ostringstream out;
  out << LanguageModel::describe() << ", routed " << pattern_string(routed_) << ", capacity "
      << mod_options_.capacity();
  return out.str();
}

namespace {

void check_mod_options(const nlohmann::json& m, const std::string& path) {
  check_transformer_options(m, path);
  const auto spec = m.at("routed_layers").get<std::string>();
  const auto routed = parse_layer_pattern(spec, m.at("n_layer").get<std::int64_t>(), path + ".routed_layers");
  if (std::none_of(routed.begin(), routed.end(), [](bool r) { return r; }))
    throw ConfigError(path + ".routed_layers: '" + spec + "' routes no layer (Mixture-of-Depths needs at least one)");
  const auto capacity = m.at("capacity").get<double>();
  if (!(capacity > 0.0))
    throw ConfigError(path + ".capacity: " + m.at("capacity").dump() + " must be above 0");
}

/// One calibration pass (ArchitectureEntry::force_routed_share): the causal predictor decides at inference, so each
/// routed layer's predictor becomes its router minus the threshold on the router's logit that selects `fraction`
/// of the tokens of one traced forward; in training the top-k decides, so each layer's capacity becomes `fraction`.
void force_mod_share(LanguageModel& model, const torch::Tensor& tokens, double fraction) {
  torch::NoGradGuard no_grad;
  auto& net = dynamic_cast<MixtureOfDepths&>(model);
  for (auto& layer : net.mod_layers)
    if (layer) layer->options.capacity(fraction);
  for (const auto& t : net.forward(tokens, true).trace) {
    if (!t.routed || !t.gate.defined()) continue;
    auto& layer = net.mod_layers[static_cast<std::size_t>(t.layer)];
    const double thr = threshold_for_top(gate_logit(t.gate), share_count(fraction, t.gate.numel()));
    layer->predictor->linear->weight.copy_(layer->router->weight);
    layer->predictor->linear->bias.copy_(layer->router->bias - thr);
  }
}

/// The FLOPs of the eval-mode forward (ArchitectureEntry::price_flops).
FlopsEstimate price_mod(const FlopsInput& in) {
  const auto t = flops_trunk(in);
  const auto s = layer_shape(t);
  const auto o = mod_options_table().read(in.model);
  const auto routed = parse_layer_pattern(o.routed_layers(), t.n_layer(), "model.routed_layers");
  const auto f = layer_fractions(in, routed, o.capacity(), 0.0, 1.0);
  FlopsBuilder b(in, s, in.vocab);
  const double d = static_cast<double>(s.d);
  b.layers(routed, f, "mod", s, [&](int i, LayerFlops& l) {
    FlopsBuilder::part(l, "router", linear_flops(b.N, d, 1.0));
    FlopsBuilder::part(l, "predictor", linear_flops(b.N, d, 1.0));
    b.compacted_block(l, f[static_cast<std::size_t>(i)], s);
  });
  b.est.notes.push_back("routed blocks run on the compacted selected tokens (attention O(k^2)); the causal "
                        "predictor decides at inference, the router only scales");
  return b.est;
}

}  // namespace

ArchitectureEntry mod_architecture() {
  ArchitectureEntry entry{
      "mod",
      "Mixture-of-Depths",
      "Raposo et al. 2024 (baseline of DTRNet)",
      "Routed blocks (every other one by default) run only the top-k tokens of each sequence chosen by a router, "
      "scaled by its weight, while the other tokens skip them; a causal predictor chooses at inference.",
      schema_of(transformer_options_table(), mod_options_table()),
      check_mod_options,
      [](const nlohmann::json& m, const ModelContext& ctx) -> std::shared_ptr<LanguageModel> {
        return std::make_shared<MixtureOfDepths>(transformer_options_from_json(m, ctx.vocab_size, ctx.context),
                                                 mod_options_table().read(m));
      },
  };
  // A MoD layer caches the tokens its router selects.
  entry.read_back_options = [](const nlohmann::json& m) {
    return read_back(m, transformer_options_table(), mod_options_table());
  };
  entry.kv_entries = kv_entries_of_routed_tokens;
  entry.force_routed_share = force_mod_share;
  entry.price_flops = price_mod;
  // Training routes k = floor(capacity T) tokens of every sequence: fixed shapes, compacted without a wait, the
  // predictor's statistics left on the device (LayerTrace::on_device) until the replay has run.
  entry.cuda_graph_step = true;
  entry.cuda_graph_forward = true;
  entry.routed_fraction_meaning =
      "share of tokens selected in each routed block (default: model.capacity)";
  entry.color = 1;
  return entry;
}

}  // namespace routelab
