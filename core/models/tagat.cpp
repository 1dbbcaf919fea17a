// TAGAT: the top-k gate, sparse (gather -> expert -> index_add) and dense dispatch, FiLM, the routing losses,
// traces and the registry entry. Equations from TAGAT §4 (main.tex), not the notebook (architectures.md §5).
#include "core/models/tagat.h"

#include <optional>
#include <sstream>

#include "core/cost/flops.h"
#include "core/models/blocks/attention.h"
#include "core/models/blocks/part_scope.h"
#include "core/util/errors.h"

namespace routelab {

const OptionTable<TagatOptions>& tagat_options_table() {
  using T = OptionType;
  static const auto table = [] {
    OptionTable<TagatOptions> t([] { return TagatOptions(0, 0, 0); });
    t.value(ROUTELAB_OPTION(n_layer), T::Int, "gated modular layers (the paper's Config: 1)", 1, 64)
        .value(ROUTELAB_OPTION(n_embd), T::Int, "model width d", 8, 8192)
        .value(ROUTELAB_OPTION(n_head), T::Int, "attention heads per expert (must divide n_embd)", 1, 256)
        .weight_layout()
        .value(ROUTELAB_OPTION(n_experts), T::Int, "attention experts N per layer", 1, 64)
        .value(ROUTELAB_OPTION(top_k), T::Int, "experts per token k (softmax over the k selected gate logits)", 1, 64)
        .value(ROUTELAB_OPTION(dropout), T::Float,
               "dropout inside the experts' FFN and on the [CLS] state before the head", 0, 0.9)
        .training_only()
        .choice(ROUTELAB_OPTION(film), {"one_plus_gamma", "raw"},
                "one_plus_gamma: (1 + gamma) * expert + beta, experts pass through at init; raw: the paper's gamma * "
                "expert + beta (gamma ~ 0 at init suppresses the experts)")
        .value(ROUTELAB_OPTION(lambda_ent), T::Float,
               "weight of the mean routing entropy (minimised: confident routing); paper: 2 balanced, 1 specialised", 0,
               1e4)
        .training_only()
        .value(ROUTELAB_OPTION(lambda_bal), T::Float,
               "weight of the L2 load balance sum_i (u_i - 1/N)^2; paper: 3 balanced, 1 specialised", 0, 1e4)
        .training_only()
        .choice(ROUTELAB_OPTION(balance), {"mean_load", "per_layer"},
                "mean_load: sum_i (u_i - 1/N)^2 of the loads averaged over the layers (the paper's Listing 9; a layer "
                "may keep dead experts if the mean is even); per_layer: the mean over layers of each layer's sum")
        .training_only()
        .read_when_nonzero("lambda_bal")
        .choice(ROUTELAB_OPTION(dispatch), {"sparse", "dense"},
                "sparse: an expert's queries and FFN run only on its routed tokens (keys/values cover the sequence); "
                "dense: every expert on every token (the test oracle, same result)")
        .same_result()
        .choice(ROUTELAB_OPTION(positional), {"sinusoidal", "learned"},
                "sinusoidal (the paper's code) or learned positions")
        .value(ROUTELAB_OPTION(segments), T::Bool,
               "add a learned segment embedding (sentence a / b); the seed uses none");
    return t;
  }();
  return table;
}

TagatOptions tagat_options_from_json(const nlohmann::json& m, std::int64_t vocab_size, std::int64_t num_classes,
                                     std::int64_t context) {
  return tagat_options_table().read(m, TagatOptions(vocab_size, num_classes, context));
}

TopKGate top_k_gate(const torch::Tensor& logits, std::int64_t k) {
  TopKGate g;
  auto [values, ids] = logits.topk(k, -1);  // (B, T, k) each, highest first
  g.experts = ids;
  g.log_weights = torch::log_softmax(values, -1);  // softmax over the k selected logits only (§4.2)
  g.weights = g.log_weights.exp();
  g.dense = torch::zeros_like(logits).scatter(-1, ids, g.weights);  // (B, T, N)
  return g;
}

RoutingLosses routing_losses(const TopKGate& gate, const torch::Tensor& mask) {
  const auto m = mask.to(gate.weights.scalar_type());  // (B, T)
  const auto n = m.sum().clamp_min(1.0);
  const auto entropy_t = -(gate.weights * gate.log_weights).sum(-1);  // (B, T) H_t
  RoutingLosses l;
  l.entropy = (entropy_t * m).sum() / n;
  l.load = (gate.dense * m.unsqueeze(-1)).sum(std::vector<std::int64_t>{0, 1}) / n;  // (N)
  return l;
}

torch::Tensor balance_loss(const torch::Tensor& load) {
  return (load - 1.0 / static_cast<double>(load.size(-1))).pow(2).sum(-1);
}

GatedModularLayerImpl::GatedModularLayerImpl(const TagatOptions& o) : options(o) {
  const auto C = o.n_embd();
  gate = register_module("gate", torch::nn::Linear(torch::nn::LinearOptions(C, o.n_experts())));
  auto expert_list = register_module("experts", torch::nn::ModuleList());
  auto film_list = register_module("films", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < o.n_experts(); ++i) {
    experts.push_back(EncoderBlock(EncoderBlockOptions(C, o.n_head()).d_ff(4 * C).dropout(o.dropout())));
    expert_list->push_back(experts.back());
    films.push_back(torch::nn::Linear(torch::nn::LinearOptions(C, 2 * C)));
    film_list->push_back(films.back());
  }
  norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({C})));
}

