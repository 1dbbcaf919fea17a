// The seeds' named figures, built from stored runs: metrics, evaluation rows (inference routing, context-length
// curves), probes and configs; where a figure needs model internals that no run stores (layer outputs, residual
// ratios, an early-exit threshold sweep) the builder reopens the run's checkpoint through core/analysis.
#include "core/report/seed_figures.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <cstdio>
#include <tuple>

#include "core/analysis/layer_similarity.h"
#include "core/analysis/residual_profile.h"
#include "core/analysis/run_analysis.h"
#include "core/cost/flops_model.h"
#include "core/data/dataset.h"
#include "core/models/drr.h"
#include "core/store/run_store.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

using nlohmann::json;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
/// Radial Networks' LLM skip threshold (seed 004, Figure 7: "a layer skip is assumed when the residual ratio drops
/// below 5%"), used by every seed 004 figure.
constexpr double kRadialTau = 0.05;

// ---------------------------------------------------------------------------------------------------------------
// Reading runs

RunRecord record_of(const RunStore& store, std::int64_t id, const std::string& figure) {
  auto r = store.run(id);
  if (!r) throw StoreError(store.path() + ": " + figure + ": no run " + std::to_string(id));
  return *r;
}

json config_of(const RunRecord& r, const RunStore& store) {
  try {
    return json::parse(r.config_json);
  } catch (const json::exception& e) {
    throw StoreError(store.path() + ": run " + std::to_string(r.id) + ": stored config is not JSON: " + e.what());
  }
}

std::string label_of(const RunRecord& r) { return r.name.empty() ? "run " + std::to_string(r.id) : r.name; }

/// One colour per architecture, in the palette's order.
int arch_color(const std::string& arch) {
  static const std::vector<std::string> order = {"dense", "dtrnet", "mod",  "dllm",  "tsa",
                                                 "early-exit", "radial", "drr", "tagat", "vanilla-classifier"};
  const auto it = std::find(order.begin(), order.end(), arch);
  return static_cast<int>(it - order.begin());
}

/// The run's "val" evaluation at `step` (0 = the last one).
std::optional<EvalRow> val_eval(const RunStore& store, std::int64_t id, std::int64_t step) {
  std::optional<EvalRow> found;
  for (auto& e : store.evals(id))
    if (e.split == "val" && (step == 0 || e.step == step) && (!found || e.step >= found->step)) found = e;
  return found;
}

json parse_json(const std::string& text, const RunStore& store, std::int64_t id, const std::string& what) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw StoreError(store.path() + ": run " + std::to_string(id) + ": " + what + " is not JSON: " + e.what());
  }
}

/// The run's probe at `step` (0 = the last one), parsed; a run without one is a ConfigError naming the figure.
json probe_at(const RunStore& store, std::int64_t id, std::int64_t step, const std::string& figure) {
  std::optional<ProbeRow> found;
  for (auto& p : store.probes(id))
    if ((step == 0 || p.step == step) && (!found || p.step >= found->step)) found = p;
  if (!found)
    throw ConfigError(figure + ": run " + std::to_string(id) + " has no probe" +
                      (step ? " at step " + std::to_string(step) : std::string()));
  auto doc = parse_json(found->json, store, id, "probe of step " + std::to_string(found->step));
  doc["step"] = found->step;
  return doc;
}

/// The value of metric `key` at `step` (0 = the last point); NaN when absent.
double metric_at(const RunStore& store, std::int64_t id, const std::string& key, std::int64_t step) {
  const auto points = store.metric(id, key);
  double value = kNaN;
  for (const auto& p : points)
    if (step == 0 || p.step == step) value = p.value;
  return value;
}

/// "L" + i without GCC 12's -Wstringop-overflow false positive on operator+(const char*, string&&).
std::string prefixed(const char* prefix, std::int64_t i) { return std::string(prefix).append(std::to_string(i)); }

std::vector<std::string> layer_labels(std::size_t n) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(prefixed("L", static_cast<std::int64_t>(i)));
  return out;
}

/// Token texts as column labels: whitespace made visible so that a space is not an empty label.
std::vector<std::string> token_labels(const json& tokens) {
  std::vector<std::string> out;
  if (!tokens.is_array()) return out;
  for (const auto& t : tokens) {
    std::string s = t.is_string() ? t.get<std::string>() : t.dump();
    if (s == " ") s = "\u2423";
    else if (s == "\n") s = "\u21b5";
    out.push_back(s);
  }
  return out;
}

/// What the model of a stored config was built with: the tokenizer's vocabulary and the dataset's context (a
/// synthetic task derives its own), as the trainer does.
struct DataShape {
  std::int64_t vocab = 0, context = 0;
};

DataShape data_shape_of(const json& config) {
  const auto data = make_dataset(config.at("data"));
  return {data->tokenizer().vocab_size(), data->context()};
}

std::vector<std::int64_t> lengths_or_default(const FigureRequest& request) {
  if (!request.lengths.empty()) return request.lengths;
  std::vector<std::int64_t> out;
  for (std::int64_t t = 128; t <= 32768; t *= 2) out.push_back(t);
  return out;
}

Figure start(const FigureRequest& request, const std::string& title) {
  Figure f;
  f.name = request.name;
  f.title = title;
  f.meta["runs"] = request.run_ids;
  return f;
}

// ---------------------------------------------------------------------------------------------------------------
// Seed 000 (DTRNet)

const char* kFig1Title = "Average layer-wise cosine similarity of token representations (seed 000, Figure 1)";

Figure seed000_fig1(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kFig1Title);
  for (const auto id : request.run_ids) {
    const auto rec = record_of(store, id, request.name);
    auto run = load_run(store.path(), id, {}, request.step);
    const auto s = layer_similarity(run);
    FigurePanel p;
    p.title = label_of(rec) + " (step " + std::to_string(s.step) + ")";
    p.x_label = "Layer";
    p.y_label = "Layer";
    p.legend = false;
    auto& h = p.heatmap;
    h.rows = h.cols = static_cast<std::size_t>(s.layers);
    h.values = s.cosine;
    h.row_labels = h.col_labels = layer_labels(h.rows);
    h.lo = std::min(0.0, *std::min_element(s.cosine.begin(), s.cosine.end()));
    h.hi = 1.0;
    h.colour_label = "cosine similarity";
    f.meta["tokens"][std::to_string(id)] = s.tokens;
    f.meta["checkpoint_step"][std::to_string(id)] = s.step;
    f.panels.push_back(std::move(p));
  }
  return f;
}

