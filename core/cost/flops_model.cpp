// The FLOPs model: one pricing function per architecture, kept in one table keyed by arch id. Each function
// follows its model's eval-mode forward (core/models/<arch>.cpp) matrix product by matrix product, with the
// per-piece formulas of flops.h, and assumes the routed tokens of a layer are spread evenly over the sequences of
// the batch (exact for batch 1; with uneven sequences the compacted paths also pay for padding rows).
#include "core/cost/flops_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>

#include "core/config/options.h"
#include "core/cost/flops.h"
#include "core/models/blocks/routing.h"
#include "core/models/dense_transformer.h"
#include "core/models/drr.h"
#include "core/models/early_exit.h"
#include "core/models/mod.h"
#include "core/models/radial.h"
#include "core/models/registry.h"
#include "core/models/tsa.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

/// What every pricing function reads.
struct Input {
  std::string arch;
  nlohmann::json model;  ///< complete, checked model section
  FlopsQuery query;
  double V = 0;
};

/// Builds estimates layer by layer.
struct Builder {
  FlopsEstimate est;
  double B = 0, T = 0, N = 0;  // batch, sequence, tokens

  Builder(const Input& in, const LayerShape& s, double d_head_out) {
    est.arch = in.arch;
    est.seq = in.query.seq;
    est.batch = in.query.batch;
    B = static_cast<double>(in.query.batch);
    T = static_cast<double>(in.query.seq);
    N = B * T;
    est.head_flops = linear_flops(N, static_cast<double>(s.d), d_head_out);
  }
  LayerFlops& add(int layer, const std::string& kind, bool routed, double fraction, const LayerShape& s) {
    LayerFlops l;
    l.layer = layer;
    l.kind = kind;
    l.routed = routed;
    l.fraction = fraction;
    l.dense_flops = dense_layer_flops(B, T, s);
    est.layers.push_back(std::move(l));
    return est.layers.back();
  }
  void dense(int layer, const LayerShape& s) { block(add(layer, "dense", false, 1.0, s), N, B * T * T, s); }
  /// A pre-norm block over `rows` token rows whose attention spans `sum_sq` query-key pairs.
  static void block(LayerFlops& l, double rows, double sum_sq, const LayerShape& s) {
    part(l, "attn_qkv", qkv_flops(rows, s));
    part(l, "attn_core", attention_core_flops(sum_sq, s));
    part(l, "attn_out", out_proj_flops(rows, s));
    part(l, "mlp", mlp_flops(rows, s));
  }
  static void part(LayerFlops& l, const std::string& name, double flops) {
    if (flops == 0) return;
    for (auto& [k, v] : l.parts)
      if (k == name) {
        v += flops;
        l.flops += flops;
        return;
      }
    l.parts.emplace_back(name, flops);
    l.flops += flops;
  }
};

/// Per-layer fractions from the query: n_layer values, one value for all, or `fallback` for every routed layer.
std::vector<double> layer_fractions(const Input& in, const std::vector<bool>& routed, double fallback, double lo,
                                    double hi) {
  const auto L = routed.size();
  const auto& f = in.query.fractions;
  std::vector<double> out(L, 1.0);
  if (!f.empty() && f.size() != 1 && f.size() != L)
    throw ConfigError("flops fractions: " + std::to_string(f.size()) + " values for a " + std::to_string(L) +
                      "-layer " + in.arch + " model (give one for all layers or one per layer)");
  for (std::size_t i = 0; i < L; ++i) {
    if (!routed[i]) continue;
    const double v = f.empty() ? fallback : f.size() == 1 ? f[0] : f[i];
    if (!(v >= lo && v <= hi))
      throw ConfigError("flops fractions: layer " + std::to_string(i) + " fraction " + std::to_string(v) +
                        " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "] for " + in.arch);
    out[i] = v;
  }
  return out;
}

TransformerOptions trunk(const Input& in) {
  return transformer_options_from_json(in.model, static_cast<std::int64_t>(in.V), in.query.seq);
}

double vocab_out(const Input& in) { return in.V; }

// --- dense -------------------------------------------------------------------------------------------------------

FlopsEstimate price_dense(const Input& in) {
  const auto t = trunk(in);
  const auto s = layer_shape(t);
  Builder b(in, s, vocab_out(in));
  for (int i = 0; i < t.n_layer(); ++i) b.dense(i, s);
  return b.est;
}

// --- DTRNet ------------------------------------------------------------------------------------------------------

