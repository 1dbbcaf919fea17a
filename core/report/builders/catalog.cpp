// The figure catalogue (the generic figures of figure_builders_*.cpp, then the seeds' figures), dispatch by name,
// and the training-FLOPs axis the curves and the dashboard share. The CSV / pgfplots files: figure_export_text.cpp.
#include "core/report/builders/catalog.h"

#include <cmath>

#include "core/analysis/routing_breakdown.h"
#include "core/cost/flops_model.h"
#include "core/report/builders/builder_detail.h"
#include "core/report/builders/papers/paper_figures.h"
#include "core/report/report_ids.h"
#include "core/store/metric_cache.h"
#include "core/store/run_store.h"
#include "core/util/errors.h"
#include "core/util/version.h"

namespace routelab {

using namespace figure_detail;

double training_step_dense_flops(const RunStore& store, std::int64_t run_id) {
  const auto run = run_record(store, run_id);
  const auto config = run_config(store, run);
  FlopsQuery q;
  q.batch = sequences_per_step(store, run, config);
  q.seq = config_int(store, run, config, "data", "context");
  try {
    return 3.0 * estimate_flops(full_model(store, run, config), 256, q).dense_layer_flops();
  } catch (const ConfigError& e) {
    throw ConfigError(store.path() + ": run " + std::to_string(run_id) + ": " + e.what());
  }
}

std::pair<std::vector<std::int64_t>, std::vector<double>> training_flops_ratios(const RunStore& store,
                                                                                 std::int64_t run_id) {
  auto points = read_metric(store, run_id, "train/flops_ratio");
  if (points.empty()) points = read_metric(store, run_id, "val/flops_ratio");
  std::pair<std::vector<std::int64_t>, std::vector<double>> out;
  for (const auto& p : points)
    if (std::isfinite(p.value)) out.first.push_back(p.step), out.second.push_back(p.value);
  return out;
}

CumulativeFlops training_flops_axis(const RunStore& store, std::int64_t run_id) {
  const double dense_step = training_step_dense_flops(store, run_id);
  auto [steps, ratios] = training_flops_ratios(store, run_id);
  if (ratios.empty())
    throw DataError(store.path() + ": run " + std::to_string(run_id) +
                    " stores neither train/flops_ratio nor val/flops_ratio: no FLOPs axis");
  return CumulativeFlops(dense_step, std::move(steps), std::move(ratios));
}

const std::vector<FigureInfo>& figure_catalog() {
  static const std::vector<FigureInfo> catalog = [] {
    std::vector<FigureInfo> c = {
        {"curves", "Metric versus training progress",
         "`metric` (default val/loss) against `x_axis`: step, tokens (step x train.batch_size x train.grad_accum x "
         "data.context), flops "
         "(cumulative training FLOPs of the layers: 3 x the FLOPs model's dense forward per step x the measured "
         "train/flops_ratio) or wall (seconds since the run started). With `by_seed`, runs differing only in their "
         "seed become one mean +- std line over the x range all of them cover. `smoothing` in (0, 1) on a train/* "
         "metric draws a debiased EMA over a faint raw line. One colour per architecture, one dash per variant.",
         1, build_curves},
        {"matched", "Quality at matched budgets",
         "`metric` linearly interpolated at `budgets` on `x_axis` (the CLI defaults to flops here; no extrapolation: "
         "a budget outside a run's range is missing for that run), points and lines per group, mean +- std over "
         "seeds. Empty `budgets`: five evenly spaced budgets up to the largest value every run reaches. The same "
         "numbers as a table: matched_budget_table().",
         1, build_matched},
        {"pareto", "Quality versus cost",
         "`metric`'s last value against the FLOPs ratio at evaluation (last val/flops_ratio, else the last "
         "evaluation's flops_ratio), one point per group (mean over seeds, std as error), and the Pareto front "
         "(higher is better for accuracy, F1, throughput and 'saved' metrics, else lower).",
         1, build_pareto},
        {"sweep", "Quality versus each swept option",
         "`metric`'s value at `step` (0: the last one) against every option the runs' configs set to more than one "
         "value (the run section, seeds and names, and the architecture left out), a panel each: a number on the x "
         "axis (logarithmic where its values are positive and span 10x or more), each run a point and each "
         "architecture's mean over its runs at a value a line, std over them a band; any other value (a choice, a "
         "truth value) as grouped bars, one bar per architecture (mean, std as error). A panel pools the runs over "
         "the other options' values (a marginal view); its title gives the share of the variance within "
         "architectures the option's values explain (partial eta squared, over the architectures it varies in; "
         "meta eta_squared). One colour per architecture.",
         2, build_sweep},
        {"sweep-grid", "Quality over two swept options",
         "`metric`'s value at `step` (0: the last one) over the grid of two swept options, `options` (rows, then "
         "columns; default: the two whose values explain the most variance within architectures), a heat map per "
         "architecture that sets both, each cell the mean over its runs written inside (the architecture's best "
         "cell in brackets) on one colour scale for every panel. Other swept options are pooled (meta pooled_over). "
         "A panel's title gives the share of the architecture's variance the two options' interaction explains "
         "(what the sweep figure's marginal panels cannot show; a complete grid with as many runs in each cell, "
         "meta interaction_eta_squared); meta cells lists each cell's mean, std and runs.",
         2, build_sweep_grid},
        {"routed-layers", "Routed tokens per layer",
         "Per layer, the percentage of tokens on the routed path in the inference-mode evaluation at `step` (0: the "
         "last one), grouped bars with std over seeds as error bars; layers that do not route are hatched full bars "
         "(DTRNet Figure 5). `metric` 'training' draws the training-mode shares logged at or before `step` "
         "instead, 'both' draws them faint beside the inference bars where the run logged them (the dashboard's "
         "panel).",
         1, build_routed_layers},
        {"routing-history", "Routing over training",
         "Per run a heat map of layers x logged steps: the percentage of tokens each layer routed in training mode "
         "at each logged step; layers that do not route (per the last evaluation) are empty (the dashboard's panel).",
         1, build_routing_history},
        {"cost-length", "FLOPs ratio and KV cache versus sequence length",
         "From the FLOPs model with each run's routed fractions measured at evaluation `step` (0: the last): the "
         "layers' FLOPs ratio to a dense model and the KV cache in MiB of one sequence, per length in `lengths` "
         "(default 64 .. max(8192, 4 x context), powers of two), one line per run, the dense reference dashed, "
         "and the FLOPs ratio the evaluation measured from the real decisions as a point at the run's context "
         "(DTRNet Figures 4 and 6; the dashboard's panel).",
         1, build_cost_length},
        {"token-maps", "Per-token routing of the probe text",
         "Heat maps (layers x probe tokens) of the first two runs' probe at `step` (0: the last): the gate, or the "
         "binary decision when `metric` is 'decision' (a layer without a gate shows its decision), and their "
         "difference on a diverging scale. Both runs must have probed the same text.",
         2, build_token_maps},
        {"token-map", "Per-token routing of one run's probe",
         "Per run a heat map of rows x probe tokens at probe `step` (0: the last one): each routed layer coloured by "
         "`metric` 'gate' (default), 'decision' or 'expert' (TAGAT: the chosen experts per rank), then each "
         "per-token series the model reports (exit layer, depth, path, ...) and p(next token); every row over its "
         "own range (the dashboard's token view).",
         1, build_token_map},
        {"metrics", "A run's other metrics",
         "One run's metrics besides the loss as small multiples, one panel per quantity (learning rate, gradient "
         "norm, tokens/s, auxiliary loss, router entropy, load imbalance, routed fraction, FLOPs ratio; accuracy "
         "and macro-F1 first for classifiers), its train series a line, its val points marked, against step. "
         "`metric` a quantity ('lr') or key ('train/lr') draws its panel alone; 'all' (the default) every panel "
         "(the dashboard's Metrics tab).",
         1, build_metrics, 1},
        {"expert-loads", "Expert loads per layer",
         "Per run, each expert's share of a layer's token-expert assignments at the validation evaluation `step` "
         "(0: the last), grouped bars per layer against the uniform share 1/N (TAGAT Figure 3, left; the "
         "dashboard's Metrics tab).",
         1, build_expert_loads},
        {"routing-by-token", "What the routers route",
         "Per run a heat map of token groups x routed layers: the percentage of each group's tokens the layer sends "
         "down its routed path, in inference mode, over 16,384 validation tokens in windows spread over the split, "
         "from the checkpoint of `step` (0: the latest). `metric` chooses the groups: class (default: space, newline, "
         "punctuation, digit, word start, mid-word, other), position (in the window), frequency (in the training "
         "split), predictability (quartiles of the model's p(token | past)) or difficulty (quartiles of the "
         "next-token loss); the sidecar holds each group's full label and token count (`routelab-cli "
         "routing-breakdown` prints them). A run that routes no token (a dense baseline) draws no panel.",
         1, build_routing_by_token, 0, token_grouping_names()},
        {"routing-by-token-history", "What the routers route, over training",
         "Per run, one line per token group: the percentage of the group's token-layer decisions on the routed path "
         "(the mean over the routed layers of routing-by-token's cells) at each checkpoint, up to 12 spread from the "
         "first to the last. `metric` chooses the groups as for routing-by-token (predictability and difficulty "
         "quartiles are the model's own at each checkpoint). Each checkpoint's breakdown is kept in the run store, so "
         "the first drawing computes the ones not asked for before (about a second each on 2 cores for the "
         "presets) and later ones read them. A run that routes no token draws no panel.",
         1, build_routing_by_token_history, 0, token_grouping_names()},
        {"routing-by-token-history-layers", "What each routed layer routes, over training",
         "routing-by-token-history with a panel per run and routed layer: the percentage of the group's tokens the "
         "layer sends down its routed path at each checkpoint (the layers that divide the groups between them, "
         "which the mean hides: MoD's, D-LLM's). The same kept breakdowns; `metric` as for routing-by-token.",
         1, build_routing_by_token_history_layers, 0, token_grouping_names()},
        {"routing-stability", "Routing stability over training",
         "Per run, one line per routed layer: the Jaccard overlap of the probe tokens the layer routes at each "
         "evaluation with those it routed at the evaluation before (1: the same tokens; 0: none in common; 1 where "
         "neither routes any), from the stored probes (the run's fixed probe text, in inference mode). Runs without "
         "two probes of a routed layer draw nothing.",
         1, build_routing_stability},
    };
    for (auto& f : paper_figures()) c.push_back(std::move(f));
    return c;
  }();
  return catalog;
}

const FigureInfo& figure_info(const std::string& name) {
  std::string known;
  const std::string wanted = current_id(name);  // an earlier id ("dtrnet-fig5") names the same figure
  for (const auto& info : figure_catalog()) {
    if (info.name == wanted) return info;
    known += (known.empty() ? "" : ", ") + info.name;
  }
  throw ConfigError("unknown figure '" + name + "' (known: " + known + ")");
}

const std::vector<FigureTableInfo>& figure_tables() {
  static const std::vector<FigureTableInfo> kTables = {
      {"matched", "Metric at matched budgets",
       "The figure's metric read at the budgets on its x axis: a row per group of seeds, a column per budget "
       "(mean \u00b1 std over seeds)",
       matched_budget_table},
      {"sweep-grid", "Grid of two swept options",
       "The metric over two swept options (those of the sweep-grid figure): a row per architecture and value of the "
       "first, a column per value of the second (mean \u00b1 std over each cell's runs)",
       sweep_grid_table},
  };
  return kTables;
}

const FigureTableInfo& figure_table(const std::string& figure) {
  std::string known;
  for (const auto& info : figure_tables()) {
    if (info.figure == current_id(figure)) return info;
    known += (known.empty() ? "'" : ", '") + info.figure + "'";
  }
  throw ConfigError("figure '" + figure + "' has no table (the figures with one: " + known + ")");
}

RunStyle run_style(const RunStore& store, std::int64_t run_id) {
  FigureRequest request;
  request.run_ids = {run_id};
  const auto groups = styled_groups(store, request);
  return {groups.front().group.label, groups.front().color};
}

std::vector<MetricPoint> read_metric(const RunStore& store, std::int64_t run_id, const std::string& key) {
  auto* cache = CachedMetricReads::current();
  return cache ? cache->series(store, run_id, key) : store.metric(run_id, key);
}

Figure build_figure(const RunStore& store, const FigureRequest& request) {
  const auto& info = figure_info(request.name);
  if (request.run_ids.size() < info.min_runs)
    throw ConfigError("figure '" + info.name + "' needs at least " + std::to_string(info.min_runs) + " run" +
                      (info.min_runs == 1 ? "" : "s") + ", got " + std::to_string(request.run_ids.size()));
  if (info.max_runs && request.run_ids.size() > info.max_runs)
    throw ConfigError("figure '" + info.name + "' draws at most " + std::to_string(info.max_runs) + " run" +
                      (info.max_runs == 1 ? "" : "s") + ", got " + std::to_string(request.run_ids.size()));
  for (auto id : request.run_ids)
    if (!store.run(id)) throw StoreError(store.path() + ": no run " + std::to_string(id));
  if (!(request.width_cm > 0) || !(request.height_cm > 0) || !(request.font_pt > 0))
    throw ConfigError("figure '" + info.name + "': width, height and font size must be > 0");
  // Every refusal names the figure (a builder's helpers may not), and a figure with nothing to draw is one.
  const auto named = [&](const std::exception& e) {
    const std::string what = e.what();
    return what.find(info.name) != std::string::npos ? what : info.name + ": " + what;
  };
  Figure figure;
  try {
    figure = info.build(store, request);
  } catch (const ConfigError& e) {
    throw ConfigError(named(e));
  } catch (const DataError& e) {
    throw DataError(named(e));
  } catch (const CheckpointError& e) {  // a figure computed from the weights (routing-by-token, dtrnet-fig1, ...)
    throw CheckpointError(named(e));
  }
  if (figure.empty()) throw DataError(info.name + ": the runs hold nothing this figure draws");
  figure.name = info.name;
  if (figure.title.empty()) figure.title = info.title;
  figure.width_cm = request.width_cm;
  figure.height_cm = request.height_cm;
  figure.font_pt = request.font_pt;
  if (!figure.meta.is_object()) figure.meta = json::object();
  figure.meta["run_ids"] = request.run_ids;
  figure.meta["request"] = {
      {"name", request.name},       {"run_ids", request.run_ids},     {"metric", request.metric},
      {"x_axis", request.x_axis},   {"smoothing", request.smoothing}, {"by_seed", request.by_seed},
      {"budgets", request.budgets}, {"step", request.step},           {"lengths", request.lengths},
      {"options", request.options}, {"width_cm", request.width_cm},   {"height_cm", request.height_cm},
      {"font_pt", request.font_pt}};
  figure.meta["routelab_version"] = ROUTELAB_VERSION;
  figure.meta["store"] = store.path();
  return figure;
}

}  // namespace routelab