const char* kFig3Title = "Perplexity across increasing sequence lengths (seed 000, Figure 3)";

Figure seed000_fig3(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kFig3Title);
  FigurePanel p;
  p.x_label = "Sequence length (tokens)";
  p.y_label = "Perplexity";
  p.log_x = true;
  for (const auto id : request.run_ids) {
    const auto rec = record_of(store, id, request.name);
    std::map<std::string, EvalRow> curves;  // split -> the latest stored curve of that scaling
    for (auto& e : store.evals(id))
      if (e.split.rfind("context:", 0) == 0 && (!curves.count(e.split) || e.step >= curves[e.split].step))
        curves[e.split] = e;
    int dash = 0;
    for (const auto& [split, row] : curves) {
      const auto doc = parse_json(row.extra_json, store, id, "evaluation '" + split + "'");
      FigureSeries s;
      s.label = label_of(rec) + (curves.size() > 1 ? " (" + split.substr(8) + ")" : "");
      for (const auto& point : doc.at("points")) {
        s.x.push_back(point.at("length").get<double>());
        s.y.push_back(point.at("ppl").is_number() ? point.at("ppl").get<double>() : kNaN);
      }
      s.color = arch_color(rec.arch);
      s.dash = dash++ % 4;
      s.marked = true;
      f.meta["trained_context"][std::to_string(id)] = doc.value("trained_context", 0);
      p.series.push_back(std::move(s));
    }
  }
  if (p.series.empty())
    throw ConfigError(request.name + ": none of the runs has a stored context-length curve (store one with "
                      "`routelab-cli context RUN --lengths ... --store`)");
  f.panels.push_back(std::move(p));
  return f;
}

/// Per-layer routed fractions of the run's inference evaluation at `step`, in the form estimate_flops takes;
/// empty (the architecture's default) when the run has no evaluation.
std::vector<double> measured_fractions(const RunStore& store, const RunRecord& rec, std::int64_t step,
                                       json& source) {
  const auto eval = val_eval(store, rec.id, step);
  if (!eval) {
    source = "architecture default (no evaluation stored)";
    return {};
  }
  const auto extra = parse_json(eval->extra_json, store, rec.id, "evaluation of step " + std::to_string(eval->step));
  std::vector<MeasuredLayer> layers;
  for (const auto& l : extra.value("layers", json::array())) {
    MeasuredLayer m;
    m.routed_fraction = l.value("routed_fraction", 1.0);
    if (l.contains("stats") && l["stats"].contains("active_share")) m.active_share = l["stats"]["active_share"].get<double>();
    layers.push_back(m);
  }
  source = "evaluation at step " + std::to_string(eval->step);
  return fractions_from_trace(rec.arch, layers);
}

const char* kFig4Title = "Theoretical FLOPs as the sequence length increases, relative to a dense Transformer of the "
                         "same shape (seed 000, Figure 4)";

Figure seed000_fig4(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kFig4Title);
  const auto lengths = lengths_or_default(request);
  FigurePanel p;
  p.x_label = "Sequence length (tokens)";
  p.y_label = "FLOPs / dense FLOPs";
  p.log_x = true;
  for (const auto id : request.run_ids) {
    const auto rec = record_of(store, id, request.name);
    const auto config = config_of(rec, store);
    json source;
    const auto fractions = measured_fractions(store, rec, request.step, source);
    const auto vocab = data_shape_of(config).vocab;
    FigureSeries s;
    s.label = label_of(rec);
    s.color = arch_color(rec.arch);
    for (const auto t : lengths) {
      FlopsQuery q;
      q.seq = t;
      q.fractions = fractions;
      s.x.push_back(static_cast<double>(t));
      s.y.push_back(estimate_flops(config.at("model"), vocab, q).total_ratio());
    }
    f.meta["routing"][std::to_string(id)] = source;
    p.series.push_back(std::move(s));
  }
  f.meta["lengths"] = lengths;
  f.panels.push_back(std::move(p));
  return f;
}

const char* kFig5Title = "Average percentage of tokens going to attention per layer (seed 000, Figure 5)";

Figure seed000_fig5(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kFig5Title);
  FigurePanel p;
  p.x_label = "Layer";
  p.y_label = "Tokens to attention (%)";
  std::size_t layers = 0;
  for (const auto id : request.run_ids) {
    const auto rec = record_of(store, id, request.name);
    const auto eval = val_eval(store, id, request.step);
    if (!eval) throw ConfigError(request.name + ": run " + std::to_string(id) + " has no validation evaluation");
    const auto extra = parse_json(eval->extra_json, store, id, "evaluation of step " + std::to_string(eval->step));
    FigureBars::Member m;
    m.label = label_of(rec);
    m.color = arch_color(rec.arch);
    bool any_routed = false;
    for (const auto& l : extra.value("layers", json::array())) {
      const bool routed = l.value("routed", false);
      any_routed = any_routed || routed;
      // A layer that does not route sends every token through attention.
      m.values.push_back(routed ? 100.0 * l.value("routed_fraction", 1.0) : 100.0);
    }
    m.hatched = !any_routed;
    layers = std::max(layers, m.values.size());
    f.meta["eval_step"][std::to_string(id)] = eval->step;
    p.bars.members.push_back(std::move(m));
  }
  for (auto& m : p.bars.members) m.values.resize(layers, kNaN);
  p.bars.categories = layer_labels(layers);
  f.panels.push_back(std::move(p));
  return f;
}

const char* kFig6Title = "KV cache memory for different sequence lengths (seed 000, Figure 6)";