FlopsEstimate price_dtrnet(const Input& in) {
  const auto t = trunk(in);
  const auto s = layer_shape(t);
  const auto& m = in.model;
  const auto routed = parse_layer_pattern(m.at("routed_layers").get<std::string>(), t.n_layer(), "model.routed_layers");
  const auto routing = m.at("routing").get<std::string>();
  const bool masked = m.at("attention") == "masked", vo = m.at("bypass") != "none";
  const double fallback = routing == "expert" ? m.at("capacity").get<double>() : routing == "skip" ? 0.0 : 1.0;
  auto f = layer_fractions(in, routed, fallback, 0.0, 1.0);
  Builder b(in, s, vocab_out(in));
  const double d = static_cast<double>(s.d), half = static_cast<double>(s.d / 2);
  for (int i = 0; i < t.n_layer(); ++i) {
    if (!routed[i]) {
      b.dense(i, s);
      continue;
    }
    if (routing == "skip") f[i] = 0.0;  // the skip variant's routers send every token to the bypass
    auto& l = b.add(i, "dtrnet", true, f[i], s);
    const double k = f[i] * b.T, routed_rows = b.B * k;
    Builder::part(l, "router", linear_flops(b.N, d, half) + linear_flops(b.N, half, 2.0));
    if (routing == "expert") Builder::part(l, "predictor", linear_flops(b.N, d, 1.0));
    if (masked) {  // the oracle projects every token and computes every (query, key) pair, then masks
      Builder::part(l, "attn_qkv", qkv_flops(b.N, s));
      Builder::part(l, "attn_core", attention_core_flops(b.B * b.T * b.T, s));
      Builder::part(l, "attn_out", out_proj_flops(b.N, s));
    } else {
      Builder::part(l, "attn_qk", q_k_flops(routed_rows, s));
      Builder::part(l, "attn_core", attention_core_flops(b.B * k * k, s));  // compacted: O(k^2)
      if (vo) {
        Builder::part(l, "attn_v", v_flops(b.N, s));      // W_V of every token (bypass and attention share it)
        Builder::part(l, "attn_out", out_proj_flops(b.N, s));  // one W_O over every token
      } else {
        Builder::part(l, "attn_v", v_flops(routed_rows, s));
        Builder::part(l, "attn_out", out_proj_flops(routed_rows, s));
      }
    }
    Builder::part(l, "mlp", mlp_flops(b.N, s));
  }
  if (masked)
    b.est.notes.push_back("attention 'masked' (the oracle): every token is projected and every pair scored, O(T^2) "
                          "whatever the routed fraction");
  else
    b.est.notes.push_back("compacted attention: the routed tokens of a sequence are gathered and attend among "
                          "themselves, O(k^2) for k routed tokens");
  if (vo && !masked) b.est.notes.push_back("bypass W_O W_V: V and W_O run over every token (shared with attention)");
  if (routing == "skip") b.est.notes.push_back("routing 'skip': fractions forced to 0 (every token bypasses)");
  return b.est;
}

// --- Mixture-of-Depths -------------------------------------------------------------------------------------------

FlopsEstimate price_mod(const Input& in) {
  const auto t = trunk(in);
  const auto s = layer_shape(t);
  const auto o = mod_options_from_json(in.model);
  const auto routed = parse_layer_pattern(o.routed_layers(), t.n_layer(), "model.routed_layers");
  const auto f = layer_fractions(in, routed, o.capacity(), 0.0, 1.0);
  Builder b(in, s, vocab_out(in));
  const double d = static_cast<double>(s.d);
  for (int i = 0; i < t.n_layer(); ++i) {
    if (!routed[i]) {
      b.dense(i, s);
      continue;
    }
    auto& l = b.add(i, "mod", true, f[i], s);
    const double k = f[i] * b.T, rows = b.B * k;
    Builder::part(l, "router", linear_flops(b.N, d, 1.0));
    Builder::part(l, "predictor", linear_flops(b.N, d, 1.0));
    Builder::block(l, rows, b.B * k * k, s);
  }
  b.est.notes.push_back("routed blocks run on the compacted selected tokens (attention O(k^2)); the causal "
                        "predictor decides at inference, the router only scales");
  return b.est;
}

// --- D-LLM -------------------------------------------------------------------------------------------------------