torch::Tensor GatedModularLayerImpl::modulate(std::size_t i, const torch::Tensor& expert_rows, const torch::Tensor& x_rows) {
  ROUTELAB_PART("film");
  const auto gamma_beta = linear(x_rows, films[i]).chunk(2, -1);  // γ, β (n, C) from the token's layer input (§4.4)
  const auto scale = options.film() == FilmKind::OnePlusGamma ? gamma_beta[0] + 1.0 : gamma_beta[0];
  return scale * expert_rows + gamma_beta[1];
}

GatedModularLayerImpl::Output GatedModularLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  const auto B = x.size(0), T = x.size(1), C = x.size(2), N = options.n_experts();
  // The gate, its losses and the experts' weights: the router; the tokens' dispatch to the experts and back: routing.
  ROUTELAB_PART("routing");
  Output out;
  {
    ROUTELAB_PART("router");
    out.gate = top_k_gate(linear(x, gate).to(torch::kFloat), options.top_k());  // logits (B, T, N) in fp32
    out.losses = routing_losses(out.gate, mask);
  }
  const auto x_flat = x.reshape({B * T, C});
  // Padding tokens take no expert (y = 0, h = LayerNorm(x)): they are never keys, and nothing reads them.
  const auto weights = (out.gate.dense * mask.unsqueeze(-1).to(torch::kFloat)).reshape({B * T, N});  // (B*T, N)
  auto y = torch::zeros({B * T, C}, x.options());  // Σ_i g~_i FiLM_i(M_i(x))
  out.tokens_per_expert.assign(static_cast<std::size_t>(N), 0);

  if (options.dispatch() == TagatDispatch::Dense) {
    for (std::int64_t i = 0; i < N; ++i) {
      const auto rows = experts[i]->forward(x, mask).reshape({B * T, C});
      const auto modulated = modulate(static_cast<std::size_t>(i), rows, x_flat);
      y = y + (weights.select(1, i).unsqueeze(1) * modulated).to(y.scalar_type());
    }
    out.tokens_per_expert.assign(static_cast<std::size_t>(N), mask.sum().item<std::int64_t>());
  } else {
    const auto selected = torch::zeros({B, T, N}, mask.options().dtype(torch::kBool))
                              .scatter(-1, out.gate.experts, true)
                              .logical_and(mask.unsqueeze(-1));  // (B, T, N)
    for (std::int64_t i = 0; i < N; ++i) {
      const auto rows_of = compact(selected.select(-1, i));  // the tokens routed to expert i, per sequence
      out.tokens_per_expert[i] = rows_of.total;
      if (rows_of.total == 0) continue;
      const auto& token = rows_of.real_flat;                                            // (n) flat token ids
      const auto rows = experts[i]->forward_rows(x, mask, rows_of);                    // (n, C)
      const auto modulated = modulate(static_cast<std::size_t>(i), rows, x_flat.index_select(0, token));
      const auto w = weights.select(1, i).index_select(0, token).unsqueeze(1);         // (n, 1)
      y = y.index_add(0, token, (w * modulated).to(y.scalar_type()));
    }
  }
  out.h = ROUTELAB_IN_PART("norm", norm(x + y.view({B, T, C})));  // h = LayerNorm(x + y) (§4.5)
  return out;
}

