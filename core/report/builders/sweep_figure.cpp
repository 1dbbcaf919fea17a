// The "sweep" figure: a metric of each run against every option its config sets apart from the other runs' (a
// learning-rate grid, MoD's capacities, DTRNet's routing), one panel per option: numbers on an x axis with each run a
// point and each architecture's mean per value a line (std over its runs there a band), other values as grouped bars
// of the mean per value and architecture. Each panel pools the runs over the other options' values (a marginal
// view, as a parameter scatter): the points show the spread that pooling leaves, and the title the share of the
// variance within architectures the option's values explain (partial eta squared). The run section (seed, name, device,
// threads) and the architecture are not options of the sweep: seeds are the repeats each mean is taken over, the
// architecture the colour.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "core/models/registry.h"
#include "core/report/builders/builder_detail.h"
#include "core/report/tables/config_diff.h"
#include "core/report/tables/table.h"
#include "core/util/errors.h"

namespace routelab::figure_detail {
namespace {

/// A run of the sweep: its metric at the request's step and its flattened config.
struct SweepRun {
  std::int64_t id = 0;
  std::string arch;
  double value = kNaN;
  std::map<std::string, json> options;  ///< dotted key -> leaf value
};

/// Whether a dotted key is an option of the sweep: not the run section (seeds are repeats, not settings) and not the
/// architecture (the colour).
bool swept_key(const std::string& key) { return key.rfind("run.", 0) != 0 && key != "model.arch"; }

std::string arch_label(const std::string& arch) {
  try {
    return architecture(arch).display_name;
  } catch (const ConfigError&) {
    return arch;  // a run stored by a build with other architectures
  }
}

/// The options whose values differ between the runs that set them (at least two values), in key order.
std::vector<std::string> swept_options(const std::vector<SweepRun>& runs) {
  std::map<std::string, std::set<std::string>> values;
  for (const auto& run : runs)
    for (const auto& [key, value] : run.options)
      if (swept_key(key)) values[key].insert(value.dump());
  std::vector<std::string> keys;
  for (const auto& [key, seen] : values)
    if (seen.size() > 1) keys.push_back(key);
  return keys;
}

/// The runs that set `key` (and have a value of the metric): by architecture, in the order the architectures first
/// appear, then by the option's value as `read` gives it (a number, a text).
template <typename Value, typename Read>
std::pair<std::vector<std::string>, std::map<std::string, std::map<Value, std::vector<double>>>> by_architecture(
    const std::string& key, const std::vector<SweepRun>& runs, Read read) {
  std::pair<std::vector<std::string>, std::map<std::string, std::map<Value, std::vector<double>>>> out;
  auto& [order, groups] = out;
  for (const auto& run : runs) {
    const auto it = run.options.find(key);
    if (it == run.options.end() || !std::isfinite(run.value)) continue;
    if (!groups.count(run.arch)) order.push_back(run.arch);
    groups[run.arch][read(it->second)].push_back(run.value);
  }
  return out;
}

/// An option's panel, titled by its key, the metric up.
FigurePanel option_panel(const std::string& key, const std::string& metric) {
  FigurePanel panel;
  panel.title = key;
  panel.x_label = key;
  panel.y_label = metric;
  return panel;
}

/// The panel of a numeric option: every run a point, each architecture's mean per value a line with a std band.
FigurePanel number_panel(const std::string& key, const std::vector<SweepRun>& runs, Styler& styler,
                         const std::string& metric) {
  auto panel = option_panel(key, metric);
  const auto [order, by_arch] = by_architecture<double>(key, runs, [](const json& v) { return v.get<double>(); });
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& [arch, values] : by_arch)
    lo = std::min(lo, values.begin()->first), hi = std::max(hi, values.rbegin()->first);
  panel.log_x = lo > 0 && hi / lo >= 10;  // a decade or more: a learning-rate grid
  for (const auto& arch : order) {
    FigureSeries points, means;
    points.kind = SeriesKind::Points;
    points.color = means.color = styler.next(arch).first;
    means.label = arch_label(arch);
    bool band = false;
    for (const auto& [x, values] : by_arch.at(arch)) {
      for (const double v : values) points.x.push_back(x), points.y.push_back(v);
      const auto s = *summarize(values);
      means.x.push_back(x);
      means.y.push_back(s.mean);
      means.y_lo.push_back(s.mean - s.std);
      means.y_hi.push_back(s.mean + s.std);
      band = band || s.n > 1;
    }
    if (!band) means.y_lo.clear(), means.y_hi.clear();
    panel.series.push_back(std::move(means));
    panel.series.push_back(std::move(points));
  }
  return panel;
}

/// The panel of any other option: a group of bars per value, a bar per architecture (its mean, std as error).
FigurePanel choice_panel(const std::string& key, const std::vector<SweepRun>& runs, Styler& styler,
                         const std::string& metric) {
  auto panel = option_panel(key, metric);
  const auto [order, by_arch] = by_architecture<std::string>(key, runs, config_value_text);
  std::set<std::string> categories;
  for (const auto& [arch, values] : by_arch)
    for (const auto& [category, unused] : values) categories.insert(category);
  panel.bars.categories.assign(categories.begin(), categories.end());
  for (const auto& arch : order) {
    FigureBars::Member member;
    member.label = arch_label(arch);
    member.color = styler.next(arch).first;
    for (const auto& category : panel.bars.categories) {
      const auto it = by_arch.at(arch).find(category);
      const auto s = it == by_arch.at(arch).end() ? std::nullopt : summarize(it->second);
      member.values.push_back(s ? s->mean : kNaN);
      member.errors.push_back(s ? s->std : 0.0);
    }
    panel.bars.members.push_back(std::move(member));
  }
  return panel;
}

/// The share of the metric's variance within architectures that the option's values explain (partial eta squared,
/// the architecture held out): over the runs of the architectures that set it to more than one value, the squares of
/// each (architecture, value) group's mean from its architecture's mean, weighted by the group's runs, over the
/// squares of each run from its architecture's mean. NaN where those runs do not vary.
double explained_share(const std::string& key, const std::vector<SweepRun>& runs) {
  const auto [order, by_arch] = by_architecture<std::string>(key, runs, [](const json& v) { return v.dump(); });
  double between = 0, total = 0;
  for (const auto& [arch, groups] : by_arch) {
    if (groups.size() < 2) continue;  // the option does not vary here: nothing of this variance is its
    double sum = 0, n = 0;
    for (const auto& [value, ys] : groups)
      for (const double y : ys) sum += y, n += 1;
    const double mean = sum / n;
    for (const auto& [value, ys] : groups) {
      double group = 0;
      for (const double y : ys) group += y, total += (y - mean) * (y - mean);
      group /= static_cast<double>(ys.size());
      between += static_cast<double>(ys.size()) * (group - mean) * (group - mean);
    }
  }
  return total > 0 ? between / total : kNaN;
}

}  // namespace