Figure seed000_fig6(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kFig6Title);
  const auto lengths = lengths_or_default(request);
  FigurePanel p;
  p.x_label = "Sequence length (tokens)";
  p.y_label = "KV cache (MiB)";
  p.log_x = p.log_y = true;
  for (const auto id : request.run_ids) {
    const auto rec = record_of(store, id, request.name);
    const auto model = config_of(rec, store).at("model");
    const auto n_head = model.value("n_head", std::int64_t{1});
    const auto n_kv = model.value("n_kv_head", std::int64_t{0}) > 0 ? model.at("n_kv_head").get<std::int64_t>() : n_head;
    const auto head_dim = model.value("n_embd", std::int64_t{0}) / std::max<std::int64_t>(1, n_head);
    const double entry_bytes = 2.0 * static_cast<double>(n_kv * head_dim) * 4.0;  // key + value, fp32
    // Cache entries per token and layer under the inference rules (core/inference/kv_cache.h): a routed DTRNet,
    // MoD or D-LLM layer caches its attention tokens, a Radial layer its executions, every other layer each token.
    double per_token = 0;
    const auto eval = val_eval(store, id, request.step);
    if (eval) {
      const auto extra = parse_json(eval->extra_json, store, id, "evaluation of step " + std::to_string(eval->step));
      for (const auto& l : extra.value("layers", json::array())) {
        const auto kind = l.value("kind", std::string("dense"));
        const bool by_fraction = l.value("routed", false) && (kind == "dtrnet" || kind == "mod" || kind == "dllm" ||
                                                               kind == "radial");
        per_token += by_fraction ? l.value("routed_fraction", 1.0) : 1.0;
      }
      f.meta["eval_step"][std::to_string(id)] = eval->step;
    } else {
      per_token = static_cast<double>(model.value("n_layer", std::int64_t{0}));
      f.meta["eval_step"][std::to_string(id)] = nullptr;
    }
    if (rec.arch == "drr") f.meta["notes"].push_back(label_of(rec) + ": the depth-memory entries are not counted");
    FigureSeries s;
    s.label = label_of(rec);
    s.color = arch_color(rec.arch);
    s.marked = true;
    for (const auto t : lengths) {
      s.x.push_back(static_cast<double>(t));
      s.y.push_back(per_token * static_cast<double>(t) * entry_bytes / (1024.0 * 1024.0));
    }
    f.meta["entries_per_token"][std::to_string(id)] = per_token;
    p.series.push_back(std::move(s));
  }
  f.meta["lengths"] = lengths;
  f.meta["bytes_per_element"] = 4;
  f.panels.push_back(std::move(p));
  return f;
}

// ---------------------------------------------------------------------------------------------------------------
// Seed 001 (DRR)

const char* kDrrTitle = "Added cost of Depth Routing Residuals: parameters and forward FLOPs versus a standard "
                        "PreNorm transformer of the same shape (seed 001, \"Added cost\")";

Figure seed001_overhead(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kDrrTitle);
  FigurePanel params, flops;
  params.y_label = "Parameters (M)";
  flops.y_label = "Forward FLOPs per sequence (GFLOPs)";
  params.title = "Parameters";
  flops.title = "FLOPs";
  FigureBars::Member base_p, drr_p, base_f, drr_f;
  base_p.label = base_f.label = "PreNorm";
  drr_p.label = drr_f.label = "DRR";
  base_p.color = base_f.color = arch_color("dense");
  drr_p.color = drr_f.color = arch_color("drr");
  for (const auto id : request.run_ids) {
    const auto rec = record_of(store, id, request.name);
    if (rec.arch != "drr")
      throw ConfigError(request.name + ": run " + std::to_string(id) + " is a '" + rec.arch + "' run, not 'drr'");
    const auto config = config_of(rec, store);
    const auto shape = data_shape_of(config);
    const auto context = shape.context;
    const auto t = drr_transformer_options_from_json(config.at("model"), shape.vocab, context);
    const auto o = drr_overhead(t, drr_options_from_json(config.at("model")), context);
    const auto prefix = request.run_ids.size() > 1 ? label_of(rec) + ": " : std::string();
    for (auto* panel : {&params, &flops}) {
      panel->bars.categories.push_back(prefix + "model");
      panel->bars.categories.push_back(prefix + "layers");
    }
    base_p.values.insert(base_p.values.end(), {o.base_params / 1e6, o.base_stack_params / 1e6});
    drr_p.values.insert(drr_p.values.end(), {o.drr_params / 1e6, o.drr_stack_params / 1e6});
    base_f.values.insert(base_f.values.end(), {o.base_flops / 1e9, o.base_stack_flops / 1e9});
    drr_f.values.insert(drr_f.values.end(), {o.drr_flops / 1e9, o.drr_stack_flops / 1e9});
    f.meta["overhead"][std::to_string(id)] = {{"seq", o.seq},
                                              {"param_overhead", o.param_overhead()},
                                              {"stack_param_overhead", o.stack_param_overhead()},
                                              {"flops_overhead", o.flops_overhead()},
                                              {"stack_flops_overhead", o.stack_flops_overhead()}};
  }
  params.bars.members = {base_p, drr_p};
  flops.bars.members = {base_f, drr_f};
  f.panels = {params, flops};
  return f;
}

// ---------------------------------------------------------------------------------------------------------------
// Seed 002 (TAGAT)

const char* kTagat3Title = "Average expert balance per layer and per epoch (seed 002, Figures 3 and 6)";