double Tagat::layer_flops(const torch::Tensor& per_sequence, const torch::Tensor& lengths, bool dense) const {
  const double C = static_cast<double>(options_.n_embd()), N = static_cast<double>(options_.n_experts());
  const double real = lengths.sum().item<double>();
  // Per query row: q and output projections, FFN C -> 4C -> C, FiLM C -> 2C; per key row: the fused K/V projection.
  const auto per_query = [&](double rows) {
    return 2 * linear_flops(rows, C, C) + linear_flops(rows, C, 4 * C) + linear_flops(rows, 4 * C, C) +
           linear_flops(rows, C, 2 * C);
  };
  double flops = linear_flops(real, C, N);  // the gate
  for (std::int64_t i = 0; i < options_.n_experts(); ++i) {
    // Queries routed to expert i, per sequence; the dense oracle runs every real token through every expert.
    const auto q = dense ? lengths : per_sequence.select(1, i);  // (B)
    const double queries = q.sum().item<double>();
    if (queries == 0) continue;
    // Keys and values cover each sequence's real tokens; scores and the weighted sum: 4 C per (query, key).
    flops += linear_flops(real, C, 2 * C) + per_query(queries) + 4.0 * C * (q * lengths).sum().item<double>();
  }
  return flops;
}

Tagat::Tagat(TagatOptions options) : options_(std::move(options)) {
  const auto C = options_.n_embd();
  if (options_.top_k() < 1 || options_.top_k() > options_.n_experts())
    throw ConfigError("model.top_k: " + std::to_string(options_.top_k()) + " must be in [1, n_experts " +
                      std::to_string(options_.n_experts()) + "]");
  if (options_.num_classes() < 2)
    throw ConfigError("model: a classifier needs at least 2 classes, the data has " +
                      std::to_string(options_.num_classes()));
  tok_emb = register_module("tok_emb", torch::nn::Embedding(options_.vocab_size(), C));
  if (options_.positional() == PositionalKind::Learned)
    pos_emb = register_module("pos_emb", torch::nn::Embedding(options_.context(), C));
  else
    pos_table = register_buffer("pos_table", sinusoidal_positions(options_.context(), C));
  if (options_.segments()) seg_emb = register_module("seg_emb", torch::nn::Embedding(2, C));
  auto layer_list = register_module("layers", torch::nn::ModuleList());
  for (std::int64_t l = 0; l < options_.n_layer(); ++l) {
    layers.push_back(GatedModularLayer(options_));
    layer_list->push_back(layers.back());
  }
  head = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(C, options_.num_classes())));
}

void Tagat::set_dispatch(TagatDispatch dispatch) {
  options_.dispatch(dispatch);
  for (auto& layer : layers) layer->options.dispatch(dispatch);
}