FlopsEstimate price_dllm(const Input& in) {
  const auto t = trunk(in);
  const auto s = layer_shape(t);
  const auto& m = in.model;
  const auto routed = parse_layer_pattern(m.at("routed_layers").get<std::string>(), t.n_layer(), "model.routed_layers");
  const auto f = layer_fractions(in, routed, m.at("target").get<double>(), 0.0, 1.0);
  const double hidden = static_cast<double>(m.at("router_hidden").get<std::int64_t>());
  Builder b(in, s, vocab_out(in));
  const double d = static_cast<double>(s.d);
  for (int i = 0; i < t.n_layer(); ++i) {
    if (!routed[i]) {
      b.dense(i, s);
      continue;
    }
    auto& l = b.add(i, "dllm", true, f[i], s);
    const double k = f[i] * b.T, rows = b.B * k;
    Builder::part(l, "router", linear_flops(b.N, d, hidden) + linear_flops(b.N, hidden, 2.0));
    Builder::block(l, rows, b.B * k * k, s);
  }
  b.est.notes.push_back("inference form: executed tokens run the block compacted (skipped keys evicted, O(k^2)); "
                        "the training form runs every token");
  return b.est;
}

// --- TSA ---------------------------------------------------------------------------------------------------------

FlopsEstimate price_tsa(const Input& in) {
  const auto t = trunk(in);
  const auto s = layer_shape(t);
  const auto o = tsa_options_from_json(in.model);
  const bool sparse = o.inference() == TsaInference::Sparse;
  std::vector<bool> routed(static_cast<std::size_t>(t.n_layer()), true);
  routed[0] = false;  // the stem
  const auto f = layer_fractions(in, routed, 1.0, 0.0, 1.0);
  Builder b(in, s, vocab_out(in));
  const double d = static_cast<double>(s.d), hidden = static_cast<double>(tsa_router_hidden(s.d));
  b.dense(0, s);
  for (int i = 1; i < t.n_layer(); ++i) {
    auto& l = b.add(i, "tsa", true, sparse ? f[i] : 1.0, s);
    Builder::part(l, "router", linear_flops(b.N, d, hidden) + linear_flops(b.N, hidden, 1.0));
    Builder::part(l, "attn_qkv", qkv_flops(b.N, s));
    Builder::part(l, "attn_core", attention_core_flops(b.B * b.T * b.T, s));
    Builder::part(l, "attn_out", out_proj_flops(b.N, s));
    Builder::part(l, "mlp", mlp_flops(sparse ? f[i] * b.N : b.N, s));
  }
  b.est.notes.push_back(sparse ? "sparse inference: attention stays dense (O(T^2)); only the FFN skips halted tokens"
                               : "soft inference: every token runs every block (fractions ignored); "
                                 "set inference=sparse to price skipping");
  return b.est;
}

// --- early exit --------------------------------------------------------------------------------------------------

FlopsEstimate price_early_exit(const Input& in) {
  const auto t = trunk(in);
  const auto s = layer_shape(t);
  const auto o = early_exit_options_from_json(in.model);
  const bool exiting = o.exit_threshold() < 1.0;
  std::vector<bool> routed(static_cast<std::size_t>(t.n_layer()), true);
  routed[0] = false;
  const auto f = layer_fractions(in, routed, 1.0, 0.0, 1.0);
  Builder b(in, s, vocab_out(in));
  const double d = static_cast<double>(s.d);
  for (int i = 0; i < t.n_layer(); ++i) {
    auto& l = b.add(i, i == 0 ? "dense" : "early-exit", i > 0, f[i], s);
    // State copying: the block runs over every token (exited ones keep their state afterwards).
    Builder::part(l, "attn_qkv", qkv_flops(b.N, s));
    Builder::part(l, "attn_core", attention_core_flops(b.B * b.T * b.T, s));
    Builder::part(l, "attn_out", out_proj_flops(b.N, s));
    Builder::part(l, "mlp", mlp_flops(b.N, s));
    if (exiting && i + 1 < t.n_layer()) Builder::part(l, "exit_head", linear_flops(b.N, d, in.V));
  }
  b.est.notes.push_back("the eval forward runs every block over every token (exited tokens' states are copied, "
                        "not skipped) and, when exiting (exit_threshold < 1), every intermediate head over every "
                        "token: the active fractions change no executed FLOPs. LayerTrace::flops instead prices "
                        "what an implementation skipping exited tokens would need (early_exit_block_flops)");
  return b.est;
}

// --- Radial Networks ---------------------------------------------------------------------------------------------