Figure seed002_fig3(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kTagat3Title);
  f.columns = 2;
  for (const auto id : request.run_ids) {
    const auto rec = record_of(store, id, request.name);
    const auto eval = val_eval(store, id, request.step);
    if (!eval) throw ConfigError(request.name + ": run " + std::to_string(id) + " has no validation evaluation");
    const auto extra = parse_json(eval->extra_json, store, id, "evaluation of step " + std::to_string(eval->step));
    const auto stats = extra.value("stats", json::object());
    // load/L<l>/E<i>: the mean gate mass of expert i in layer l over the real tokens.
    std::map<int, std::map<int, double>> load;
    for (const auto& [key, value] : stats.items()) {
      int l = 0, e = 0;
      char tail = 0;
      if (std::sscanf(key.c_str(), "load/L%d/E%d%c", &l, &e, &tail) == 2) load[l][e] = value.get<double>();
    }
    if (load.empty())
      throw ConfigError(request.name + ": run " + std::to_string(id) + " stores no per-layer expert loads "
                        "(load/L<l>/E<i>: a tagat run)");
    int experts = 0;
    for (const auto& [l, per] : load) experts = std::max(experts, per.rbegin()->first + 1);
    FigurePanel bars;
    bars.title = label_of(rec) + " (step " + std::to_string(eval->step) + ")";
    bars.x_label = "Layer";
    bars.y_label = "Average expert load";
    for (const auto& [l, per] : load) bars.bars.categories.push_back("L" + std::to_string(l));
    for (int e = 0; e < experts; ++e) {
      FigureBars::Member m;
      m.label = "E" + std::to_string(e);
      m.color = e;
      for (const auto& [l, per] : load) m.values.push_back(per.count(e) ? per.at(e) : kNaN);
      bars.bars.members.push_back(std::move(m));
    }
    // Per epoch: the model-wide mean load of each expert (the seed's "Val Avg Expert Balance" column).
    FigurePanel epochs;
    epochs.title = label_of(rec);
    epochs.y_label = "Average expert load";
    std::map<std::int64_t, double> epoch_of;
    for (const auto& p : store.metric(id, "val/epoch")) epoch_of[p.step] = p.value;
    epochs.x_label = epoch_of.empty() ? "Step" : "Epoch";
    for (int e = 0; e < experts; ++e) {
      FigureSeries s;
      s.label = "E" + std::to_string(e);
      s.color = e;
      s.marked = true;
      for (const auto& p : store.metric(id, "val/load/E" + std::to_string(e))) {
        s.x.push_back(epoch_of.count(p.step) ? epoch_of[p.step] : static_cast<double>(p.step));
        s.y.push_back(p.value);
      }
      if (!s.x.empty()) epochs.series.push_back(std::move(s));
    }
    if (!epochs.series.empty()) {
      FigureSeries uniform;
      uniform.label = "uniform 1/N";
      uniform.x = {epochs.series.front().x.front(), epochs.series.front().x.back()};
      uniform.y = {1.0 / experts, 1.0 / experts};
      uniform.dash = 1;
      uniform.color = 7;
      epochs.series.push_back(std::move(uniform));
    }
    f.meta["experts"] = experts;
    f.panels.push_back(std::move(bars));
    if (!epochs.series.empty()) f.panels.push_back(std::move(epochs));
  }
  return f;
}

const char* kTagat4Title = "Token gating probabilities of the probe example per layer (seed 002, Figures 4 and 7)";

Figure seed002_fig4(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kTagat4Title);
  for (const auto id : request.run_ids) {
    const auto rec = record_of(store, id, request.name);
    const auto probe = probe_at(store, id, request.step, request.name);
    if (!probe.contains("token_data") || !probe["token_data"].contains("gate"))
      throw ConfigError(request.name + ": run " + std::to_string(id) + "'s probe has no token gates (a tagat run)");
    const auto& gate = probe["token_data"]["gate"];  // (T, L, N)
    const auto T = gate.size();
    const auto L = T ? gate[0].size() : 0;
    const auto N = L ? gate[0][0].size() : 0;
    const auto tokens = token_labels(probe.value("tokens", json::array()));
    for (std::size_t l = 0; l < L; ++l) {
      FigurePanel p;
      p.title = label_of(rec) + ", layer " + std::to_string(l);
      p.x_label = "Token";
      p.y_label = "Expert";
      p.legend = false;
      auto& h = p.heatmap;
      h.rows = N;
      h.cols = T;
      for (std::size_t e = 0; e < N; ++e)
        for (std::size_t t = 0; t < T; ++t) h.values.push_back(gate[t][l][e].get<double>());
      for (std::size_t e = 0; e < N; ++e) h.row_labels.push_back(prefixed("E", static_cast<std::int64_t>(e)));
      if (tokens.size() == T) h.col_labels = tokens;
      h.lo = 0;
      h.hi = 1;
      h.colour_label = "gate probability";
      f.panels.push_back(std::move(p));
    }
    f.columns = static_cast<int>(L);
    f.meta["probe_step"][std::to_string(id)] = probe["step"];
    if (probe.contains("label_name")) f.meta["probe_label"][std::to_string(id)] = probe["label_name"];
  }
  return f;
}

// ---------------------------------------------------------------------------------------------------------------
// Seed 003 (TSA)

/// A series of (step, value) points; y NaN when the metric is absent.
FigureSeries metric_series(const RunStore& store, std::int64_t id, const std::string& key) {
  FigureSeries s;
  for (const auto& p : store.metric(id, key)) {
    s.x.push_back(static_cast<double>(p.step));
    s.y.push_back(p.value);
  }
  return s;
}

/// Token-layer operations of one training step of `tokens` tokens through `layers` blocks at active fraction
/// alpha (seed 003 Table 1: the stem always runs, the L-1 gated blocks count 1 - p on average).
double step_tlops(double tokens, double layers, double alpha) { return tokens * (1.0 + (layers - 1.0) * alpha); }

const char* kTsa2Title = "Validation loss versus step and versus cumulative token-layer operations (seed 003, "
                         "Figures 2 and 5)";