ClassifierOutput Tagat::forward(const torch::Tensor& input, const torch::Tensor& mask, const torch::Tensor& segment,
                                bool trace) {
  const auto B = input.size(0), T = input.size(1), N = options_.n_experts(), k = options_.top_k();
  if (T > options_.context())
    throw ConfigError("tagat: sequence length " + std::to_string(T) + " exceeds the model's context " +
                      std::to_string(options_.context()));
  torch::Tensor x;
  {
    ROUTELAB_PART("embedding");
    x = tok_emb(input);  // (B, T, C): H(0) = E + P (§4.1)
    if (options_.positional() == PositionalKind::Learned)
      x = x + pos_emb(torch::arange(T, input.options()));
    else
      x = x + pos_table.narrow(0, 0, T).to(x.scalar_type());
    if (options_.segments() && segment.defined()) x = x + seg_emb(segment);
  }

  std::vector<GatedModularLayerImpl::Output> outs;
  std::vector<torch::Tensor> entropies, loads;
  for (auto& layer : layers) {
    auto o = layer->forward(x, mask);
    x = o.h;
    entropies.push_back(o.losses.entropy);
    loads.push_back(o.losses.load);
    outs.push_back(std::move(o));
  }
  // L_ent: the mean over layers of the per-layer mean token entropy (the seed sums layers; with its one layer the
  // same, and a mean keeps λ_ent's meaning across depths). L_bal: the paper's Listing 9, u averaged over layers
  // first, then Σ_i (u_i - 1/N)². u_i is the paper's soft load Σ_t g~_{t,i} / T (§4.6.3) over the real tokens:
  // differentiable and summing to one over the experts; a count of (token, slot) assignments would carry no
  // gradient. The hard assignment shares are reported as stats ("assign/...").
  std::optional<PartScope> router_part(std::in_place, ROUTELAB_PART_PREFIX "router");
  const auto entropy_loss = torch::stack(entropies).mean();
  const auto mean_load = torch::stack(loads).mean(0);  // (N)
  const auto imbalance = balance_loss(mean_load);
  const auto layer_imbalance = balance_loss(torch::stack(loads)).mean();  // equals `imbalance` for one layer

  ClassifierOutput out;
  out.aux_loss = options_.lambda_ent() * entropy_loss +
                 options_.lambda_bal() * (options_.balance() == BalanceScope::PerLayer ? layer_imbalance : imbalance);
  router_part.reset();
  {
    ROUTELAB_PART("head");
    auto cls = x.select(1, 0);  // (B, C) the [CLS] state
    if (is_training() && options_.dropout() > 0) cls = torch::dropout(cls, options_.dropout(), true);
    out.logits = linear(cls, head).to(torch::kFloat);  // (B, num_classes)
  }
  if (!trace) return out;

  torch::NoGradGuard no_grad;
  const double real = std::max(1.0, mask.sum().item<double>());
  out.stats["entropy"] = entropy_loss.item<double>();
  out.stats["load_imbalance"] = imbalance.item<double>();  // the paper's Listing 9, whatever the loss uses
  out.stats["load_imbalance_per_layer"] = layer_imbalance.item<double>();
  const auto mean_load_cpu = mean_load.cpu();
  for (std::int64_t i = 0; i < N; ++i) out.stats["load/E" + std::to_string(i)] = mean_load_cpu[i].item<double>();
  std::vector<torch::Tensor> gates, experts;
  const auto lengths = mask.cpu().to(torch::kDouble).sum(1);  // (B) real tokens per sequence
  for (std::size_t l = 0; l < outs.size(); ++l) {
    const auto& o = outs[l];
    LayerTrace t;
    t.layer = static_cast<int>(l);
    t.kind = "tagat";
    t.routed = true;
    std::int64_t queries = 0;
    for (const auto n : o.tokens_per_expert) queries += n;
    t.routed_fraction = static_cast<double>(queries) / (real * static_cast<double>(N));  // k/N for sparse dispatch
    t.tokens_processed = {{"attn", queries}, {"mlp", queries}};
    t.stats["entropy"] = o.losses.entropy.item<double>();
    t.stats["balance"] = balance_loss(o.losses.load).item<double>();
    const auto load = o.losses.load.cpu();
    // Hard shares: (token, slot) assignments to expert i over all real-token assignments (sum to one).
    const auto per_sequence = torch::zeros({B, T, N}, torch::kDouble)
                                  .scatter(-1, o.gate.experts.cpu(), 1.0)
                                  .mul(mask.cpu().to(torch::kDouble).unsqueeze(-1))
                                  .sum(1);  // (B, N) tokens of each sequence routed to each expert
    const auto counts = per_sequence.sum(0);  // (N)
    t.flops = layer_flops(per_sequence, lengths, options_.dispatch() == TagatDispatch::Dense);
    t.dense_flops = layer_flops(per_sequence, lengths, /*dense=*/true);
    const std::string prefix = "L" + std::to_string(l) + "/E";
    for (std::int64_t i = 0; i < N; ++i) {
      const auto id = std::to_string(i);
      t.stats["load_E" + id] = load[i].item<double>();
      t.stats["assign_E" + id] = counts[i].item<double>() / (real * static_cast<double>(k));
      out.stats["load/" + prefix + id] = load[i].item<double>();
      out.stats["assign/" + prefix + id] = t.stats["assign_E" + id];
    }
    t.aux_loss = t.stats["entropy"];  // the layer's entropy term before λ_ent (the balance term is global)
    out.trace.push_back(std::move(t));
    gates.push_back(o.gate.dense);
    experts.push_back(o.gate.experts);
  }
  out.token_data["gate"] = torch::stack(gates, 2);      // (B, T, L, N)
  out.token_data["expert"] = torch::stack(experts, 2);  // (B, T, L, k)
  return out;
}