FlopsEstimate price_radial(const Input& in) {
  const auto t = trunk(in);
  const auto s = layer_shape(t);
  const auto o = radial_options_from_json(in.model);
  const auto L = t.n_layer();
  const auto S = o.steps(L);
  std::vector<bool> routed(static_cast<std::size_t>(L), true);
  auto f = layer_fractions(in, routed, static_cast<double>(S) / static_cast<double>(L), 0.0, static_cast<double>(S));
  double depth = 0;
  for (const double v : f) depth += v;
  if (depth > static_cast<double>(S) + 1e-9)
    throw ConfigError("flops fractions: radial executions per token sum to " + std::to_string(depth) +
                      ", above the maximum depth " + std::to_string(S));
  Builder b(in, s, vocab_out(in));
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
    Builder::part(l, "router", router / static_cast<double>(L));
    Builder::block(l, rows, depth > 0 ? core_pairs * f[i] / depth : 0.0, s);
  }
  b.est.notes.push_back("unified KV store: step s attends its running tokens over every entry stored so far "
                        "(masked rectangle K_s x N_s, priced with the most even depths for mean depth sum(fractions)); "
                        "the attention of a step is shared over the layers in proportion to their executions");
  b.est.notes.push_back("the router runs on every token at every step until one where no token runs (split evenly "
                        "over the layers), as the forward executes it; LayerTrace prices the same work per step");
  return b.est;
}

// --- DRR ---------------------------------------------------------------------------------------------------------

FlopsEstimate price_drr(const Input& in) {
  const auto t = drr_transformer_options_from_json(in.model, static_cast<std::int64_t>(in.V), in.query.seq);
  const auto s = layer_shape(t);
  const auto o = drr_options_from_json(in.model);
  Builder b(in, s, vocab_out(in));
  const double d = static_cast<double>(s.d), h = d * static_cast<double>(o.router_hidden_mult());
  const bool causal = o.memory() == DrrMemory::Causal;
  const auto summary = static_cast<double>(drr_summary_tokens(o, in.query.seq, t.max_seq_len()));
  for (int i = 0; i < t.n_layer(); ++i) {
    auto& l = b.add(i, "drr", true, 1.0, s);
    const double window = static_cast<double>(std::min<std::int64_t>(o.short_window(), i));
    const double blocks = static_cast<double>(i / o.block_size());
    const bool pools = (i + 1) % o.block_size() == 0 && summary > 0;
    Builder::part(l, "router", linear_flops(b.N, d, h) + linear_flops(b.N, h, 3.0));
    Builder::part(l, "memory_short", depth_memory_attention_flops(b.B, b.T, window * b.T, s.d));
    Builder::part(l, "memory_long", depth_memory_attention_flops(b.B, b.T, blocks * summary, s.d));
    Builder::part(l, "attn_qkv", qkv_flops(b.N, s));
    Builder::part(l, "attn_core", attention_core_flops(b.B * b.T * b.T, s));
    Builder::part(l, "attn_out", out_proj_flops(b.N, s));
    Builder::part(l, "mlp", mlp_flops(b.N, s));
    if (pools) {
      // Projection, then (causal form) the chunk average as a (S', T) x (T, C) product per sequence.
      Builder::part(l, "summary_pool", linear_flops(b.N, d, d) + (causal ? linear_flops(b.B * summary, b.T, d) : 0.0));
    }
  }
  b.est.notes.push_back("every token computes all three paths (identity, short- and long-term memory): no FLOPs "
                        "depend on the gates; fractions are ignored");
  if (causal)
    b.est.notes.push_back("the causal summary pool averages through a matrix product (2 S' T d per sequence)");
  return b.est;
}

struct ArchFlops {
  const char* id;
  const char* meaning;
  std::function<FlopsEstimate(const Input&)> price;
};

const std::vector<ArchFlops>& table() {
  static const std::vector<ArchFlops> entries = {
      {"dense", "no routing: fractions are ignored", price_dense},
      {"dllm", "share of tokens that execute each routed block (default: model.target)", price_dllm},
      {"drr", "no FLOPs depend on the gates: fractions are ignored", price_drr},
      {"dtrnet", "share of tokens routed to attention in each routed layer (default: 1; expert routing: "
                 "model.capacity; skip: 0)", price_dtrnet},
      {"early-exit", "share of tokens still active (executed FLOPs do not depend on it)", price_early_exit},
      {"mod", "share of tokens selected in each routed block (default: model.capacity)", price_mod},
      {"radial", "executions of each layer per token (sum = mean depth; default: max depth / n_layer)", price_radial},
      {"tsa", "share of tokens running the FFN of blocks 1..L-1 in sparse inference (default: 1)", price_tsa},
  };
  return entries;
}