Figure seed003_fig2(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kTsa2Title);
  FigurePanel by_step, by_tlops;
  by_step.title = "(a) convergence";
  by_step.x_label = "Step";
  by_step.y_label = "Validation loss (nats)";
  by_tlops.title = "(b) compute";
  by_tlops.x_label = "Cumulative TLOps (1e9)";
  by_tlops.y_label = "Validation loss (nats)";
  for (const auto id : request.run_ids) {
    const auto rec = record_of(store, id, request.name);
    const auto config = config_of(rec, store);
    auto val = metric_series(store, id, "val/loss");
    val.label = label_of(rec);
    val.color = arch_color(rec.arch);
    val.marked = true;
    const double tokens = static_cast<double>(config.at("train").at("batch_size").get<std::int64_t>() *
                                              data_shape_of(config).context);
    const double layers = static_cast<double>(config.at("model").value("n_layer", std::int64_t{1}));
    // alpha is logged every log step (train/alpha); a step between two logs takes the last logged value, steps
    // before the first log the first one; a model without the statistic runs every block (alpha = 1).
    const auto alpha = store.metric(id, "train/alpha");
    auto tl = val;
    double cumulative = 0;
    std::int64_t done = 0;
    std::size_t a = 0;
    for (std::size_t i = 0; i < val.x.size(); ++i) {
      const auto target = static_cast<std::int64_t>(val.x[i]);
      for (; done < target; ++done) {
        const auto step = done + 1;
        while (a + 1 < alpha.size() && alpha[a + 1].step <= step) ++a;
        const double al = alpha.empty() ? 1.0 : alpha[a].value;
        cumulative += step_tlops(tokens, layers, al);
      }
      tl.x[i] = cumulative / 1e9;
    }
    f.meta["tokens_per_step"][std::to_string(id)] = tokens;
    by_step.series.push_back(std::move(val));
    by_tlops.series.push_back(std::move(tl));
  }
  f.panels = {by_step, by_tlops};
  return f;
}

/// The sweep a run belongs to (its "sweep:<name>" tag), or "".
std::string sweep_of(const RunRecord& rec) {
  std::stringstream tags(rec.tags);
  std::string tag;
  while (std::getline(tags, tag, ','))
    if (tag.rfind("sweep:", 0) == 0) return tag.substr(6);
  return "";
}

/// Thresholds of the early-exit sweep of Figure 3 (right); 1 is the full model.
const std::vector<double>& exit_thresholds() {
  static const std::vector<double> t = {0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0};
  return t;
}

const char* kTsa3Title = "Ablations: TSA across the depth regulariser lambda, and TSA against the early-exit "
                         "threshold sweep at matched active fraction alpha (seed 003, Figure 3)";

Figure seed003_fig3(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kTsa3Title);
  FigurePanel sweep, pareto;
  sweep.title = "(a) lambda sweep";
  sweep.x_label = "lambda (model.depth_coeff)";
  sweep.y_label = "Validation loss (nats)";
  pareto.title = "(b) TSA vs early exit";
  pareto.x_label = "Active fraction alpha";
  pareto.y_label = "Validation loss (nats)";
  std::map<std::string, std::vector<std::pair<double, double>>> by_sweep;  // sweep -> (lambda, loss)
  std::map<std::string, int> sweep_color;
  FigureSeries tsa;
  tsa.label = "TSA";
  tsa.kind = SeriesKind::Points;
  tsa.marked = true;
  tsa.color = arch_color("tsa");
  for (const auto id : request.run_ids) {
    const auto rec = record_of(store, id, request.name);
    const auto config = config_of(rec, store);
    const auto eval = val_eval(store, id, request.step);
    if (!eval) throw ConfigError(request.name + ": run " + std::to_string(id) + " has no validation evaluation");
    const double loss = eval->loss;
    if (rec.arch == "tsa") {
      const auto name = sweep_of(rec);
      by_sweep[name].push_back({config.at("model").at("depth_coeff").get<double>(), loss});
      tsa.x.push_back(metric_at(store, id, "val/alpha", eval->step));
      tsa.y.push_back(loss);
    } else if (rec.arch == "early-exit") {
      // The threshold is an eval-only option: sweep it on the run's checkpoint, as the seed does.
      FigureSeries s;
      s.label = "early exit: " + label_of(rec);
      s.color = arch_color(rec.arch);
      s.marked = true;
      std::vector<std::pair<double, double>> points;
      json thresholds = json::array();
      for (const auto t : exit_thresholds()) {
        std::ostringstream set;
        set << "model.exit_threshold=" << t;
        auto run = load_run(store.path(), id, {set.str()}, request.step);
        const auto report = evaluate_run(run);
        const auto it = report.stats.find("alpha");
        points.push_back({it == report.stats.end() ? 1.0 : it->second, report.loss});
        thresholds.push_back({{"threshold", t}, {"alpha", points.back().first}, {"loss", report.loss}});
      }
      std::sort(points.begin(), points.end());
      for (const auto& [x, y] : points) {
        s.x.push_back(x);
        s.y.push_back(y);
      }
      f.meta["exit_sweep"][std::to_string(id)] = thresholds;
      pareto.series.push_back(std::move(s));
    } else {
      FigureSeries s;
      s.label = label_of(rec);
      s.kind = SeriesKind::Points;
      s.color = arch_color(rec.arch);
      s.x = {1.0};  // every block runs every token
      s.y = {loss};
      pareto.series.push_back(std::move(s));
    }
  }
  int dash = 0;
  for (auto& [name, points] : by_sweep) {
    std::sort(points.begin(), points.end());
    FigureSeries s;
    s.label = name.empty() ? "TSA" : "TSA, sweep " + name;
    s.color = arch_color("tsa");
    s.dash = dash++ % 4;
    s.marked = true;
    for (const auto& [x, y] : points) {
      s.x.push_back(x);
      s.y.push_back(y);
    }
    sweep.series.push_back(std::move(s));
  }
  if (!tsa.x.empty()) pareto.series.push_back(std::move(tsa));
  if (sweep.series.empty()) throw ConfigError(request.name + ": needs at least one tsa run");
  f.panels = {sweep, pareto};
  return f;
}

const char* kTsa4Title = "Per-token active fraction (1 - p_l) across the routing decisions on the probe text (seed "
                         "003, Figure 4)";

