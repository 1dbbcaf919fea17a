// Radial Networks: the router, the step-synchronous parallel forward over the unified KV store, straight-through
// Gumbel routing in training, the expected-depth regulariser, the routing trace, and the registry entry.
#include "core/models/radial.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/inference/kv_cache.h"
#include "core/models/blocks/attention.h"
#include "core/models/blocks/residual_probe.h"
#include "core/models/blocks/routing.h"
#include "core/util/device.h"
#include "core/util/errors.h"

namespace routelab {

RadialRouterImpl::RadialRouterImpl(const TransformerOptions& o, std::int64_t hidden) {
  norm = register_module("norm", Norm(NormOptions(o.n_embd())
                                          .kind(o.style() == ModelStyle::GPT2 ? NormKind::Layer : NormKind::RMS)
                                          .eps(o.norm_eps())
                                          .bias(o.bias())));
  fc1 = register_module("fc1", torch::nn::Linear(torch::nn::LinearOptions(o.n_embd(), hidden).bias(true)));
  fc2 = register_module("fc2", torch::nn::Linear(torch::nn::LinearOptions(hidden, o.n_layer() + 1).bias(true)));
}

torch::Tensor RadialRouterImpl::forward(const torch::Tensor& x) {
  const Fp32Router fp32;  // a near-tie between two layers is not decided by bf16 rounding
  const auto hidden = torch::silu(linear(norm(x.to(torch::kFloat)), fc1));  // (..., hidden)
  return linear(hidden, fc2);                                               // (..., L + 1)
}

RadialNetwork::RadialNetwork(TransformerOptions transformer, RadialOptions options)
    : TransformerTrunk(std::move(transformer)), radial_(std::move(options)) {
  if (radial_.max_depth() < 0)
    throw ConfigError("model.max_depth: " + std::to_string(radial_.max_depth()) + " must be at least 0");
  steps_ = radial_.steps(options_.n_layer());
  if (radial_.min_depth() < 0 || radial_.min_depth() > steps_)
    throw ConfigError("model.min_depth: " + std::to_string(radial_.min_depth()) + " is outside [0, max depth " +
                      std::to_string(steps_) + "]");
  if (!(radial_.temperature() > 0))
    throw ConfigError("model.temperature: " + std::to_string(radial_.temperature()) + " must be above 0");
  if (radial_.depth_coeff() < 0)
    throw ConfigError("model.depth_coeff: " + std::to_string(radial_.depth_coeff()) + " must be at least 0");
  if (!(radial_.depth_warmup() >= 0 && radial_.depth_warmup() <= 1))
    throw ConfigError("model.depth_warmup: " + std::to_string(radial_.depth_warmup()) + " is outside [0, 1]");
  if (radial_.router_hidden() < 0)
    throw ConfigError("model.router_hidden: " + std::to_string(radial_.router_hidden()) + " must be at least 0");
  auto list = register_module("layers", torch::nn::ModuleList());
  for (std::int64_t l = 0; l < options_.n_layer(); ++l) {
    layers.push_back(DenseBlock(options_, l));
    list->push_back(layers.back());
  }
  const auto hidden = radial_.router_hidden() > 0 ? radial_.router_hidden() : std::max<std::int64_t>(1, options_.n_embd() / 2);
  router = register_module("router", RadialRouter(options_, hidden));
  // Layers take the trunk's init (GPT-3 residual scaling by the L distinct layers); the router gets N(0, 0.02)
  // matrices and zero biases, so it starts close to uniform over the L + 1 choices, apart from the exit bias.
  init_weights();
  torch::NoGradGuard no_grad;
  const auto L = options_.n_layer();
  router->fc2->bias[L].fill_(radial_.exit_bias());
  if (radial_.sequential_prior() > 0) {
    auto bias = torch::zeros({steps_, L + 1});
    for (std::int64_t s = 0; s < steps_; ++s) bias[s][std::min(s, L)] = radial_.sequential_prior();
    step_bias = register_parameter("step_bias", bias);
  }
}

bool RadialNetwork::decays(const std::string& name, const torch::Tensor& parameter) const {
  return name != "step_bias" && LanguageModel::decays(name, parameter);
}

torch::Tensor RadialNetwork::step_logits(const torch::Tensor& h, std::int64_t s) {
  auto z = router(h);
  return step_bias.defined() ? z + step_bias[s] : z;
}

torch::Tensor RadialNetwork::embed_tokens(const torch::Tensor& tokens) {
  torch::Tensor positions;
  return embed(tokens, positions);
}

ModelOutput RadialNetwork::forward(const torch::Tensor& tokens, bool trace) { return run(tokens, trace, nullptr); }

/// What a forward accumulates for its trace: the layer each token ran at each step (-1 after its exit), the
/// router's layer probabilities summed over the steps a token was alive and their count, the (query, entry) pairs
/// scored per layer, the expected depth, and how many steps the router ran on every row.
struct RadialTotals {  // named, not file-local: RadialNetwork::Pass holds one
  torch::Tensor path, gate_sum, evaluations, pairs, expected_depth;
  std::int64_t router_steps = 0;
};

namespace {

/// Reports one sub-block of the tokens that ran `layer` at `step` to the residual probe: rows x, update (n, C)
/// belong to the flat (B*T) token indices `tokens`.
void probe_rows(int layer, const char* block, int step, const torch::Tensor& x, const torch::Tensor& update,
                const torch::Tensor& tokens, std::int64_t B, std::int64_t T) {
  const auto C = x.size(1);
  const auto x_full = torch::zeros({B * T, C}, x.options()).index_copy(0, tokens, x.detach()).view({B, T, C});
  const auto u_full =
      torch::zeros({B * T, C}, update.options()).index_copy(0, tokens, update.detach()).view({B, T, C});
  const auto ran = torch::zeros({B * T}, tokens.options().dtype(torch::kBool)).index_fill(0, tokens, true).view({B, T});
  record_residual(layer, block, x_full, u_full, ran, step);
}

/// Fills `out.trace` (per layer: its tokens, gates, decisions, FLOPs priced as executed), `out.stats` (depths,
/// reuse) and `out.token_data` (depth, path) from a forward's totals.
void write_radial_trace(ModelOutput& out, const RadialTotals& totals, const TransformerOptions& options,
                        std::int64_t S, std::int64_t router_hidden) {
  const auto& path = totals.path;
  const auto& expected_depth = totals.expected_depth;
  const auto B = path.size(0), T = path.size(1);
  const auto C = options.n_embd(), L = options.n_layer();
  // Everything below reads small tensors once on the host.
  const auto path_cpu = to_host(path);                                              // (B, T, S)
  const auto depth = path_cpu.ge(0).sum(-1);                                         // (B, T) int64
  const auto executions = torch::one_hot(path_cpu + 1, L + 1).narrow(-1, 1, L).sum(2);  // (B, T, L) runs per layer
  const auto gate = to_host(totals.gate_sum / totals.evaluations.unsqueeze(-1));  // (B, T, L)
  const auto pairs_cpu = to_host(totals.pairs);
  const double tokens_total = static_cast<double>(B * T);
  const auto shape = layer_shape(options);
  // Priced as executed: the parallel forward evaluates the router on every row at every step until one where no
  // token runs, exited tokens included. It is shared, so its FLOPs are split evenly over the L layer traces.
  const double router_evaluations = static_cast<double>(totals.router_steps * B * T);
  const double router_flops =
      linear_flops(router_evaluations, C, router_hidden) + linear_flops(router_evaluations, router_hidden, L + 1);
  for (std::int64_t l = 0; l < L; ++l) {
    LayerTrace t;
    t.layer = static_cast<int>(l);
    t.kind = "radial";
    t.routed = true;
    const auto runs = executions.select(-1, l);  // (B, T)
    const auto n = runs.sum().item<std::int64_t>();
    t.decision = runs.gt(0);
    t.gate = gate.select(-1, l).contiguous();
    t.routed_fraction = static_cast<double>(n) / tokens_total;
    t.tokens_processed = {{"attn", n}, {"mlp", n}};
    const double nd = static_cast<double>(n);
    t.flops = qkv_flops(nd, shape) + attention_core_flops(pairs_cpu[l].item<double>(), shape) +
              out_proj_flops(nd, shape) + mlp_flops(nd, shape) + router_flops / static_cast<double>(L);
    t.dense_flops = dense_layer_flops(static_cast<double>(B), static_cast<double>(T), shape);
    t.stats["repeat_fraction"] = runs.ge(2).to(torch::kDouble).mean().item<double>();
    out.trace.push_back(std::move(t));
  }
  const auto share = [&](const torch::Tensor& mask) { return mask.to(torch::kDouble).mean().item<double>(); };
  out.stats["mean_depth"] = depth.to(torch::kDouble).mean().item<double>();
  out.stats["expected_depth"] = expected_depth.detach().mean().item<double>();
  out.stats["max_depth_share"] = share(depth.eq(S));
  out.stats["exit_at_0"] = share(depth.eq(0));
  out.stats["reuse_share"] = share(std::get<0>(executions.max(-1)).ge(2));
  out.stats["distinct_layers"] = executions.gt(0).sum(-1).to(torch::kDouble).mean().item<double>();
  out.token_data["depth"] = depth;
  out.token_data["path"] = path_cpu;
}

}  // namespace

/// One forward's per-token routing state: what its trace reads (RadialTotals), which tokens are still routing (no
/// exit yet) and prod_{j <= s} (1 - q_j) of each.
struct RadialNetwork::Pass {
  RadialTotals totals;
  torch::Tensor alive, survive;
  bool trace = false, straight_through = false;
  torch::Tensor flat_offset;  // (B, 1): row b starts at b T in the flat token index
};

torch::Tensor RadialNetwork::forced_choices(std::int64_t B, std::int64_t T, const torch::TensorOptions& options) const {
  if (!forced_path_.defined()) return {};
  const auto S = steps_, L = options_.n_layer();
  auto forced = forced_path_.to(options);
  if (forced.dim() == 1 && forced.size(0) == S) forced = forced.view({1, 1, S}).expand({B, T, S});
  if (forced.sizes() != torch::IntArrayRef({B, T, S}))
    throw std::invalid_argument("radial forced path: expected (S) or (B, T, S) with S = " + std::to_string(S));
  return forced.masked_fill(forced.lt(0), L);
}

torch::Tensor RadialNetwork::route(const torch::Tensor& h, std::int64_t s, const torch::Tensor& forced, Pass& pass,
                                   torch::Tensor& weight) {
  ROUTELAB_PART("router");
  const auto L = options_.n_layer();
  auto z = step_logits(h, s);  // (B, T, L + 1) float
  ++pass.totals.router_steps;
  if (s < radial_.min_depth())
    z = z.index_fill(-1, torch::full({1}, L, pass.totals.path.options()), -std::numeric_limits<float>::infinity());
  const auto p = torch::softmax(z, -1);  // the router's probabilities (what the Gumbel-max sample draws from)
  torch::Tensor noise;
  if (pass.straight_through && radial_.gumbel_noise() && !forced.defined())
    noise = -torch::empty_like(z).exponential_().log();  // Gumbel(0, 1), drawn for every token at every step
  torch::Tensor choice =
      forced.defined() ? forced.select(2, s) : (noise.defined() ? z.detach() + noise : z.detach()).argmax(-1);
  choice = choice.masked_fill(pass.alive.logical_not(), L);  // an exited token stays out
  const auto running = choice.lt(L);                         // (B, T): runs a layer at this step

  // Expected depth along the path taken: E = sum_s [alive at s] prod_{j <= s} (1 - q_j) with q_j the exit
  // probability at step j; it equals the realised depth when the router is one-hot.
  const auto alive_f = pass.alive.to(torch::kFloat);
  pass.survive = torch::where(pass.alive, pass.survive * (1.0 - p.select(-1, L)), pass.survive);
  pass.totals.expected_depth = pass.totals.expected_depth + alive_f * pass.survive;
  if (pass.trace) {
    pass.totals.gate_sum = pass.totals.gate_sum + alive_f.unsqueeze(-1) * p.narrow(-1, 0, L).detach();
    pass.totals.evaluations = pass.totals.evaluations + alive_f;
  }
  // Straight-through Gumbel-softmax: the forward uses the hard choice (weight exactly 1), the backward the
  // gradient of the chosen option's softmax((z + g) / tau). Only the chosen layer is computed, so the other
  // options receive gradient only through the softmax normalisation; the exit's update is zero.
  weight = torch::Tensor();
  if (pass.straight_through) {
    const auto soft = torch::softmax((noise.defined() ? z + noise : z) / radial_.temperature(), -1);
    const auto chosen = soft.gather(-1, choice.unsqueeze(-1)).squeeze(-1);
    weight = 1.0 + (chosen - chosen.detach());  // (B, T)
  }
  pass.totals.path.select(2, s).copy_(choice.masked_fill(running.logical_not(), -1));
  pass.alive = running;
  return choice;
}

bool RadialNetwork::execute(torch::Tensor& h, const torch::Tensor& positions, const torch::Tensor& choice,
                            const torch::Tensor& weight, std::int64_t s, UnifiedKVStore& store, Pass& pass,
                            RadialRecord* record) {
  ROUTELAB_PART("routing");  // the rows of each layer, gathered and put back (the layers' own parts nest inside)
  const auto B = h.size(0), T = h.size(1), C = options_.n_embd(), L = options_.n_layer();
  const auto H = options_.n_head(), hd = C / H;
  const auto Hkv = (options_.n_kv_head() > 0 ? options_.n_kv_head() : H);
  const auto rows = compact(pass.alive);  // the tokens that run at this step, (B, K) in causal order; one host sync
  if (rows.total == 0) return false;
  const auto K = rows.max_len, N = B * K;
  const auto x_rows = gather_rows(h, rows).reshape({N, C});          // (N, C)
  const auto pos_rows = compacted_positions(positions, rows);        // (B, K)
  const auto pos_flat = pos_rows.reshape({N});
  const auto choice_flat = choice.gather(1, rows.index).masked_fill(rows.valid.logical_not(), L).reshape({N});
  // Rows sorted by layer: layer l owns order[offset_l, offset_l + count_l). One host sync for the counts.
  const auto order = std::get<1>(choice_flat.sort(/*stable=*/true, 0, false));  // (N)
  const auto counts_cpu = to_host(torch::bincount(choice_flat, {}, L + 1));
  const auto* counts = counts_cpu.data_ptr<std::int64_t>();
  std::vector<torch::Tensor> index(static_cast<std::size_t>(L)), x_in(static_cast<std::size_t>(L));
  std::vector<torch::Tensor> q_parts, k_parts, v_parts;
  std::int64_t offset = 0;
  for (std::int64_t l = 0; l < L; ++l) {
    const auto n = counts[l];
    if (n == 0) continue;
    const auto lu = static_cast<std::size_t>(l);
    index[lu] = order.narrow(0, offset, n);
    offset += n;
    x_in[lu] = x_rows.index_select(0, index[lu]);  // (n, C)
    auto& layer = layers[lu];
    // Positions by token: relative distances are right whatever step an entry was written at.
    const auto qkv = layer->attn->project(layer->norm1->into_matmul(x_in[lu]).unsqueeze(0),
                                          pos_flat.index_select(0, index[lu]).unsqueeze(0));
    q_parts.push_back(qkv.q.squeeze(0).transpose(0, 1).reshape({n, H * hd}));   // (n, H hd)
    k_parts.push_back(qkv.k.squeeze(0).transpose(0, 1).reshape({n, Hkv * hd}));
    v_parts.push_back(qkv.v.squeeze(0).transpose(0, 1).reshape({n, Hkv * hd}));
  }
  const auto run_index = order.narrow(0, 0, rows.total);  // the rows of the parts, in their order
  const auto place = [&](const std::vector<torch::Tensor>& parts, std::int64_t heads) {
    const auto cat = torch::cat(parts, 0);
    return torch::zeros({N, heads * hd}, cat.options())
        .index_copy(0, run_index, cat)
        .view({B, K, heads, hd})
        .transpose(1, 2);
  };
  const auto q = place(q_parts, H);  // (B, H, K, hd)
  {
    ROUTELAB_PART("attention");
    store.append(place(k_parts, Hkv), place(v_parts, Hkv), pos_rows, s, rows.valid);
  }
  double step_pairs = 0;  // (query, entry) pairs the kernel scored at this step
  torch::Tensor heads;    // (B, H, K, hd)
  if (staircase_attention_runs(q, store.keys, store.values, options_.dropout(), is_training())) {
    // The store holds no later step's entry yet: a query sees every valid entry up to its own position.
    heads = unified_attention_to_position(q, store, pos_rows, rows.lengths, &step_pairs);
  } else {
    torch::Tensor visible;  // (B, K, N_store)
    {
      ROUTELAB_PART("attention");
      visible = store.visible(pos_rows, torch::full({B, K}, s, pass.totals.path.options()))
                    .logical_and(rows.valid.unsqueeze(2));
    }
    heads = unified_attention(q, store, visible, options_.dropout(), is_training(), rows.lengths, &step_pairs);
  }
  const auto heads_rows = heads.transpose(1, 2).reshape({N, C});
  // Every running query is scored against the whole store, the entries it may not see masked afterwards. Where
  // the kernel also scores the padding rows (the batched path off the CPU kernel), their pairs go to the layers
  // that ran at this step, in proportion to their rows (padding rows fall in the unpriced last slot).
  if (pass.trace)
    pass.totals.pairs.index_add_(0, choice_flat,
                          torch::full({N}, step_pairs / static_cast<double>(rows.total), pass.totals.pairs.options()));

  const auto weight_rows = weight.defined() ? weight.gather(1, rows.index).reshape({N}) : torch::Tensor();
  const bool probing = residual_probe_active();
  const auto token_flat = probing ? (pass.flat_offset + rows.index).reshape({N}) : torch::Tensor();
  std::vector<torch::Tensor> out_parts;
  for (std::int64_t l = 0; l < L; ++l) {
    const auto lu = static_cast<std::size_t>(l);
    if (!index[lu].defined()) continue;
    auto& layer = layers[lu];
    const auto& x = x_in[lu];
    auto a = layer->attn->output_rows(heads_rows.index_select(0, index[lu]));  // (n, C)
    const auto w = weight_rows.defined() ? weight_rows.index_select(0, index[lu]).unsqueeze(-1) : torch::Tensor();
    if (w.defined()) a = a * w;
    const auto [x1, n2] = layer->norm2->add_into_matmul(x, a);  // x1 = x + a and its norm
    auto m = layer->mlp(n2);
    if (w.defined()) m = m * w;
    out_parts.push_back(x1 + m);
    if (probing) {
      const auto token_index = token_flat.index_select(0, index[lu]);
      probe_rows(static_cast<int>(l), "attn", static_cast<int>(s), x, a, token_index, B, T);
      probe_rows(static_cast<int>(l), "mlp", static_cast<int>(s), x1, m, token_index, B, T);
    }
  }
  const auto new_rows = x_rows.index_copy(0, run_index, torch::cat(out_parts, 0).to(x_rows.scalar_type()));
  h = scatter_rows(h, rows, new_rows.view({B, K, C}));  // (B, T, C)
  if (record) record->steps.push_back({choice, rows.index, rows.valid, q, heads, store.size(), h});
  return true;
}

ModelOutput RadialNetwork::run(const torch::Tensor& tokens, bool trace, RadialRecord* record) {
  torch::Tensor positions;
  // The first routing step reads the token embedding (the paper's t_0: every token enters at the router).
  auto h = embed(tokens, positions);  // (B, T, C)
  const auto B = tokens.size(0), T = tokens.size(1);
  const auto L = options_.n_layer(), S = steps_;
  const auto long_options = torch::TensorOptions().dtype(torch::kLong).device(tokens.device());
  const auto float_options = torch::TensorOptions().dtype(torch::kFloat).device(tokens.device());
  const auto forced = forced_choices(B, T, long_options);  // (B, T, S) int64 in [0, L], or undefined

  Pass pass;
  pass.trace = trace;
  pass.straight_through = is_training();
  pass.alive = torch::ones({B, T}, long_options.dtype(torch::kBool));
  pass.totals.path = torch::full({B, T, S}, -1, long_options);
  pass.survive = torch::ones({B, T}, float_options);
  pass.totals.expected_depth = torch::zeros({B, T}, float_options);
  pass.flat_offset = torch::arange(B, long_options).unsqueeze(1) * T;
  if (trace) {
    pass.totals.gate_sum = torch::zeros({B, T, L}, float_options);
    pass.totals.evaluations = torch::zeros({B, T}, float_options);
    pass.totals.pairs = torch::zeros({L + 1}, float_options.dtype(torch::kDouble));
  }
  UnifiedKVStore store;
  for (std::int64_t s = 0; s < S; ++s) {
    torch::Tensor weight;
    const auto choice = route(h, s, forced, pass, weight);
    if (!execute(h, positions, choice, weight, s, store, pass, record)) {
      // Every token has exited: the remaining steps leave the stream as it is.
      for (auto rest = s; rest < S; ++rest) record_layer_state(h);
      break;
    }
    record_layer_state(h);
  }
  if (record) record->store = store;

  ModelOutput out;
  out.logits = head(h);
  out.aux_loss = depth_weight() * pass.totals.expected_depth.mean();
  if (!trace) return out;

  write_radial_trace(out, pass.totals, options_, S, router->fc1->options.out_features());
  return out;
}

std::unique_ptr<DecodeState> RadialNetwork::begin_decode(std::int64_t batch) {
  auto state = new_decode_state(batch, /*layer_caches=*/false);
  const auto H = options_.n_head(), hd = options_.n_embd() / H;
  const auto Hkv = options_.n_kv_head() > 0 ? options_.n_kv_head() : H;
  state->add_cache(KVCache("unified", -1, batch, Hkv, hd, /*per_token=*/steps_));
  return state;
}

torch::Tensor RadialNetwork::decode(DecodeState& state, const torch::Tensor& tokens, DecodeTrace* trace) {
  torch::NoGradGuard no_grad;
  torch::Tensor positions;
  auto h = embed_decode(tokens, state, positions);  // (B, n, C)
  const auto B = tokens.size(0), n = tokens.size(1);
  const auto C = options_.n_embd(), L = options_.n_layer(), S = steps_;
  const auto long_options = torch::TensorOptions().dtype(torch::kLong).device(tokens.device());
  const auto exit_column = torch::full({1}, L, long_options);
  torch::Tensor forced;  // (S)
  if (forced_path_.defined()) {
    if (forced_path_.dim() != 1 || forced_path_.size(0) != S)
      throw ConfigError("radial decode: a forced path must be the (S) form with S = " + std::to_string(S));
    forced = forced_path_.to(long_options);
    forced = forced.masked_fill(forced.lt(0), L);
  }
  auto& store = state.cache(0);
  auto alive = torch::ones({B, n}, long_options.dtype(torch::kBool));
  auto path = torch::full({B, n, S}, -1, long_options);
  torch::Tensor gate_sum, evaluations;
  if (trace) {
    gate_sum = torch::zeros({B, n, L}, long_options.dtype(torch::kFloat));
    evaluations = torch::zeros({B, n}, long_options.dtype(torch::kFloat));
  }
  for (std::int64_t s = 0; s < S; ++s) {
    auto z = step_logits(h, s);  // (B, n, L + 1)
    if (s < radial_.min_depth()) z = z.index_fill(-1, exit_column, -std::numeric_limits<float>::infinity());
    auto choice = forced.defined() ? forced[s].expand({B, n}).clone() : z.argmax(-1);  // (B, n)
    choice = choice.masked_fill(alive.logical_not(), L);
    const auto running = choice.lt(L);
    if (trace) {
      const auto alive_f = alive.to(torch::kFloat);
      gate_sum = gate_sum + alive_f.unsqueeze(-1) * torch::softmax(z, -1).narrow(-1, 0, L);
      evaluations = evaluations + alive_f;
    }
    path.select(2, s).copy_(choice.masked_fill(running.logical_not(), -1));
    alive = running;
    // The layers chosen at this step (one host sync); each projects the rows that chose it.
    const auto used_cpu = to_host(std::get<0>(torch::_unique(choice.masked_select(running))));
    if (used_cpu.numel() == 0) break;
    std::vector<std::int64_t> used(used_cpu.data_ptr<std::int64_t>(), used_cpu.data_ptr<std::int64_t>() + used_cpu.numel());
    torch::Tensor q, k, v;  // (B, H, n, hd), (B, Hkv, n, hd)
    std::vector<torch::Tensor> masks;
    for (const auto l : used) {
      auto& layer = layers[static_cast<std::size_t>(l)];
      const auto mask = choice.eq(l);  // (B, n)
      masks.push_back(mask);
      const auto qkv = layer->attn->project(layer->norm1->into_matmul(h), positions);
      const auto m4 = mask.view({B, 1, n, 1});
      q = q.defined() ? torch::where(m4, qkv.q, q) : qkv.q;
      k = k.defined() ? torch::where(m4, qkv.k, k) : qkv.k;
      v = v.defined() ? torch::where(m4, qkv.v, v) : qkv.v;
    }
    store.append(k, v, positions, running, s);  // one entry per running (token, step)
    const auto heads = store.attend(q, positions, torch::full({B, n}, s, long_options));  // (B, H, n, hd)
    const auto heads_rows = heads.transpose(1, 2).reshape({B, n, C});
    auto next = h;
    for (std::size_t u = 0; u < used.size(); ++u) {
      auto& layer = layers[static_cast<std::size_t>(used[u])];
      const auto [x1, n2] = layer->norm2->add_into_matmul(h, layer->attn->output_rows(heads_rows));
      next = torch::where(masks[u].unsqueeze(-1), x1 + layer->mlp(n2), next);
    }
    h = next;
  }
  if (trace) {
    const auto executions = torch::one_hot(path + 1, L + 1).narrow(-1, 1, L).sum(2);  // (B, n, L)
    const auto gate = gate_sum / evaluations.unsqueeze(-1);
    for (std::int64_t l = 0; l < L; ++l) {
      LayerTrace t;
      t.layer = static_cast<int>(l);
      t.kind = "radial";
      t.routed = true;
      const auto runs = executions.select(-1, l);
      const auto count = runs.sum().item<std::int64_t>();
      t.decision = runs.gt(0);
      t.gate = gate.select(-1, l);
      t.routed_fraction = static_cast<double>(count) / static_cast<double>(B * n);
      t.tokens_processed = {{"attn", count}, {"mlp", count}};
      trace->layers.push_back(std::move(t));
    }
    trace->token_data["depth"] = path.ge(0).sum(-1);
  }
  state.advance(n);
  return head(h);
}

double RadialNetwork::depth_weight() const {
  // The ramp lets the layers learn updates worth routing to before the depth penalty acts: with the full
  // coefficient from step 0, at the CPU scale the router moved to the earliest allowed exit within ~30 steps.
  const double warmup = radial_.depth_warmup();
  const double ramp = warmup > 0 ? std::clamp(progress_ / warmup, 0.0, 1.0) : 1.0;
  return radial_.depth_coeff() * ramp;
}

std::string RadialNetwork::describe() const {
  std::ostringstream out;
  out << LanguageModel::describe() << ", " << options_.n_layer() << " routed layers, max depth " << steps_
      << ", min depth " << radial_.min_depth();
  return out.str();
}

const OptionTable<RadialOptions>& radial_options_table() {
  using T = OptionType;
  static const auto table = [] {
    OptionTable<RadialOptions> t;
    t.value(ROUTELAB_OPTION(max_depth), T::Int,
            "routing steps S: a token runs at most S layers, then the exit is forced (0: n_layer; above n_layer a "
            "token must reuse layers to use every step)",
            0, 1024)
        .value(ROUTELAB_OPTION(min_depth), T::Int,
               "steps during which the exit is not offered, so every token runs at least this many layers (at most the "
               "maximum depth)",
               0, 1024)
        .value(ROUTELAB_OPTION(router_hidden), T::Int, "hidden width of the router MLP (0: n_embd / 2)", 0, 1 << 20)
        .value(ROUTELAB_OPTION(temperature), T::Float,
               "Gumbel-softmax temperature of the straight-through gradient in training (the forward takes the hard "
               "argmax)",
               1e-3, 100.0)
        .training_only()
        .value(ROUTELAB_OPTION(gumbel_noise), T::Bool,
               "sample the route with Gumbel noise in training (false: the noise-free argmax, as at inference)")
        .training_only()
        .value(ROUTELAB_OPTION(depth_coeff), T::Float,
               "weight of the mean expected depth (layers per token, from the router's exit probabilities along the "
               "path taken) in the loss",
               0.0, 100.0)
        .training_only()
        .value(ROUTELAB_OPTION(depth_warmup), T::Float,
               "fraction of training over which depth_coeff ramps linearly from 0 (0: the full coefficient from the "
               "first step)",
               0.0, 1.0)
        .training_only()
        .read_when_nonzero("depth_coeff")
        .value(ROUTELAB_OPTION(exit_bias), T::Float,
               "initial bias of the router's exit logit (layer logits start at 0)", -100.0, 100.0)
        .training_only()
        .value(ROUTELAB_OPTION(sequential_prior), T::Float,
               "> 0: a learned bias per routing step and choice on the router's logits, starting with layer s "
               "preferred at step s (the exit after the last layer) by this many logits, so a distilled network "
               "starts on its teacher's path; 0: none (the router sees the hidden state only, as in the paper)",
               0.0, 100.0);
    return t;
  }();
  return table;
}

namespace {

void check_radial_options(const nlohmann::json& m, const std::string& path) {
  check_transformer_options(m, path);
  const auto n_layer = m.at("n_layer").get<std::int64_t>();
  const auto max_depth = m.at("max_depth").get<std::int64_t>();
  const auto steps = max_depth > 0 ? max_depth : n_layer;
  const auto min_depth = m.at("min_depth").get<std::int64_t>();
  if (min_depth > steps)
    throw ConfigError(path + ".min_depth: " + std::to_string(min_depth) + " exceeds the maximum depth " +
                      std::to_string(steps) + " (model.max_depth, 0 = n_layer)");
}

/// The FLOPs of the eval-mode forward (ArchitectureEntry::price_flops).
FlopsEstimate price_radial(const FlopsInput& in) {
  const auto t = flops_trunk(in);
  const auto s = layer_shape(t);
  const auto o = radial_options_table().read(in.model);
  const auto L = t.n_layer();
  const auto S = o.steps(L);
  std::vector<bool> routed(static_cast<std::size_t>(L), true);
  auto f = layer_fractions(in, routed, static_cast<double>(S) / static_cast<double>(L), 0.0, static_cast<double>(S));
  double depth = 0;
  for (const double v : f) depth += v;
  if (depth > static_cast<double>(S) + 1e-9)
    throw ConfigError("flops fractions: radial executions per token sum to " + std::to_string(depth) +
                      ", above the maximum depth " + std::to_string(S));
  FlopsBuilder b(in, s, in.vocab);
  const double d = static_cast<double>(s.d);
  const double hidden = static_cast<double>(o.router_hidden() > 0 ? o.router_hidden() : std::max<std::int64_t>(1, s.d / 2));
  // Step profile: every token runs floor(D) steps and a share frac(D) one more (the most even depths with mean D).
  // Step s attends its K_s running tokens over the store of all entries written so far (masked, not compacted).
  double store = 0, core_pairs = 0;
  int router_steps = 0;
  for (std::int64_t step = 0; step < S; ++step) {
    ++router_steps;  // the router runs on every row at each step until a step where no token runs
    const double k = b.T * std::clamp(depth - static_cast<double>(step), 0.0, 1.0);
    if (k <= 0) break;
    store += k;
    core_pairs += b.B * k * store;
  }
  const double router = router_steps * (linear_flops(b.N, d, hidden) + linear_flops(b.N, hidden, static_cast<double>(L + 1)));
  for (int i = 0; i < L; ++i) {
    auto& l = b.add(i, "radial", true, f[i], s);
    const double rows = f[i] * b.N;
    FlopsBuilder::part(l, "router", router / static_cast<double>(L));
    FlopsBuilder::block(l, rows, depth > 0 ? core_pairs * f[i] / depth : 0.0, s);
  }
  b.est.notes.push_back("unified KV store: step s attends its running tokens over every entry stored so far "
                        "(masked rectangle K_s x N_s, priced with the most even depths for mean depth sum(fractions)); "
                        "the attention of a step is shared over the layers in proportion to their executions");
  b.est.notes.push_back("the router runs on every token at every step until one where no token runs (split evenly "
                        "over the layers), as the forward executes it; LayerTrace prices the same work per step");
  return b.est;
}

}  // namespace

ArchitectureEntry radial_architecture() {
  ArchitectureEntry entry{
      "radial",
      "Radial Networks",
      "Radial Networks (Dotzel et al. 2024) §5",
      "L distinct pre-norm layers and a router that picks, token by token and step by step, the next layer to run "
      "(layers may be reused) or the exit, up to a maximum depth; every executed (token, step) writes its keys and "
      "values to one unified store that later steps and later tokens attend to. Straight-through Gumbel-softmax "
      "routing in training, argmax at inference, an expected-depth regulariser.",
      schema_of(transformer_options_table(), radial_options_table()),
      check_radial_options,
      [](const nlohmann::json& m, const ModelContext& ctx) -> std::shared_ptr<LanguageModel> {
        return std::make_shared<RadialNetwork>(transformer_options_from_json(m, ctx.vocab_size, ctx.context),
                                               radial_options_table().read(m));
      },
  };
  entry.read_back_options = [](const nlohmann::json& m) {
    return read_back(m, transformer_options_table(), radial_options_table());
  };
  // The unified store holds one entry per executed (token, step): a layer owns its executions per token.
  entry.kv_entries = kv_entries_of_routed_tokens;
  entry.price_flops = price_radial;
  entry.regulariser_option = "depth_coeff";
  entry.routed_fraction_meaning =
      "executions of each layer per token (sum = mean depth; default: max depth / n_layer)";
  entry.color = 5;
  // Post-training distillation (§5): the sequential model's embedding, layers (its blocks, in order, as the L
  // layers the router picks from), final norm and head; the router and its step bias are the Radial network's own.
  entry.adopt_teacher = [](LanguageModel& student, const LanguageModel& teacher) {
    const std::vector<std::string> own{"router.", "step_bias"};
    copy_matching_weights(student, teacher, {{"blocks.", "layers."}}, own);
    return own;
  };
  return entry;
}

}  // namespace routelab