const ArchFlops& entry(const std::string& id) {
  for (const auto& e : table())
    if (id == e.id) return e;
  std::string known;
  for (const auto& e : table()) known += (known.empty() ? "" : ", ") + std::string(e.id);
  throw ConfigError("flops model: unsupported architecture '" + id + "' (known: " + known + ")");
}

}  // namespace

double FlopsEstimate::layer_flops() const {
  double f = 0;
  for (const auto& l : layers) f += l.flops;
  return f;
}

double FlopsEstimate::dense_layer_flops() const {
  double f = 0;
  for (const auto& l : layers) f += l.dense_flops;
  return f;
}

double FlopsEstimate::layer_ratio() const {
  const double d = dense_layer_flops();
  return d > 0 ? layer_flops() / d : 1.0;
}

double FlopsEstimate::total_ratio() const {
  const double d = dense_total_flops();
  return d > 0 ? total_flops() / d : 1.0;
}

std::vector<std::pair<std::string, double>> FlopsEstimate::parts_total() const {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& l : layers)
    for (const auto& [name, f] : l.parts) {
      auto it = std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == name; });
      if (it == out.end())
        out.emplace_back(name, f);
      else
        it->second += f;
    }
  return out;
}

nlohmann::json FlopsEstimate::to_json() const {
  nlohmann::json layers_json = nlohmann::json::array();
  for (const auto& l : layers) {
    nlohmann::json parts = nlohmann::json::object();
    for (const auto& [k, v] : l.parts) parts[k] = v;
    layers_json.push_back({{"layer", l.layer}, {"kind", l.kind}, {"routed", l.routed}, {"fraction", l.fraction},
                           {"flops", l.flops}, {"dense_flops", l.dense_flops}, {"parts", parts}});
  }
  return {{"arch", arch},
          {"seq", seq},
          {"batch", batch},
          {"convention", flops_convention()},
          {"layer_flops", layer_flops()},
          {"dense_layer_flops", dense_layer_flops()},
          {"embedding_flops", embedding_flops},
          {"head_flops", head_flops},
          {"total_flops", total_flops()},
          {"dense_total_flops", dense_total_flops()},
          {"layer_ratio", layer_ratio()},
          {"total_ratio", total_ratio()},
          {"layers", layers_json},
          {"notes", notes}};
}

std::string flops_convention() {
  return "forward only; 2 FLOPs per multiply-add of every matrix product the eval-mode forward executes; attention "
         "scores and weighted values over the full square of the tokens that attend (the causal half is counted, "
         "as dense kernels compute it); norms, softmax, activations, gathers and scatters are not counted; embedding "
         "lookups are 0";
}

FlopsEstimate estimate_flops(const nlohmann::json& model, std::int64_t vocab_size, const FlopsQuery& query) {
  if (!model.is_object() || !model.contains("arch") || !model.at("arch").is_string())
    throw ConfigError("flops model: the model section has no 'arch'");
  const auto arch = model.at("arch").get<std::string>();
  const auto& pricing = entry(arch);  // before the registry: a clear error for any id without a FLOPs model
  if (query.seq < 1) throw ConfigError("flops model: sequence length " + std::to_string(query.seq) + " must be at least 1");
  if (query.batch < 1) throw ConfigError("flops model: batch " + std::to_string(query.batch) + " must be at least 1");
  if (vocab_size < 1) throw ConfigError("flops model: vocabulary size " + std::to_string(vocab_size) + " must be at least 1");
  const auto& reg = architecture(arch);
  Input in;
  in.arch = arch;
  in.model = schema_defaults(reg.options);
  for (const auto& [k, v] : model.items()) in.model[k] = v;
  in.model["arch"] = arch;
  reg.check(in.model, "model");
  in.query = query;
  in.V = static_cast<double>(vocab_size);
  auto est = pricing.price(in);
  est.notes.insert(est.notes.begin(), "routed fraction: " + std::string(pricing.meaning));
  return est;
}

std::vector<std::string> flops_model_architectures() {
  std::vector<std::string> ids;
  for (const auto& e : table()) ids.emplace_back(e.id);
  return ids;
}

std::string routed_fraction_meaning(const std::string& arch) { return entry(arch).meaning; }

std::vector<double> fractions_from_trace(const std::string& arch, const std::vector<MeasuredLayer>& layers) {
  std::vector<double> out;
  for (const auto& l : layers) out.push_back(arch == "tsa" && l.active_share >= 0 ? l.active_share : l.routed_fraction);
  return out;
}

}  // namespace routelab