Figure seed003_fig4(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kTsa4Title);
  for (const auto id : request.run_ids) {
    const auto rec = record_of(store, id, request.name);
    const auto probe = probe_at(store, id, request.step, request.name);
    FigurePanel p;
    p.title = label_of(rec) + " (step " + std::to_string(probe["step"].get<std::int64_t>()) + ")";
    p.x_label = "Token";
    p.y_label = "Routing decision";
    p.legend = false;
    auto& h = p.heatmap;
    for (const auto& l : probe.value("layers", json::array())) {
      if (!l.value("routed", false) || !l.contains("gate")) continue;
      const auto& gate = l["gate"];
      if (h.cols == 0) h.cols = gate.size();
      if (gate.size() != h.cols) throw StoreError(store.path() + ": run " + std::to_string(id) + ": probe rows differ");
      for (const auto& g : gate) h.values.push_back(g.get<double>());
      h.row_labels.push_back("L" + std::to_string(l.value("layer", 0)));
      ++h.rows;
    }
    if (h.rows == 0)
      throw ConfigError(request.name + ": run " + std::to_string(id) + "'s probe has no routed layer with gates");
    const auto tokens = token_labels(probe.value("tokens", json::array()));
    if (tokens.size() == h.cols) h.col_labels = tokens;
    h.lo = 0;
    h.hi = 1;
    h.colour_label = rec.arch == "tsa" ? "active fraction 1 - p" : "gate";
    f.meta["probe_step"][std::to_string(id)] = probe["step"];
    f.panels.push_back(std::move(p));
  }
  f.columns = 1;
  return f;
}

// ---------------------------------------------------------------------------------------------------------------
// Seed 004 (Radial Networks): residual-ratio profiles computed from the checkpoint (no run stores them)

ResidualProfile profile_of(const RunStore& store, std::int64_t id, std::int64_t step) {
  auto run = load_run(store.path(), id, {}, step);
  ResidualProfileOptions o;
  o.tau = kRadialTau;
  return profile_residuals(run, o);
}

std::string block_label(int layer, const std::string& block) {
  return "L" + std::to_string(layer) + (block == "attn" ? " ATT" : " FFN");
}

/// The centre of histogram bin `i` of `bins` over log10 r in [-3, 1] (residual_profile.h).
double bin_centre(int i, int bins) { return std::pow(10.0, -3.0 + (i + 0.5) * 4.0 / bins); }

/// Sums the histograms of the blocks of kind `block` ("" = all) and returns shares in %.
std::vector<double> pooled_shares(const ResidualProfile& p, const std::string& block) {
  std::vector<double> counts(static_cast<std::size_t>(p.bins), 0.0);
  double total = 0;
  for (const auto& s : p.blocks) {
    if (!block.empty() && s.block != block) continue;
    for (std::size_t i = 0; i < s.histogram.size() && i < counts.size(); ++i) {
      counts[i] += static_cast<double>(s.histogram[i]);
      total += static_cast<double>(s.histogram[i]);
    }
  }
  for (auto& c : counts) c = total > 0 ? 100.0 * c / total : kNaN;
  return counts;
}

const char* kRadial5Title = "Dynamic depth: the share of tokens for which each block contributes (residual ratio >= "
                            "5%) and the distribution of the oracle dynamic depth (seed 004, Figure 5)";

Figure seed004_fig5(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kRadial5Title);
  FigurePanel blocks, depth;
  blocks.title = "(a) contributing blocks";
  blocks.x_label = "Block";
  blocks.y_label = "Tokens with r >= 5% (%)";
  depth.title = "(b) dynamic depth";
  depth.x_label = "Blocks run with r >= 5% (oracle depth)";
  depth.y_label = "Tokens (%)";
  std::vector<std::string> categories;
  std::vector<std::map<std::string, double>> values;
  for (const auto id : request.run_ids) {
    const auto rec = record_of(store, id, request.name);
    const auto p = profile_of(store, id, request.step);
    std::map<std::string, double> v;
    for (const auto& s : p.blocks) {
      const auto label = block_label(s.layer, s.block);
      if (std::find(categories.begin(), categories.end(), label) == categories.end()) categories.push_back(label);
      v[label] = 100.0 * (1.0 - s.below_tau);
    }
    values.push_back(std::move(v));
    FigureBars::Member m;
    m.label = label_of(rec);
    m.color = arch_color(rec.arch);
    blocks.bars.members.push_back(std::move(m));
    FigureSeries s;
    s.label = label_of(rec);
    s.color = arch_color(rec.arch);
    s.marked = true;
    double total = 0;
    for (const auto c : p.oracle_depth_histogram) total += static_cast<double>(c);
    for (std::size_t d = 0; d < p.oracle_depth_histogram.size(); ++d) {
      s.x.push_back(static_cast<double>(d));
      s.y.push_back(total > 0 ? 100.0 * static_cast<double>(p.oracle_depth_histogram[d]) / total : kNaN);
    }
    depth.series.push_back(std::move(s));
    f.meta["mean_oracle_depth"][std::to_string(id)] = p.mean_oracle_depth;
    f.meta["mean_executed"][std::to_string(id)] = p.mean_executed;
    f.meta["static_depth"][std::to_string(id)] = p.static_depth;
    f.meta["checkpoint_step"][std::to_string(id)] = p.step;
  }
  // Layer order, attention before FFN in each layer (the order blocks run in).
  std::sort(categories.begin(), categories.end(), [](const std::string& a, const std::string& b) {
    const int la = std::stoi(a.substr(1)), lb = std::stoi(b.substr(1));
    return la != lb ? la < lb : a < b;  // " ATT" < " FFN"
  });
  blocks.bars.categories = categories;
  for (std::size_t r = 0; r < values.size(); ++r)
    for (const auto& c : categories)
      blocks.bars.members[r].values.push_back(values[r].count(c) ? values[r][c] : kNaN);
  f.meta["tau"] = kRadialTau;
  f.panels = {blocks, depth};
  return f;
}

const char* kRadial6Title = "Residual ratio distributions of attention and feed-forward blocks, one value per token "
                            "and block (seed 004, Figure 6)";