Figure build_sweep(const RunStore& store, const FigureRequest& request) {
  require_metric_somewhere(store, request, "sweep");
  std::vector<SweepRun> runs;
  for (const auto id : request.run_ids) {
    const auto record = run_record(store, id);
    SweepRun run{id, record.arch, last_finite(store, id, request.metric, request.step), {}};
    for (auto& [key, value] : flatten_config(run_config(store, record), "run " + std::to_string(id) + "'s config"))
      run.options.emplace(key, std::move(value));
    runs.push_back(std::move(run));
  }
  const auto keys = swept_options(runs);
  if (keys.empty())
    throw ConfigError(
        "sweep: the runs' configs differ in no option but the run section (seed, name) and the "
        "architecture: nothing to plot '" +
        request.metric + "' against");
  Figure f;
  f.columns = static_cast<int>(std::min<std::size_t>(3, keys.size()));
  Styler styler;  // one colour per architecture over every panel
  json shares = json::object();
  for (const auto& key : keys) {
    bool numbers = true;
    for (const auto& run : runs) {
      const auto it = run.options.find(key);
      numbers = numbers && (it == run.options.end() || it->second.is_number());
    }
    f.panels.push_back(numbers ? number_panel(key, runs, styler, request.metric)
                               : choice_panel(key, runs, styler, request.metric));
    const double share = explained_share(key, runs);
    if (std::isfinite(share)) f.panels.back().title += " \u00b7 \u03b7\u00b2 " + number_text(share, 2);
    shares[key] = std::isfinite(share) ? json(share) : json(nullptr);
  }
  f.meta["options"] = keys;
  f.meta["eta_squared"] = shares;  // per option: the share of the within-architecture variance it explains
  f.meta["higher_is_better"] = higher_is_better(request.metric);
  json values = json::array();
  for (const auto& run : runs)
    values.push_back({{"run", run.id}, {"value", std::isfinite(run.value) ? json(run.value) : json(nullptr)}});
  f.meta["values"] = values;
  return f;
}

}  // namespace routelab::figure_detail
