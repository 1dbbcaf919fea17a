// DTRNet's named figures: layer-wise cosine similarity (Figure 1, from the checkpoint through
// core/analysis), perplexity versus length (3), and FLOPs, tokens to attention and KV cache (4-6).
#include <algorithm>
#include <map>

#include "core/analysis/layer_similarity.h"
#include "core/analysis/run_analysis.h"
#include "core/cost/flops_model.h"
#include "core/models/registry.h"
#include "core/report/builders/papers/paper_detail.h"
#include "core/run/context_curve.h"
#include "core/util/errors.h"

namespace routelab::figure_detail {
namespace {

std::vector<std::string> layer_labels(std::size_t n) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(layer_label(static_cast<std::int64_t>(i)));
  return out;
}

std::vector<std::int64_t> lengths_or_default(const FigureRequest& request) {
  if (!request.lengths.empty()) return request.lengths;
  std::vector<std::int64_t> out;
  for (std::int64_t t = 128; t <= 32768; t *= 2) out.push_back(t);
  return out;
}

const char* kFig1Title = "Average layer-wise cosine similarity of token representations (DTRNet, Figure 1)";

Figure dtrnet_fig1(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kFig1Title);
  for (const auto id : request.run_ids) {
    const auto rec = run_record(store, id);
    auto run = load_run(store.path(), id, {}, request.step);
    const auto s = layer_similarity(run);
    FigurePanel p;
    p.title = run_label(rec) + " (step " + std::to_string(s.step) + ")";
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

const char* kFig3Title = "Perplexity across increasing sequence lengths (DTRNet, Figure 3)";

Figure dtrnet_fig3(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kFig3Title);
  FigurePanel p;
  p.x_label = "Sequence length (tokens)";
  p.y_label = "Perplexity";
  p.log_x = true;
  for (const auto id : request.run_ids) {
    const auto rec = run_record(store, id);
    std::map<std::string, EvalRow> curves;  // split -> the latest stored curve of that scaling
    for (auto& e : store.evals(id))
      if (is_context_curve(e) && (!curves.count(e.split) || e.step >= curves[e.split].step)) curves[e.split] = e;
    int dash = 0;
    for (const auto& [split, row] : curves) {
      ContextCurve curve;
      try {
        curve = read_context_curve(row);
      } catch (const DataError& e) {
        throw DataError(request.name + ": " + store.path() + ": run " + std::to_string(id) + ": " + e.what());
      }
      FigureSeries s;
      s.label = run_label(rec) + (curves.size() > 1 ? " (" + split.substr(8) + ")" : "");
      for (const auto& point : curve.points) {
        s.x.push_back(static_cast<double>(point.length));
        s.y.push_back(point.ppl);
      }
      s.color = arch_color(rec.arch);
      s.dash = dash++ % 4;
      s.marked = true;
      f.meta["trained_context"][std::to_string(id)] = curve.trained_context;
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
  source = "evaluation at step " + std::to_string(eval->step);
  return fractions_from_trace(rec.arch, eval->layers);
}

const char* kFig4Title = "Theoretical FLOPs as the sequence length increases, relative to a dense Transformer of the "
                         "same shape (DTRNet, Figure 4)";

Figure dtrnet_fig4(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kFig4Title);
  const auto lengths = lengths_or_default(request);
  FigurePanel p;
  p.x_label = "Sequence length (tokens)";
  p.y_label = "FLOPs / dense FLOPs";
  p.log_x = true;
  for (const auto id : request.run_ids) {
    const auto rec = run_record(store, id);
    const auto config = run_config(store, rec);
    json source;
    const auto fractions = measured_fractions(store, rec, request.step, source);
    const auto vocab = data_shape_of(store, rec, config).vocab;
    FigureSeries s;
    s.label = run_label(rec);
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

const char* kFig5Title = "Average percentage of tokens going to attention per layer (DTRNet, Figure 5)";

Figure dtrnet_fig5(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kFig5Title);
  FigurePanel p;
  p.x_label = "Layer";
  p.y_label = "Tokens to attention (%)";
  std::size_t layers = 0;
  for (const auto id : request.run_ids) {
    const auto rec = run_record(store, id);
    const auto eval = val_eval(store, id, request.step);
    if (!eval) throw ConfigError(request.name + ": run " + std::to_string(id) + " has no validation evaluation");
    FigureBars::Member m;
    m.label = run_label(rec);
    m.color = arch_color(rec.arch);
    bool any_routed = false;
    for (const auto& l : eval->layers) {
      any_routed = any_routed || l.routed;
      // A layer that does not route sends every token through attention.
      m.values.push_back(l.routed ? 100.0 * l.routed_fraction : 100.0);
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

const char* kFig6Title = "KV cache memory for different sequence lengths (DTRNet, Figure 6)";

Figure dtrnet_fig6(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kFig6Title);
  const auto lengths = lengths_or_default(request);
  FigurePanel p;
  p.x_label = "Sequence length (tokens)";
  p.y_label = "KV cache (MiB)";
  p.log_x = p.log_y = true;
  for (const auto id : request.run_ids) {
    const auto rec = run_record(store, id);
    const auto model = run_config(store, rec).at("model");
    const auto n_head = model.value("n_head", std::int64_t{1});
    const auto n_kv = model.value("n_kv_head", std::int64_t{0}) > 0 ? model.at("n_kv_head").get<std::int64_t>() : n_head;
    const auto head_dim = model.value("n_embd", std::int64_t{0}) / std::max<std::int64_t>(1, n_head);
    const double entry_bytes = 2.0 * static_cast<double>(n_kv * head_dim) * 4.0;  // key + value, fp32
    // Cache entries after a prompt of t tokens, layer by layer under its architecture's rule (layer_kv_entries):
    // a routed DTRNet or MoD layer caches its attention tokens, a Radial layer its executions; a D-LLM layer's
    // prompt pass writes every slot (the skipped ones masked), as dense does.
    std::vector<LayerRouting> layers;
    const auto eval = val_eval(store, id, request.step);
    if (eval) {
      layers = eval->layers;
      f.meta["eval_step"][std::to_string(id)] = eval->step;
    } else {
      layers.resize(static_cast<std::size_t>(std::max<std::int64_t>(0, model.value("n_layer", std::int64_t{0}))));
      f.meta["eval_step"][std::to_string(id)] = nullptr;
    }
    FigureSeries s;
    s.label = run_label(rec);
    s.color = arch_color(rec.arch);
    s.marked = true;
    double entries = 0;
    for (const auto t : lengths) {
      entries = 0;
      for (const auto& l : layers) entries += layer_kv_entries(l, static_cast<double>(t));
      s.x.push_back(static_cast<double>(t));
      s.y.push_back(entries * entry_bytes / (1024.0 * 1024.0));
    }
    // At the last length asked (DRR's fixed memory entries make the per-token figure vary with the length).
    f.meta["entries_per_token"][std::to_string(id)] = entries / static_cast<double>(lengths.back());
    p.series.push_back(std::move(s));
  }
  f.meta["lengths"] = lengths;
  f.meta["bytes_per_element"] = 4;
  f.panels.push_back(std::move(p));
  return f;
}

}  // namespace

std::vector<FigureInfo> dtrnet_figures() {
  return {
      {"dtrnet-fig1", kFig1Title,
       "Per run a layers x layers heat map of cos(h_i(t), h_j(t)) averaged over the tokens of two fixed validation "
       "batches, from the checkpoint at `step` (0 = latest); dense, drr, dtrnet and mod runs. Reads run_ids, step.",
       1, dtrnet_fig1},
      {"dtrnet-fig3", kFig3Title,
       "Perplexity versus evaluation length from the runs' stored context-length curves (evaluation rows "
       "context:<scaling>x<factor> written by `routelab-cli context RUN --store`; the latest of each scaling). "
       "Reads run_ids.",
       1, dtrnet_fig3},
      {"dtrnet-fig4", kFig4Title,
       "FLOPs model (whole forward, LM head included) at each length relative to a dense model of the same shape, "
       "priced with each run's per-layer routed fractions of its validation evaluation at `step`. Reads run_ids, "
       "step, lengths (default 128 .. 32768).",
       1, dtrnet_fig4},
      {"dtrnet-fig5", kFig5Title,
       "Grouped bars: per layer, the percentage of tokens on the attention path in each run's inference-mode "
       "validation evaluation at `step` (a layer that does not route: 100%). Reads run_ids, step.",
       1, dtrnet_fig5},
      {"dtrnet-fig6", kFig6Title,
       "KV cache bytes (fp32 keys and values, batch 1) versus length under the inference rules: routed DTRNet, MoD "
       "and D-LLM layers cache their attention tokens (routed fractions of the evaluation at `step`), Radial layers "
       "their executions, other layers every token. Reads run_ids, step, lengths.",
       1, dtrnet_fig6},
  };
}

}  // namespace routelab::figure_detail