Figure seed004_fig6(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kRadial6Title);
  FigurePanel att, ffn;
  att.title = "ATT";
  ffn.title = "FFN";
  for (auto* p : {&att, &ffn}) {
    p->x_label = "Residual ratio ||R(x)|| / ||x||";
    p->y_label = "Tokens (%)";
    p->log_x = true;
  }
  for (const auto id : request.run_ids) {
    const auto rec = record_of(store, id, request.name);
    const auto p = profile_of(store, id, request.step);
    for (auto [panel, block] : {std::pair{&att, "attn"}, std::pair{&ffn, "mlp"}}) {
      FigureSeries s;
      s.label = label_of(rec);
      s.color = arch_color(rec.arch);
      s.kind = SeriesKind::Step;
      s.y = pooled_shares(p, block);
      for (int i = 0; i < p.bins; ++i) s.x.push_back(bin_centre(i, p.bins));
      panel->series.push_back(std::move(s));
    }
    f.meta["checkpoint_step"][std::to_string(id)] = p.step;
  }
  f.meta["histogram_log10_range"] = {-3.0, 1.0};
  f.panels = {att, ffn};
  return f;
}

const char* kRadial7Title = "Routing of the probe text: blocks each token runs (residual ratio >= 5%, ATT and FFN "
                            "interleaved), or for Radial Networks the layer chosen at each step (seed 004, Figure 7)";

Figure seed004_fig7(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kRadial7Title);
  for (const auto id : request.run_ids) {
    const auto rec = record_of(store, id, request.name);
    FigurePanel p;
    p.title = label_of(rec);
    p.x_label = "Token";
    p.legend = false;
    auto& h = p.heatmap;
    if (rec.arch == "radial") {
      // The model's own routing: the stored probe's path (T, S), layer per step, -1 after the exit.
      const auto probe = probe_at(store, id, request.step, request.name);
      if (!probe.contains("token_data") || !probe["token_data"].contains("path"))
        throw ConfigError(request.name + ": run " + std::to_string(id) + "'s probe has no routing path");
      const auto& path = probe["token_data"]["path"];
      h.cols = path.size();
      h.rows = h.cols ? path[0].size() : 0;
      const auto layers = config_of(rec, store).at("model").value("n_layer", std::int64_t{1});
      for (std::size_t s = 0; s < h.rows; ++s) {
        h.row_labels.push_back("step " + std::to_string(s));
        for (std::size_t t = 0; t < h.cols; ++t) {
          const auto layer = path[t][s].get<std::int64_t>();
          h.values.push_back(layer < 0 ? kNaN : static_cast<double>(layer));
        }
      }
      h.col_labels = token_labels(probe.value("tokens", json::array()));
      if (h.col_labels.size() != h.cols) h.col_labels.clear();
      h.lo = 0;
      h.hi = static_cast<double>(std::max<std::int64_t>(1, layers - 1));
      h.colour_label = "layer";
      p.y_label = "Routing step";
      f.meta["probe_step"][std::to_string(id)] = probe["step"];
    } else {
      // The oracle of §4: a block is skipped for a token whose residual ratio is below tau.
      const auto prof = profile_of(store, id, request.step);
      const auto& probe = prof.probe;
      if (!probe.contains("blocks")) throw ConfigError(request.name + ": run " + std::to_string(id) + " has no probe text");
      for (const auto& b : probe["blocks"]) {
        const auto& ratio = b.at("ratio");
        if (h.cols == 0) h.cols = ratio.size();
        h.row_labels.push_back(block_label(b.at("layer").get<int>(), b.at("block").get<std::string>()));
        for (const auto& r : ratio) h.values.push_back(r.is_null() ? kNaN : (r.get<double>() >= kRadialTau ? 1.0 : 0.0));
        ++h.rows;
      }
      h.col_labels = token_labels(probe.value("tokens", json::array()));
      if (h.col_labels.size() != h.cols) h.col_labels.clear();
      h.lo = 0;
      h.hi = 1;
      h.colour_label = "runs (1) / skipped (0)";
      p.y_label = "Block";
      f.meta["checkpoint_step"][std::to_string(id)] = prof.step;
    }
    f.panels.push_back(std::move(p));
  }
  f.meta["tau"] = kRadialTau;
  f.columns = 1;
  return f;
}

const char* kRadial9Title = "Mean residual ratio per layer of attention and feed-forward blocks, p10-p90 across "
                            "tokens shaded (seed 004, Figure 9)";

Figure seed004_fig9(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kRadial9Title);
  for (const auto id : request.run_ids) {
    const auto rec = record_of(store, id, request.name);
    const auto prof = profile_of(store, id, request.step);
    FigurePanel p;
    p.title = label_of(rec);
    p.x_label = "Layer";
    p.y_label = "Residual ratio";
    for (const auto& [block, name, color] : {std::tuple{"attn", "ATT", 0}, std::tuple{"mlp", "FFN", 1}}) {
      FigureSeries s;
      s.label = name;
      s.color = color;
      s.marked = true;
      for (const auto& b : prof.blocks) {
        if (b.block != block) continue;
        s.x.push_back(b.layer);
        s.y.push_back(b.count > 0 ? b.mean : kNaN);
        s.y_lo.push_back(b.count > 0 ? b.p10 : kNaN);
        s.y_hi.push_back(b.count > 0 ? b.p90 : kNaN);
      }
      if (!s.x.empty()) p.series.push_back(std::move(s));
    }
    f.meta["checkpoint_step"][std::to_string(id)] = prof.step;
    f.panels.push_back(std::move(p));
  }
  return f;
}

const char* kRadial10Title = "Residual ratios of every block and token, median dashed (seed 004, Figure 10)";