std::string Tagat::describe() const {
  std::ostringstream s;
  s << SequenceClassifier::describe() << ", " << options_.n_experts() << " experts top-" << options_.top_k()
    << ", film " << (options_.film() == FilmKind::Raw ? "raw" : "one_plus_gamma") << ", lambda_ent "
    << options_.lambda_ent() << ", lambda_bal " << options_.lambda_bal()
    << (options_.balance() == BalanceScope::PerLayer ? " per layer" : "") << ", "
    << (options_.dispatch() == TagatDispatch::Dense ? "dense" : "sparse") << " dispatch";
  return s.str();
}

namespace {

void check_tagat_options(const nlohmann::json& m, const std::string& path) {
  const auto n_embd = m.at("n_embd").get<std::int64_t>(), n_head = m.at("n_head").get<std::int64_t>();
  if (n_embd % n_head != 0)
    throw ConfigError(path + ".n_head: " + std::to_string(n_head) + " does not divide n_embd " + std::to_string(n_embd));
  const auto k = m.at("top_k").get<std::int64_t>(), n = m.at("n_experts").get<std::int64_t>();
  if (k > n)
    throw ConfigError(path + ".top_k: " + std::to_string(k) + " exceeds n_experts " + std::to_string(n));
}

}  // namespace

ArchitectureEntry tagat_architecture() {
  ArchitectureEntry e;
  e.id = "tagat";
  e.display_name = "Token-Adaptive Gated Attention";
  e.source = "TAGAT (TAGAT, shreelg/TAGAT)";
  e.description =
      "Sequence classifier: per layer a token-wise gate picks the top-k of N attention experts (full post-LN encoder "
      "blocks); FiLM modulates each expert's output per token; h = LayerNorm(x + sum of weighted experts); head on "
      "[CLS]. Losses: CE + lambda_ent routing entropy + lambda_bal L2 load balance.";
  e.options = tagat_options_table().schema();
  e.read_back_options = [](const nlohmann::json& m) { return read_back(m, tagat_options_table()); };
  e.check = check_tagat_options;
  e.task = Task::Classification;
  e.create_classifier = [](const nlohmann::json& m, const ModelContext& ctx) -> std::shared_ptr<SequenceClassifier> {
    return std::make_shared<Tagat>(tagat_options_from_json(m, ctx.vocab_size, ctx.num_classes, ctx.context));
  };
  e.color = 0;
  return e;
}

}  // namespace routelab
