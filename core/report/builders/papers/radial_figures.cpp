// Radial Networks' named figures (5-7, 9, 10): residual-ratio profiles computed from the checkpoint
// through core/analysis (no run stores them), and the routing of the probe text.
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "core/analysis/residual_profile.h"
#include "core/analysis/run_analysis.h"
#include "core/report/builders/papers/paper_detail.h"
#include "core/util/errors.h"

namespace routelab::figure_detail {
namespace {

/// Radial Networks' LLM skip threshold (Radial Networks, Figure 7: "a layer skip is assumed when the residual ratio drops
/// below 5%"), used by every Radial Networks figure.
constexpr double kRadialTau = 0.05;

ResidualProfile profile_of(const RunStore& store, std::int64_t id, std::int64_t step) {
  auto run = load_run(store.path(), id, {}, step);
  ResidualProfileOptions o;
  o.tau = kRadialTau;
  return profile_residuals(run, o);
}

std::string block_label(int layer, const std::string& block) {
  return layer_label(layer) + (block == "attn" ? " ATT" : " FFN");
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
                            "5%) and the distribution of the oracle dynamic depth (Radial Networks, Figure 5)";

Figure radial_fig5(const RunStore& store, const FigureRequest& request) {
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
    const auto rec = run_record(store, id);
    const auto p = profile_of(store, id, request.step);
    std::map<std::string, double> v;
    for (const auto& s : p.blocks) {
      const auto label = block_label(s.layer, s.block);
      if (std::find(categories.begin(), categories.end(), label) == categories.end()) categories.push_back(label);
      v[label] = 100.0 * (1.0 - s.below_tau);
    }
    values.push_back(std::move(v));
    FigureBars::Member m;
    m.label = run_label(rec);
    m.color = arch_color(rec.arch);
    blocks.bars.members.push_back(std::move(m));
    FigureSeries s;
    s.label = run_label(rec);
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
                            "and block (Radial Networks, Figure 6)";

Figure radial_fig6(const RunStore& store, const FigureRequest& request) {
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
    const auto rec = run_record(store, id);
    const auto p = profile_of(store, id, request.step);
    for (auto [panel, block] : {std::pair{&att, "attn"}, std::pair{&ffn, "mlp"}}) {
      FigureSeries s;
      s.label = run_label(rec);
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
                            "interleaved), or for Radial Networks the layer chosen at each step (Radial Networks, Figure 7)";

Figure radial_fig7(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kRadial7Title);
  for (const auto id : request.run_ids) {
    const auto rec = run_record(store, id);
    FigurePanel p;
    p.title = run_label(rec);
    p.x_label = "Token";
    p.legend = false;
    auto& h = p.heatmap;
    // A model that routes each token along a path of layers (Radial Networks) stores it in its probe's token data;
    // the others are shown through the residual-ratio oracle.
    std::optional<ProbeRecord> stored;
    try {
      stored = probe_at(store, id, request.step, request.name);
    } catch (const ConfigError&) {  // no probe at that step: no stored path
    }
    const TokenSeries* path = stored ? stored->series("path") : nullptr;
    if (path && path->shape.size() == 1) {
      // The model's own routing: the stored probe's path (T, S), layer per step, -1 after the exit.
      h.cols = path->tokens();
      h.rows = static_cast<std::size_t>(path->shape[0]);
      const auto layers = run_config(store, rec).at("model").value("n_layer", std::int64_t{1});
      for (std::size_t s = 0; s < h.rows; ++s) {
        h.row_labels.push_back("step " + std::to_string(s));
        for (std::size_t t = 0; t < h.cols; ++t) {
          const double layer = path->at(t, s);
          h.values.push_back(layer < 0 ? kNaN : layer);
        }
      }
      h.col_labels = token_labels(stored->tokens);
      if (h.col_labels.size() != h.cols) h.col_labels.clear();
      h.lo = 0;
      h.hi = static_cast<double>(std::max<std::int64_t>(1, layers - 1));
      h.colour_label = "layer";
      p.y_label = "Routing step";
      f.meta["probe_step"][std::to_string(id)] = stored->step;
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
                            "tokens shaded (Radial Networks, Figure 9)";

Figure radial_fig9(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kRadial9Title);
  for (const auto id : request.run_ids) {
    const auto rec = run_record(store, id);
    const auto prof = profile_of(store, id, request.step);
    FigurePanel p;
    p.title = run_label(rec);
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

const char* kRadial10Title = "Residual ratios of every block and token, median dashed (Radial Networks, Figure 10)";

Figure radial_fig10(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kRadial10Title);
  for (const auto id : request.run_ids) {
    const auto rec = run_record(store, id);
    const auto prof = profile_of(store, id, request.step);
    FigurePanel p;
    p.title = run_label(rec);
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

std::vector<FigureInfo> radial_figures() {
  return {
      {"radial-fig5", kRadial5Title,
       "Residual-ratio profile (4 fixed validation batches, checkpoint at `step`): bars of the share of tokens with "
       "r >= 0.05 per block, and the distribution of the oracle dynamic depth. Reads run_ids, step.",
       1, radial_fig5},
      {"radial-fig6", kRadial6Title,
       "Histograms (32 log bins over 1e-3 .. 10) of r pooled over the layers, attention and FFN panels, one line per "
       "run. Reads run_ids, step.",
       1, radial_fig6},
      {"radial-fig7", kRadial7Title,
       "Per run a heat map over the probe text: blocks x tokens, 1 where r >= 0.05 (runs), 0 where the oracle skips, "
       "empty where the model did not run the block; radial runs: steps x tokens of the stored probe's path. "
       "Reads run_ids, step.",
       1, radial_fig7},
      {"radial-fig9", kRadial9Title,
       "Per run the mean residual ratio per layer of ATT and FFN blocks with the p10-p90 range shaded. Reads "
       "run_ids, step.",
       1, radial_fig9},
      {"radial-fig10", kRadial10Title,
       "Per run the histogram of r pooled over every block and token with its median (estimated from the "
       "histogram) dashed. Reads run_ids, step.",
       1, radial_fig10},
  };
}

}  // namespace routelab::figure_detail