Figure seed004_fig10(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kRadial10Title);
  for (const auto id : request.run_ids) {
    const auto rec = record_of(store, id, request.name);
    const auto prof = profile_of(store, id, request.step);
    FigurePanel p;
    p.title = label_of(rec);
    p.x_label = "Residual ratio ||R(x)|| / ||x||";
    p.y_label = "Tokens (%)";
    p.log_x = true;
    FigureSeries s;
    s.label = "ratios";
    s.color = arch_color(rec.arch);
    s.kind = SeriesKind::Step;
    s.y = pooled_shares(prof, "");
    for (int i = 0; i < prof.bins; ++i) s.x.push_back(bin_centre(i, prof.bins));
    // The median from the pooled histogram: the bin where the cumulative share crosses 50%, log-linear inside it.
    double cum = 0, median = kNaN, top = 0;
    for (int i = 0; i < prof.bins; ++i) {
      const double share = std::isnan(s.y[i]) ? 0.0 : s.y[i];
      top = std::max(top, share);
      if (std::isnan(median) && share > 0 && cum + share >= 50.0) {
        const double frac = (50.0 - cum) / share;
        median = std::pow(10.0, -3.0 + (i + frac) * 4.0 / prof.bins);
      }
      cum += share;
    }
    p.series.push_back(std::move(s));
    if (!std::isnan(median)) {
      FigureSeries m;
      m.label = "median";
      m.x = {median, median};
      m.y = {0.0, top};
      m.dash = 1;
      m.color = arch_color(rec.arch);
      p.series.push_back(std::move(m));
    }
    f.meta["median"][std::to_string(id)] = std::isnan(median) ? json(nullptr) : json(median);
    f.meta["checkpoint_step"][std::to_string(id)] = prof.step;
    f.panels.push_back(std::move(p));
  }
  f.meta["median_from"] = "the pooled 32-bin log10 histogram (bin resolution)";
  return f;
}

}  // namespace

std::vector<FigureInfo> seed_figures() {
  std::vector<FigureInfo> out = {
      {"seed000-fig1", kFig1Title,
       "Per run a layers x layers heat map of cos(h_i(t), h_j(t)) averaged over the tokens of two fixed validation "
       "batches, from the checkpoint at `step` (0 = latest); dense, drr, dtrnet and mod runs. Reads run_ids, step.",
       1, seed000_fig1},
      {"seed000-fig3", kFig3Title,
       "Perplexity versus evaluation length from the runs' stored context-length curves (evaluation rows "
       "context:<scaling>x<factor> written by `routelab-cli context RUN --store`; the latest of each scaling). "
       "Reads run_ids.",
       1, seed000_fig3},
      {"seed000-fig4", kFig4Title,
       "FLOPs model (whole forward, LM head included) at each length relative to a dense model of the same shape, "
       "priced with each run's per-layer routed fractions of its validation evaluation at `step`. Reads run_ids, "
       "step, lengths (default 128 .. 32768).",
       1, seed000_fig4},
      {"seed000-fig5", kFig5Title,
       "Grouped bars: per layer, the percentage of tokens on the attention path in each run's inference-mode "
       "validation evaluation at `step` (a layer that does not route: 100%). Reads run_ids, step.",
       1, seed000_fig5},
      {"seed000-fig6", kFig6Title,
       "KV cache bytes (fp32 keys and values, batch 1) versus length under the inference rules: routed DTRNet, MoD "
       "and D-LLM layers cache their attention tokens (routed fractions of the evaluation at `step`), Radial layers "
       "their executions, other layers every token. Reads run_ids, step, lengths.",
       1, seed000_fig6},
      {"seed001-overhead", kDrrTitle,
       "Bars: parameters and forward FLOPs of one sequence of the training context, whole model and layers only, "
       "for each drr run and the plain PreNorm (GPT-2 style) stack of the same shape (drr_overhead). Reads run_ids.",
       1, seed001_overhead},
      {"seed002-fig3", kTagat3Title,
       "Per run: bars of each expert's average load per layer (load/L<l>/E<i> of the validation evaluation at "
       "`step`) and the model-wide load of each expert per epoch (val/load/E<i>). Reads run_ids, step.",
       1, seed002_fig3},
      {"seed002-fig4", kTagat4Title,
       "Per run and layer a heat map experts x tokens of the gate probabilities of the stored probe example at "
       "`step` (0 = last). Reads run_ids, step.",
       1, seed002_fig4},
      {"seed003-fig2", kTsa2Title,
       "Validation loss (val/loss) versus step, and versus cumulative TLOps = sum over steps of batch x context x "
       "(1 + (L-1) alpha) with alpha from train/alpha (1 without it). Reads run_ids.",
       1, seed003_fig2},
      {"seed003-fig3", kTsa3Title,
       "(a) validation loss of tsa runs versus model.depth_coeff, one line per sweep (tag sweep:<name>); (b) loss "
       "versus alpha: tsa runs as points, each early-exit run's checkpoint evaluated at thresholds 0.3 .. 1 (a "
       "line), other runs at alpha 1. Reads run_ids, step.",
       1, seed003_fig3},
      {"seed003-fig4", kTsa4Title,
       "Per run a heat map routing decisions x probe tokens of the gate of every routed layer of the stored probe "
       "at `step` (TSA: 1 - p_l). Reads run_ids, step.",
       1, seed003_fig4},
      {"seed004-fig5", kRadial5Title,
       "Residual-ratio profile (4 fixed validation batches, checkpoint at `step`): bars of the share of tokens with "
       "r >= 0.05 per block, and the distribution of the oracle dynamic depth. Reads run_ids, step.",
       1, seed004_fig5},
      {"seed004-fig6", kRadial6Title,
       "Histograms (32 log bins over 1e-3 .. 10) of r pooled over the layers, attention and FFN panels, one line per "
       "run. Reads run_ids, step.",
       1, seed004_fig6},
      {"seed004-fig7", kRadial7Title,
       "Per run a heat map over the probe text: blocks x tokens, 1 where r >= 0.05 (runs), 0 where the oracle skips, "
       "empty where the model did not run the block; radial runs: steps x tokens of the stored probe's path. "
       "Reads run_ids, step.",
       1, seed004_fig7},
      {"seed004-fig9", kRadial9Title,
       "Per run the mean residual ratio per layer of ATT and FFN blocks with the p10-p90 range shaded. Reads "
       "run_ids, step.",
       1, seed004_fig9},
      {"seed004-fig10", kRadial10Title,
       "Per run the histogram of r pooled over every block and token with its median (estimated from the "
       "histogram) dashed. Reads run_ids, step.",
       1, seed004_fig10},
  };
  std::sort(out.begin(), out.end(), [](const FigureInfo& a, const FigureInfo& b) { return a.name < b.name; });
  return out;
}

}  // namespace routelab
