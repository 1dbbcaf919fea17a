// The figure catalogue on a small synthetic store: every generic figure's panels, series and values against
// hand computations (bands over seeds, matched budgets, cumulative FLOPs from the measured ratio, KV bytes), the
// tidy CSV read back, the pgfplots picture compiled with pdflatex, the sidecar round trip, and the errors.
#include <QFile>
#include <QProcess>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include <nlohmann/json.hpp>

#include "core/config/experiment_config.h"
#include "core/cost/flops_model.h"
#include "core/report/builders/catalog.h"
#include "core/report/builders/papers/paper_figures.h"
#include "core/report/export/figure_files.h"
#include "core/report/figure/run_panels.h"
#include "core/report/report_ids.h"
#include "core/report/tables/run_tables.h"
#include "core/report/tables/table.h"
#include "core/store/run_store.h"
#include "core/util/errors.h"
#include "store_test_support.h"
#include "tests/suite.h"

namespace test_figures {

using namespace routelab;
using nlohmann::json;
using routelab::test::contains;
using routelab::test::error_of;
using routelab::test::kNoException;

namespace {

json resolved(const std::string& arch, std::int64_t seed) {
  const json overrides = {{"model", {{"arch", arch}, {"n_layer", 2}, {"n_embd", 32}, {"n_head", 2}}},
                          {"data", {{"context", 16}}},
                          {"train", {{"batch_size", 4}, {"steps", 20}, {"warmup_steps", 2}}},
                          {"run", {{"seed", seed}}}};
  return resolve_config(overrides, {}, "test").doc;
}

bool is_paper_figure(const std::string& name) {
  for (const auto& f : paper_figures())
    if (f.name == name) return true;
  return false;
}

bool near(double a, double b, double tol = 1e-9) { return std::abs(a - b) <= tol * std::max(1.0, std::abs(b)); }

/// Two dense seeds and one MoD run with metrics, measured FLOPs ratios, evaluations and probes.
struct Fixture {
  QTemporaryDir dir;
  std::unique_ptr<RunStore> store;
  std::int64_t dense1 = 0, dense2 = 0, mod = 0;
  json mod_model, dense_model;

  Fixture() {
    store = std::make_unique<RunStore>(dir.filePath("runs.sqlite").toStdString());
    dense1 = add("dense/seed=1", "dense", 1, {4.0, 3.0, 2.0}, {{1, 1.0}, {10, 1.0}, {20, 1.0}}, false);
    dense2 = add("dense/seed=2", "dense", 2, {4.0, 2.5, 2.5}, {{1, 1.0}, {10, 1.0}, {20, 1.0}}, false);
    mod = add("mod", "mod", 1, {4.0, 3.2, 2.4}, {{1, 0.5}, {10, 0.7}, {20, 0.7}}, true);
    dense_model = resolved("dense", 1).at("model");
    mod_model = resolved("mod", 1).at("model");
  }

  std::int64_t add(const std::string& name, const std::string& arch, std::int64_t seed, const std::vector<double>& val,
                   const std::vector<std::pair<std::int64_t, double>>& ratios, bool routed, bool log_routing = true) {
    auto r = test::sample_run(name);
    r.arch = arch;
    r.seed = seed;
    r.config_json = resolved(arch, seed).dump();
    const auto id = store->create_run(r);
    const double t0 = store->run(id)->created_at;
    std::vector<MetricRow> rows;
    for (std::size_t i = 0; i < val.size(); ++i) {
      const auto step = static_cast<std::int64_t>(10 * i);
      rows.push_back({"val/loss", step, t0 + 2.0 * static_cast<double>(step), val[i]});
    }
    for (std::int64_t step = 1; step <= 20; ++step)
      rows.push_back({"train/loss", step, t0 + 2.0 * static_cast<double>(step), 5.0 - 0.1 * static_cast<double>(step)});
    for (const auto& [step, ratio] : ratios) rows.push_back({"train/flops_ratio", step, t0 + step, ratio});
    if (!routed) rows.push_back({"val/flops_ratio", 20, t0 + 40, 1.0});
    store->insert_metrics(id, rows);
    // Inference routing of the last evaluation: MoD routes layer 1 (25 % of the tokens), layer 0 is dense.
    json layers = json::array({{{"layer", 0}, {"kind", "dense"}, {"routed", false}, {"routed_fraction", 1.0}}});
    layers.push_back(routed ? json{{"layer", 1}, {"kind", "mod"}, {"routed", true}, {"routed_fraction", 0.25}}
                            : json{{"layer", 1}, {"kind", "dense"}, {"routed", false}, {"routed_fraction", 1.0}});
    // Expert loads (the "expert-loads" figure reads any run's): two experts in layer 1.
    const json stats = {{"load/L1/E0", routed ? 0.7 : 0.5}, {"load/L1/E1", routed ? 0.3 : 0.5}};
    const json extra = {{"mode", "inference"}, {"flops_ratio", routed ? 0.8 : 1.0}, {"layers", layers},
                        {"stats", stats}};
    store->insert_eval(id, {20, "val", val.back(), std::exp(val.back()), 0.0, extra.dump()});
    // Probe: three tokens (one of them a comma), per-layer gates.
    const double g = routed ? 0.9 : 0.2;
    const json probe = {{"tokens", {"a", ",", "b c\u23CE"}},
                        {"layers",
                         {{{"layer", 0}, {"kind", "dense"}, {"routed", false}, {"gate", {0.1, 0.2, 0.3}}},
                          {{"layer", 1}, {"kind", "mod"}, {"routed", true}, {"gate", {g, 0.5, 0.0}},
                           {"decision", {1, 0, 0}}}}}};
    store->insert_probe(id, {20, probe.dump()});
    if (routed) {  // an earlier probe: layer 1 routed tokens 0 and 1 then (Jaccard with step 20's token 0: 1/2)
      auto earlier = probe;
      earlier["layers"][1]["decision"] = {1, 1, 0};
      store->insert_probe(id, {10, earlier.dump()});
    }
    // Training-mode routing logged at steps 10 and 20: MoD's layer 1 routes 30 %, then 35 %.
    std::vector<RoutingRow> routing;
    for (const std::int64_t step : {10, 20})
      for (int layer = 0; layer < 2; ++layer)
        routing.push_back({step, layer, routed && layer == 1 ? (step == 10 ? 0.30 : 0.35) : 1.0, 0, 0, 0, 0});
    if (log_routing) store->insert_routing(id, routing);
    return id;
  }

  FigureRequest request(const std::string& name, std::vector<std::int64_t> runs) const {
    FigureRequest r;
    r.name = name;
    r.run_ids = std::move(runs);
    return r;
  }
};

/// Compiles `tex` (written next to `csv`) with pdflatex in `dir`; "" on success, else the log's tail.
QString compile(const QString& pdflatex, const QString& dir, const std::string& tex_name) {
  QProcess latex;
  latex.setWorkingDirectory(dir);
  latex.start(pdflatex, {"-interaction=nonstopmode", "-halt-on-error", QString::fromStdString(tex_name)});
  if (!latex.waitForFinished(180000)) return "pdflatex did not finish";
  if (latex.exitCode() != 0) return QString::fromUtf8(latex.readAllStandardOutput().right(3000));
  return {};
}

}  // namespace

class TestFigures : public QObject {
  Q_OBJECT

 private slots:
  void catalogueListsGenericFiguresFirst() {
    const auto& catalog = figure_catalog();
    QVERIFY(catalog.size() >= 6);
    const std::vector<std::string> generic = {"curves",     "matched",       "pareto",          "sweep",
                                              "sweep-grid", "routed-layers", "routing-history", "cost-length",
                                              "token-maps", "token-map",     "metrics",         "expert-loads"};
    for (std::size_t i = 0; i < generic.size(); ++i) {
      QCOMPARE(catalog[i].name, generic[i]);
      QVERIFY(!catalog[i].description.empty() && !catalog[i].title.empty() && catalog[i].build);
    }
    QCOMPARE(figure_info("token-maps").min_runs, std::size_t{2});
    try {
      figure_info("no-such-figure");
      QFAIL("an unknown figure must throw");
    } catch (const ConfigError& e) {
      QVERIFY(std::string(e.what()).find("unknown figure 'no-such-figure' (known: curves, matched") != std::string::npos);
    }
  }

  void errorsNameTheProblem() {
    Fixture fx;
    try {
      build_figure(*fx.store, fx.request("token-maps", {fx.mod}));
      QFAIL("too few runs must throw");
    } catch (const ConfigError& e) {
      QVERIFY2(std::string(e.what()).find("needs at least 2 runs, got 1") != std::string::npos, e.what());
    }
    try {
      build_figure(*fx.store, fx.request("curves", {fx.mod, 999}));
      QFAIL("an unknown run must throw");
    } catch (const StoreError& e) {
      QVERIFY2(std::string(e.what()).find(fx.store->path() + ": no run 999") != std::string::npos, e.what());
    }
    auto r = fx.request("curves", {fx.mod});
    r.metric = "val/nothing";
    QVERIFY_EXCEPTION_THROWN(build_figure(*fx.store, r), ConfigError);
    r.metric = "val/loss";
    r.x_axis = "epochs";
    QVERIFY_EXCEPTION_THROWN(build_figure(*fx.store, r), ConfigError);
    auto p = fx.request("routed-layers", {fx.mod});
    p.step = 7;
    QVERIFY_EXCEPTION_THROWN(build_figure(*fx.store, p), DataError);
  }

  void curvesBandSeedsIntoMeanAndStd() {
    Fixture fx;
    auto r = fx.request("curves", {fx.dense1, fx.mod, fx.dense2});
    r.width_cm = 12;
    const auto f = build_figure(*fx.store, r);
    QCOMPARE(f.name, std::string("curves"));
    QCOMPARE(f.width_cm, 12.0);
    QVERIFY(f.meta.at("run_ids") == json({fx.dense1, fx.mod, fx.dense2}));
    QCOMPARE(f.meta.at("store").get<std::string>(), fx.store->path());
    QVERIFY(f.meta.contains("routelab_version") && f.meta.at("request").at("metric") == "val/loss");
    QCOMPARE(f.panels.size(), std::size_t{1});
    const auto& p = f.panels[0];
    QCOMPARE(p.x_label, std::string("step"));
    QCOMPARE(p.y_label, std::string("val/loss"));
    QCOMPARE(p.series.size(), std::size_t{2});
    const auto& dense = p.series[0];
    QCOMPARE(dense.label, std::string("dense (2 seeds)"));
    QCOMPARE(dense.x, (std::vector<double>{0, 10, 20}));
    // Step 10: losses 3.0 and 2.5 -> mean 2.75, sample std sqrt(2 * 0.25^2 / 1).
    const double sd = std::sqrt(2 * 0.25 * 0.25);
    QCOMPARE(dense.y[1], 2.75);
    QVERIFY(near(dense.y_lo[1], 2.75 - sd) && near(dense.y_hi[1], 2.75 + sd));
    QCOMPARE(dense.y[2], 2.25);
    QCOMPARE(dense.y_lo[0], 4.0);  // equal at step 0: no spread
    const auto& mod = p.series[1];
    QCOMPARE(mod.label, std::string("mod"));
    QVERIFY(mod.y_lo.empty());
    QCOMPARE(mod.y, (std::vector<double>{4.0, 3.2, 2.4}));
    QVERIFY(dense.color != mod.color);  // one colour per architecture
    // Without grouping every run is its own line; both dense runs share a colour and differ in dash.
    r.by_seed = false;
    const auto ungrouped = build_figure(*fx.store, r);
    QCOMPARE(ungrouped.panels[0].series.size(), std::size_t{3});
    QCOMPARE(ungrouped.panels[0].series[0].color, ungrouped.panels[0].series[2].color);
    QVERIFY(ungrouped.panels[0].series[0].dash != ungrouped.panels[0].series[2].dash);
  }

  void curvesSmoothTrainingMetrics() {
    Fixture fx;
    auto r = fx.request("curves", {fx.mod});
    r.metric = "train/loss";
    r.smoothing = 0.5;
    const auto f = build_figure(*fx.store, r);
    const auto& s = f.panels[0].series;
    QCOMPARE(s.size(), std::size_t{2});
    QVERIFY(s[0].faint && s[0].label.empty());
    QCOMPARE(s[0].y[1], 5.0 - 0.2);
    // Debiased EMA: a = 4.9, b = 4.8: s1 = a; s2 = (0.25 a + 0.5 b) / 0.75.
    QVERIFY(near(s[1].y[0], 4.9));
    QVERIFY(near(s[1].y[1], (0.25 * 4.9 + 0.5 * 4.8) / 0.75));
    QVERIFY(!s[1].faint && s[1].label == "mod");
    r.smoothing = 1.0;
    QVERIFY_EXCEPTION_THROWN(build_figure(*fx.store, r), ConfigError);
  }

  void flopsAxisIntegratesTheMeasuredRatio() {
    Fixture fx;
    auto r = fx.request("curves", {fx.mod});
    r.x_axis = "flops";
    const auto f = build_figure(*fx.store, r);
    FlopsQuery q;
    q.seq = 16;
    q.batch = 4;
    const double step_flops = 3.0 * estimate_flops(fx.mod_model, 256, q).dense_layer_flops();
    QVERIFY(step_flops > 0);
    const auto& s = f.panels[0].series[0];
    QCOMPARE(f.panels[0].x_label, std::string("training FLOPs (layers)"));
    // Ratio 0.5 logged at step 1 holds for steps 1..9, 0.7 from step 10 on.
    QCOMPARE(s.x[0], 0.0);
    QVERIFY(near(s.x[1], step_flops * (9 * 0.5 + 1 * 0.7)));
    QVERIFY(near(s.x[2], step_flops * (9 * 0.5 + 11 * 0.7)));
    r.x_axis = "tokens";
    QCOMPARE(build_figure(*fx.store, r).panels[0].series[0].x[2], 20.0 * 4 * 16);
    r.x_axis = "wall";
    QVERIFY(near(build_figure(*fx.store, r).panels[0].series[0].x[2], 40.0, 1e-6));
  }

  void matchedInterpolatesAtBudgets() {
    Fixture fx;
    auto r = fx.request("matched", {fx.dense1, fx.dense2, fx.mod});
    r.budgets = {5, 15, 25};
    const auto f = build_figure(*fx.store, r);
    const auto& s = f.panels[0].series;
    QCOMPARE(s.size(), std::size_t{2});
    QCOMPARE(s[0].x, (std::vector<double>{5, 15, 25}));
    // Dense seed 1 at 5: 3.5, seed 2: 3.25; at 15: 2.5 and 2.5; 25 is past both runs.
    QCOMPARE(s[0].y[0], 3.375);
    QVERIFY(near(s[0].y_hi[0] - s[0].y[0], std::sqrt(2 * 0.125 * 0.125)));
    QCOMPARE(s[0].y[1], 2.5);
    QVERIFY(std::isnan(s[0].y[2]));
    QCOMPARE(s[1].y[0], 3.6);   // MoD: halfway from 4.0 to 3.2
    QVERIFY(near(s[1].y[1], 2.8));
    const auto table = matched_budget_table(*fx.store, r);
    QCOMPARE(table.rows.size(), std::size_t{2});
    QCOMPARE(table.columns.size(), std::size_t{3});
    QCOMPARE(table.columns[0].header, std::string("@ 5"));
    QCOMPARE(table.rows[0].label, std::string("dense (2 seeds)"));
    QCOMPARE(table.rows[0].cells[0]->mean, 3.375);
    QVERIFY(near(table.rows[0].cells[0]->std, std::sqrt(2 * 0.125 * 0.125)));
    QCOMPARE(table.rows[0].cells[0]->n, std::int64_t{2});
    QVERIFY(!table.rows[0].cells[2].has_value());
    QCOMPARE(best_row(table, 0), 0);  // 3.375 < 3.6
    QVERIFY2(to_latex(table).find("3.3750 \\pm 0.1768") != std::string::npos, to_latex(table).c_str());
  }

  void paretoMarksTheFront() {
    Fixture fx;
    const auto f = build_figure(*fx.store, fx.request("pareto", {fx.dense1, fx.dense2, fx.mod}));
    const auto& s = f.panels[0].series;
    QCOMPARE(s.size(), std::size_t{3});
    QCOMPARE(s[0].kind, SeriesKind::Points);
    QCOMPARE(s[0].x[0], 1.0);    // val/flops_ratio
    QCOMPARE(s[0].y[0], 2.25);   // mean of the last losses 2.0 and 2.5
    QCOMPARE(s[1].x[0], 0.8);    // no val/flops_ratio: the evaluation's flops_ratio
    QCOMPARE(s[1].y[0], 2.4);
    QVERIFY(s[2].marked && s[2].label == "Pareto front");
    QCOMPARE(s[2].x, (std::vector<double>{0.8, 1.0}));  // neither dominates the other
    QCOMPARE(f.meta.at("higher_is_better").get<bool>(), false);
  }

  void sweepPlotsTheMetricAgainstEachSweptOption() {
    // A grid of MoD runs (capacity x lr, two seeds at one point, one in bf16) and dense at two learning rates: a
    // panel per option set to more than one value (not the seed, the name or the architecture), in key order; a
    // number as each architecture's mean per value (std band where it has repeats) over every run's point, on a log
    // axis over a decade; a choice as bars of the mean per value and architecture; `step` reads earlier values.
    Fixture fx;
    const auto add = [&](const std::string& arch, double lr, double capacity, const std::string& precision, int seed,
                         double loss) {
      json model = {{"arch", arch}, {"n_layer", 2}};
      if (capacity > 0) model["capacity"] = capacity;
      const json config = {{"model", model},
                           {"train", {{"lr", lr}, {"precision", precision}}},
                           {"run", {{"seed", seed}, {"name", arch + std::to_string(seed)}}}};
      auto r = test::sample_run(arch + std::to_string(seed));
      r.arch = arch;
      r.seed = seed;
      r.config_json = config.dump();
      const auto id = fx.store->create_run(r);
      fx.store->insert_metrics(id, {{"val/loss", 100, 0.0, loss + 1}, {"val/loss", 200, 1.0, loss}});
      return id;
    };
    const std::vector<std::int64_t> runs = {
        add("mod", 1e-3, 0.25, "fp32", 1, 3.0), add("mod", 1e-3, 0.25, "fp32", 2, 3.2),
        add("mod", 1e-2, 0.5, "bf16", 1, 2.6), add("dense", 1e-3, 0, "fp32", 1, 2.8),
        add("dense", 1e-2, 0, "fp32", 1, 2.4)};
    auto request = fx.request("sweep", runs);
    const auto f = build_figure(*fx.store, request);
    QCOMPARE(f.meta.at("options"), json({"model.capacity", "train.lr", "train.precision"}));
    // The share of the within-architecture variance each option explains: MoD's groups 0.1667 of its 0.1867 for
    // capacity and precision (dense does not vary in precision: left out), with dense's 0.08 of 0.08 for lr.
    QVERIFY(near(f.meta.at("eta_squared").at("model.capacity").get<double>(), 0.5 / 0.56));
    QVERIFY(near(f.meta.at("eta_squared").at("train.precision").get<double>(), 0.5 / 0.56));
    QVERIFY(near(f.meta.at("eta_squared").at("train.lr").get<double>(), (0.5 / 3 + 0.08) / (0.56 / 3 + 0.08)));
    QCOMPARE(f.panels[0].title, std::string("model.capacity \u00b7 \u03b7\u00b2 0.89"));
    QCOMPARE(f.panels.size(), std::size_t{3});
    const double sd = std::sqrt(0.02);  // the two seeds' 3.0 and 3.2
    const auto& capacity = f.panels[0];
    QCOMPARE(capacity.x_label, std::string("model.capacity"));
    QVERIFY(!capacity.log_x);
    QCOMPARE(capacity.series.size(), std::size_t{2});  // MoD alone sets it: its means, its points
    QCOMPARE(capacity.series[0].x, (std::vector<double>{0.25, 0.5}));
    QVERIFY(near(capacity.series[0].y[0], 3.1) && near(capacity.series[0].y[1], 2.6));
    QCOMPARE(capacity.series[0].y_lo.size(), std::size_t{2});
    QVERIFY(near(capacity.series[0].y_lo[0], 3.1 - sd) && near(capacity.series[0].y_hi[1], 2.6));
    QCOMPARE(capacity.series[1].kind, SeriesKind::Points);
    QCOMPARE(capacity.series[1].y, (std::vector<double>{3.0, 3.2, 2.6}));
    const auto& lr = f.panels[1];
    QVERIFY(lr.log_x);
    QCOMPARE(lr.series.size(), std::size_t{4});
    QCOMPARE(lr.series[2].label, architecture("dense").display_name);
    QCOMPARE(lr.series[2].y, (std::vector<double>{2.8, 2.4}));
    QVERIFY(lr.series[2].y_lo.empty());  // one run at each value: no band
    QVERIFY(lr.series[0].color != lr.series[2].color);
    const auto& precision = f.panels[2].bars;
    QCOMPARE(precision.categories, (std::vector<std::string>{"bf16", "fp32"}));
    QCOMPARE(precision.members.size(), std::size_t{2});
    QVERIFY(near(precision.members[0].values[0], 2.6) && near(precision.members[0].values[1], 3.1));
    QVERIFY(near(precision.members[0].errors[1], sd));
    QVERIFY(std::isnan(precision.members[1].values[0]) && near(precision.members[1].values[1], 2.6));
    QVERIFY(to_json(figure_from_json(to_json(f), "sidecar")) == to_json(f));
    request.step = 100;
    QVERIFY(near(build_figure(*fx.store, request).panels[0].series[0].y[1], 3.6));
    // Runs differing in their seeds alone: nothing to plot against.
    const auto refused = error_of<ConfigError>([&] {
      build_figure(*fx.store, fx.request("sweep", {fx.dense1, fx.dense2}));
    });
    QVERIFY2(contains(refused, "differ in no option"), refused.c_str());
  }

  void routedLayersHatchDenseLayers() {
    Fixture fx;
    const auto f = build_figure(*fx.store, fx.request("routed-layers", {fx.dense1, fx.dense2, fx.mod}));
    const auto& bars = f.panels[0].bars;
    QCOMPARE(bars.categories, (std::vector<std::string>{"L0", "L1"}));
    // dense group: only a hatched member; MoD: a routed member and a hatched one.
    QCOMPARE(bars.members.size(), std::size_t{3});
    QVERIFY(bars.members[0].hatched);
    QCOMPARE(bars.members[0].values, (std::vector<double>{100.0, 100.0}));
    QCOMPARE(bars.members[1].label, std::string("mod"));
    QVERIFY(!bars.members[1].hatched && std::isnan(bars.members[1].values[0]));
    QCOMPARE(bars.members[1].values[1], 25.0);
    QVERIFY(bars.members[2].hatched && bars.members[2].values[0] == 100.0 && std::isnan(bars.members[2].values[1]));
  }

  void costLengthUsesMeasuredRouting() {
    Fixture fx;
    auto r = fx.request("cost-length", {fx.dense1, fx.mod});
    r.lengths = {64, 16};
    const auto f = build_figure(*fx.store, r);
    QCOMPARE(f.panels.size(), std::size_t{2});
    QCOMPARE(f.columns, 2);
    const auto& flops = f.panels[0].series;
    QCOMPARE(flops.size(), std::size_t{5});  // dense reference + per run its line and its measured point
    QCOMPARE(flops[0].label, std::string("dense"));
    QCOMPARE(flops[0].dash, 1);
    QCOMPARE(flops[0].x, (std::vector<double>{16, 64}));
    QCOMPARE(flops[1].y[1], 1.0);  // the dense run
    FlopsQuery q;
    q.seq = 64;
    q.fractions = {1.0, 0.25};
    QVERIFY(near(flops[3].y[1], estimate_flops(fx.mod_model, 256, q).layer_ratio()));
    QVERIFY(flops[3].y[1] < 1.0);
    // The ratio each evaluation measured, at the run's context (16).
    QCOMPARE(flops[4].label, std::string("mod (measured)"));
    QVERIFY(flops[4].kind == SeriesKind::Points && flops[4].marked && flops[4].color == flops[3].color);
    QCOMPARE(flops[4].x, (std::vector<double>{16}));
    QCOMPARE(flops[4].y, (std::vector<double>{0.8}));
    const auto& kv = f.panels[1].series;
    QCOMPARE(kv.size(), std::size_t{3});  // one dense reference (same shape) + 2 runs
    const double entry = 2.0 * 32 * 4;     // K and V, d_kv 32, fp32
    const double mib = 1024.0 * 1024.0;
    QVERIFY(near(kv[0].y[1], 2 * 64 * entry / mib));
    QVERIFY(near(kv[2].y[1], (64 + 0.25 * 64) * entry / mib));
    QVERIFY(f.panels[1].log_y && f.panels[1].log_x);
  }

  void routedLayersDrawTrainingModeFaintBeside() {
    Fixture fx;
    auto r = fx.request("routed-layers", {fx.mod});
    r.metric = "both";
    const auto bars = build_figure(*fx.store, r).panels.at(0).bars;
    QCOMPARE(bars.members.size(), std::size_t{3});  // inference, training, the dense layer hatched
    QCOMPARE(bars.members[0].values[1], 25.0);
    QVERIFY(!bars.members[0].faint && bars.members[1].faint);
    QCOMPARE(bars.members[1].label, std::string("mod (training)"));
    QVERIFY(std::isnan(bars.members[1].values[0]));  // the dense layer has no training bar of its own
    QVERIFY(near(bars.members[1].values[1], 35.0));
    QVERIFY(bars.members[2].hatched);
    r.metric = "training";
    r.step = 15;  // the last logged step at or before it: 10
    const auto figure = build_figure(*fx.store, r);
    const auto training = figure.panels.at(0).bars;
    QCOMPARE(figure.meta.at("training_steps"), json::array({10}));
    QCOMPARE(training.members[0].label, std::string("mod (training)"));
    QVERIFY(near(training.members[0].values[1], 30.0));
    r.step = 5;  // nothing logged yet: named
    try {
      build_figure(*fx.store, r);
      QFAIL("no training-mode routing at or before step 5 must be refused");
    } catch (const DataError& e) {
      QVERIFY2(std::string(e.what()).find("at or before step 5") != std::string::npos, e.what());
    }
    // "both" for a run that logged no training-mode routing: its inference bars alone (what the dashboard shows).
    const auto quiet = fx.add("mod-quiet", "mod", 3, {4.0, 3.0, 2.5}, {{1, 0.5}}, true, /*log_routing=*/false);
    auto both = fx.request("routed-layers", {quiet});
    both.metric = "both";
    const auto alone = build_figure(*fx.store, both);
    QCOMPARE(alone.meta.at("training_steps"), json::array({nullptr}));
    QCOMPARE(alone.panels.at(0).bars.members.size(), std::size_t{2});  // inference and the hatched dense layer
    QVERIFY(!alone.panels.at(0).bars.members[0].faint && alone.panels.at(0).bars.members[1].hatched);
  }

  void routingHistoryIsLayersByLoggedSteps() {
    Fixture fx;
    const auto f = build_figure(*fx.store, fx.request("routing-history", {fx.mod, fx.dense1}));
    QCOMPARE(f.panels.size(), std::size_t{2});  // one per run
    const auto& h = f.panels[0].heatmap;
    QCOMPARE(h.rows, std::size_t{2});
    QCOMPARE(h.col_labels, (std::vector<std::string>{"10", "20"}));
    QCOMPARE(h.row_labels, (std::vector<std::string>{"L0", "L1"}));
    QVERIFY(std::isnan(h.values[0]) && std::isnan(h.values[1]));  // layer 0 does not route: empty
    QVERIFY(near(h.values[2], 30.0) && near(h.values[3], 35.0));
    QCOMPARE(f.panels[0].title, std::string("mod"));
    for (double v : f.panels[1].heatmap.values) QVERIFY(std::isnan(v));  // the dense run routes nowhere
  }

  void longRoutingHistoryInColumnsOfMeans() {
    // Past max_columns logged steps, each column is the mean of k consecutive steps' shares (NaN left out),
    // labelled by its last step; the last column holds what is left.
    RoutingHistory history;
    for (std::int64_t step = 1; step <= 7; ++step) {
      const double s = static_cast<double>(step);
      history.append(step, {0.1 * s, step == 2 ? std::nan("") : 0.01 * s, std::nan("")});
    }
    const auto panel = routing_history_panel("run", history, {true, true, true}, 3);
    const auto& h = panel.heatmap;
    QCOMPARE(h.cols, std::size_t{3});  // ceil(7 / 3) = 3 steps a column: 1-3, 4-6, 7
    QCOMPARE(h.col_labels, (std::vector<std::string>{"3", "6", "7"}));
    QCOMPARE(panel.x_label, std::string("logged step (each column the mean of 3)"));
    QVERIFY(near(h.values[0], 20.0) && near(h.values[1], 50.0) && near(h.values[2], 70.0));
    QVERIFY(near(h.values[3], 2.0) && near(h.values[4], 5.0) && near(h.values[5], 7.0));  // step 2's NaN left out
    QVERIFY(std::isnan(h.values[6]) && std::isnan(h.values[8]));  // a layer that logged nothing stays empty
    const auto whole = routing_history_panel("run", history, {true, true, true}, 7);
    QCOMPARE(whole.heatmap.cols, std::size_t{7});
    QCOMPARE(whole.x_label, std::string("logged step"));
    QVERIFY(near(whole.heatmap.values[7 + 6], 7.0));
  }

  void metricsFigureHasAPanelPerQuantity() {
    Fixture fx;
    const double t0 = fx.store->run(fx.mod)->created_at;
    std::vector<MetricRow> rows;
    for (std::int64_t step = 1; step <= 3; ++step) {
      rows.push_back({"train/lr", step, t0, 1e-3 * static_cast<double>(step)});
      rows.push_back({"train/grad_norm", step, t0, 2.0});
    }
    rows.push_back({"val/ppl", 20, t0, 11.0});
    rows.push_back({"val/load/L0/E0", 20, t0, 0.5});        // expert loads: not a panel
    rows.push_back({"val/routing_change/L0", 20, t0, 0.1});  // per layer: not a panel
    fx.store->insert_metrics(fx.mod, rows);
    const auto all = build_figure(*fx.store, fx.request("metrics", {fx.mod}));
    // In order of importance: lr, gradient norm, ..., FLOPs ratio, perplexity; the losses are the loss plot's.
    QCOMPARE(all.meta.at("panel_ids"), json({"lr", "grad_norm", "flops_ratio", "ppl"}));
    QCOMPARE(all.panels.size(), std::size_t{4});
    QCOMPARE(all.panels[0].title, std::string("learning rate"));
    QCOMPARE(all.panels[0].series[0].y, (std::vector<double>{1e-3, 2e-3, 3e-3}));
    QCOMPARE(all.panels[0].series[0].label, std::string("train"));
    QVERIFY(all.panels[3].series[0].marked);  // one point per evaluation
    // One quantity, by id or by key: that panel alone, the same numbers.
    auto one = fx.request("metrics", {fx.mod});
    for (const std::string metric : {"lr", "train/lr"}) {
      one.metric = metric;
      const auto lr = build_figure(*fx.store, one);
      QCOMPARE(lr.panels.size(), std::size_t{1});
      QCOMPARE(lr.panels[0].series[0].y, all.panels[0].series[0].y);
    }
    // The dense run stores train and val FLOPs ratios: one panel, train before val.
    const auto dense = build_figure(*fx.store, fx.request("metrics", {fx.dense1}));
    QCOMPARE(dense.panels.size(), std::size_t{1});
    QCOMPARE(dense.panels[0].series.size(), std::size_t{2});
    QCOMPARE(dense.panels[0].series[1].label, std::string("val"));
    one.metric = "accuracy";
    try {
      build_figure(*fx.store, one);
      QFAIL("a quantity the run does not store must throw");
    } catch (const ConfigError& e) {
      QVERIFY2(std::string(e.what()).find("metrics: metric 'accuracy' has no panel") != std::string::npos &&
                   std::string(e.what()).find("lr, grad_norm, flops_ratio, ppl") != std::string::npos,
               e.what());
    }
    try {
      build_figure(*fx.store, fx.request("metrics", {fx.mod, fx.dense1}));
      QFAIL("two runs must throw");
    } catch (const ConfigError& e) {
      QVERIFY2(std::string(e.what()).find("figure 'metrics' draws at most 1 run, got 2") != std::string::npos,
               e.what());
    }
  }

  void expertLoadsAreBarsAgainstTheUniformShare() {
    Fixture fx;
    // An evaluation with TAGAT-style loads: two layers, three experts (layer 1 lacks expert 2).
    const json stats = {{"load/L0/E0", 0.5}, {"load/L0/E1", 0.3}, {"load/L0/E2", 0.2},
                        {"load/L1/E0", 0.6}, {"load/L1/E1", 0.4}, {"entropy", 0.9}};
    fx.store->insert_eval(fx.mod, {30, "val", 2.0, 7.4, 0.0, json{{"stats", stats}}.dump()});
    const auto f = build_figure(*fx.store, fx.request("expert-loads", {fx.mod}));
    QCOMPARE(f.panels.size(), std::size_t{1});
    const auto& panel = f.panels[0];
    QCOMPARE(panel.title, std::string("per layer, step 30"));
    QCOMPARE(panel.bars.categories, (std::vector<std::string>{"L0", "L1"}));
    QCOMPARE(panel.bars.members.size(), std::size_t{3});
    QCOMPARE(panel.bars.members[0].values, (std::vector<double>{0.5, 0.6}));
    QVERIFY(panel.bars.members[2].values[0] == 0.2 && std::isnan(panel.bars.members[2].values[1]));
    QCOMPARE(panel.series.size(), std::size_t{1});
    QCOMPARE(panel.series[0].label, std::string("uniform 1/3"));
    QVERIFY(near(panel.series[0].y[0], 1.0 / 3) && panel.series[0].dash == 1);
    // TAGAT Figure 3's per-layer panel is the same panel.
    const auto fig3 = build_figure(*fx.store, fx.request("tagat-fig3", {fx.mod}));
    QCOMPARE(figure_to_csv(Figure{"", "", {fig3.panels[0]}}), figure_to_csv(Figure{"", "", {panel}}));
    // An evaluation that stored no loads: the refusal says so.
    fx.store->insert_eval(fx.mod, {40, "val", 2.0, 7.4, 0.0, json{{"stats", {{"entropy", 0.5}}}}.dump()});
    auto at40 = fx.request("expert-loads", {fx.mod});
    at40.step = 40;
    try {
      build_figure(*fx.store, at40);
      QFAIL("an evaluation without loads must throw");
    } catch (const ConfigError& e) {
      QVERIFY2(std::string(e.what()).find("expert-loads: run " + std::to_string(fx.mod) +
                                          " stores no per-layer expert loads") != std::string::npos,
               e.what());
    }
  }

  void tokenMapRowsKeepTheirOwnRanges() {
    ProbeRecord probe;
    probe.tokens = {"a", "b", "c"};
    probe.layers = {{0, "dense", false, {}, {}, {}}, {1, "mod", true, {0.9, 0.4, 0.1}, {1, 0, 0}, {}}};
    TokenSeries exit;
    exit.name = "exit";
    exit.integral = true;
    exit.values = {{2}, {-1}, {1}};
    probe.token_data = {exit};
    probe.next_logprob = {std::log(0.5), std::log(0.25), std::numeric_limits<double>::quiet_NaN()};
    const auto gate = token_map_panel("t", probe, TokenMapColour::Gate).heatmap;
    QCOMPARE(gate.row_labels, (std::vector<std::string>{"L1 mod gate", "exit", "p(next token)"}));
    QCOMPARE(gate.cols, std::size_t{3});
    QCOMPARE(gate.row_lo, (std::vector<double>{0, 0, 0}));
    QCOMPARE(gate.row_hi, (std::vector<double>{1, 2, 1}));
    QCOMPARE(gate.values[3], 2.0);               // the stored value, as the CSV writes it...
    QCOMPARE(gate.colour_value(1, 0), 1.0);      // ...coloured over its row's range
    QVERIFY(std::isnan(gate.colour_value(1, 1)));  // -1: no exit, an empty cell
    QCOMPARE(gate.colour_value(1, 2), 0.5);
    QVERIFY(near(gate.values[6], 0.5) && near(gate.values[7], 0.25));
    const auto decision = token_map_panel("t", probe, TokenMapColour::Decision).heatmap;
    QCOMPARE(decision.row_labels.front(), std::string("L1 mod decision"));
    QCOMPARE(decision.values[0], 1.0);
    // Expert colouring without expert ids falls back to the gate.
    QCOMPARE(token_map_panel("t", probe, TokenMapColour::Expert).heatmap.row_labels.front(), std::string("L1 mod gate"));
    QVERIFY(!has_expert_ids(probe));
    try {
      parse_token_map_colour("hue", "token-map metric");
      QFAIL("an unknown colouring must be refused");
    } catch (const ConfigError& e) {
      QVERIFY(std::string(e.what()).find("token-map metric: 'hue'") != std::string::npos);
    }
  }

  void tokenMapOfAStoredProbe() {
    Fixture fx;
    auto r = fx.request("token-map", {fx.mod});
    r.metric = "decision";
    const auto f = build_figure(*fx.store, r);
    const auto& h = f.panels.at(0).heatmap;
    QCOMPARE(h.row_labels, (std::vector<std::string>{"L0 dense gate", "L1 mod decision"}));
    QCOMPARE(h.values[3], 1.0);
    QCOMPARE(f.meta.at("colour").get<std::string>(), std::string("decision"));
    r.step = 7;
    try {
      build_figure(*fx.store, r);
      QFAIL("a step without a probe must be refused");
    } catch (const ConfigError& e) {
      QVERIFY2(std::string(e.what()).find("no probe at step 7 (probed at: 10, 20)") != std::string::npos, e.what());
    }
  }

  void earlierIdsNameTheRenamedFigureTableOrPreset() {
    // The papers' figures, tables and presets are named after their methods; every earlier id still names the
    // same one, and every current id exists (the list cannot go stale).
    QVERIFY(renamed_ids().size() >= 20);
    for (const auto& [before, now] : renamed_ids()) {
      QCOMPARE(current_id(before), now);
      QVERIFY2(before.rfind("seed", 0) == 0 && now.find("seed") == std::string::npos, now.c_str());
      bool found = false;
      for (const auto& info : figure_catalog())
        if (info.name == now) found = figure_info(before).name == now;
      for (const auto& spec : table_specs())
        if (spec.name == now) found = table_spec(before).name == now;
      if (!found) found = load_preset(before) == load_preset(now);
      QVERIFY2(found, (before + " -> " + now).c_str());
    }
    QCOMPARE(current_id("curves"), std::string("curves"));  // a current id is itself
  }

  void routingStabilityIsTheOverlapWithThePreviousProbe() {
    Fixture fx;
    const auto f = build_figure(*fx.store, fx.request("routing-stability", {fx.mod, fx.dense1}));
    QCOMPARE(f.panels.size(), std::size_t{1});  // the dense run routes nothing: no panel
    const auto& series = f.panels[0].series;
    QCOMPARE(series.size(), std::size_t{1});
    QCOMPARE(series[0].label, std::string("L1"));
    QCOMPARE(series[0].x, std::vector<double>{20.0});
    QCOMPARE(series[0].y, std::vector<double>{0.5});
    const auto refused =
        error_of<DataError>([&] { build_figure(*fx.store, fx.request("routing-stability", {fx.dense1})); });
    QVERIFY2(contains(refused, "routing-stability: the runs hold nothing this figure draws"), refused.c_str());
  }

  void tokenMapsShowBothRunsAndTheirDifference() {
    Fixture fx;
    const auto f = build_figure(*fx.store, fx.request("token-maps", {fx.mod, fx.dense1}));
    QCOMPARE(f.panels.size(), std::size_t{3});
    const auto& a = f.panels[0].heatmap;
    QCOMPARE(a.rows, std::size_t{2});
    QCOMPARE(a.cols, std::size_t{3});
    QCOMPARE(a.col_labels, (std::vector<std::string>{"a", ",", "b c\u23CE"}));
    QCOMPARE(a.row_labels, (std::vector<std::string>{"L0", "L1"}));
    QCOMPARE(a.values[3], 0.9);
    const auto& d = f.panels[2].heatmap;
    QVERIFY(d.diverging);
    QVERIFY(near(d.values[3], 0.9 - 0.2));
    QCOMPARE(d.values[0], 0.0);
    QVERIFY(near(d.hi, 0.7) && near(d.lo, -0.7));
    auto r = fx.request("token-maps", {fx.mod, fx.dense1});
    r.metric = "decision";
    const auto decisions = build_figure(*fx.store, r);
    QCOMPARE(decisions.panels[0].heatmap.values[3], 1.0);
    QVERIFY(std::isnan(decisions.panels[0].heatmap.values[0]));  // layer 0 records no decision
  }

  void csvRoundTripsThePlottedNumbers() {
    Fixture fx;
    for (const auto* name : {"curves", "routed-layers", "token-maps"}) {
      const auto f = build_figure(*fx.store, fx.request(name, {fx.dense1, fx.dense2, fx.mod}));
      const auto rows = parse_csv(figure_to_csv(f), name);
      QCOMPARE(rows[0], (std::vector<std::string>{"panel", "x", "y", "y_lo", "y_hi", "value", "kind", "series",
                                                  "category"}));
      std::size_t expected = 1;
      for (const auto& p : f.panels) {
        for (const auto& s : p.series) expected += s.x.size();
        for (const auto& m : p.bars.members) expected += m.values.size();
        expected += p.heatmap.values.size();
      }
      QCOMPARE(rows.size(), expected);
      for (const auto& row : rows) QCOMPARE(row.size(), std::size_t{9});
    }
    const auto curves = build_figure(*fx.store, fx.request("curves", {fx.dense1, fx.dense2}));
    const auto rows = parse_csv(figure_to_csv(curves));
    const auto& s = curves.panels[0].series[0];
    QCOMPARE(rows[2][6], std::string("line"));
    QCOMPARE(rows[2][7], s.label);
    QCOMPARE(std::stod(rows[2][1]), s.x[1]);
    QCOMPARE(std::stod(rows[2][2]), s.y[1]);
    QCOMPARE(std::stod(rows[2][3]), s.y_lo[1]);
    QCOMPARE(std::stod(rows[2][4]), s.y_hi[1]);
    const auto maps = build_figure(*fx.store, fx.request("token-maps", {fx.mod, fx.dense1}));
    const auto cells = parse_csv(figure_to_csv(maps));
    QCOMPARE(cells[2][6], std::string("cell"));
    QCOMPARE(cells[2][8], std::string(","));  // the comma token, quoted and read back
    QCOMPARE(std::stod(cells[4][5]), maps.panels[0].heatmap.values[3]);
    QVERIFY(std::isnan(std::stod(parse_csv(figure_to_csv(build_figure(*fx.store, [&] {
                                     auto r = fx.request("token-maps", {fx.mod, fx.dense1});
                                     r.metric = "decision";
                                     return r;
                                   }())))[1][5])));  // a missing cell is written as nan
  }

  void sidecarRoundTrips() {
    Fixture fx;
    for (const auto& info : figure_catalog()) {
      if (is_paper_figure(info.name)) continue;  // the papers' figures have their own suite
      if (info.name.rfind("sweep", 0) == 0) continue;  // the fixture's runs differ in seeds alone (their own tests)
      std::vector<std::int64_t> runs{fx.mod, fx.dense1, fx.dense2};
      if (info.max_runs) runs.resize(std::min(runs.size(), info.max_runs));
      // A figure computed from the weights needs checkpoints, which the fixture's runs (store rows) do not have.
      const auto weights = error_of<CheckpointError>([&] { build_figure(*fx.store, fx.request(info.name, runs)); });
      if (weights != kNoException) {
        QVERIFY2(contains(weights, info.name + ": ") && contains(weights, "has no checkpoint"), weights.c_str());
        continue;
      }
      const auto f = build_figure(*fx.store, fx.request(info.name, runs));
      const auto doc = to_json(f);
      QVERIFY2(to_json(figure_from_json(doc, "sidecar")) == doc, info.name.c_str());
    }
  }

  void bundleFilesCompileWithPdflatex() {
    Fixture fx;
    QTemporaryDir out;
    const auto stem = out.filePath("sub/curves").toStdString();
    const auto f = build_figure(*fx.store, fx.request("curves", {fx.dense1, fx.dense2, fx.mod}));
    const auto paths = write_figure_data_files(f, stem);
    QCOMPARE(paths, (std::vector<std::string>{stem + ".csv", stem + ".tex", stem + ".json"}));
    for (const auto& p : paths) QVERIFY(QFile::exists(QString::fromStdString(p)));
    QCOMPARE(test::read_bytes(stem + ".csv"), figure_to_csv(f));
    const auto tex = test::read_bytes(stem + ".tex");
    QVERIFY(tex.find("{curves.csv}") != std::string::npos && tex.find("width=8.5cm") != std::string::npos);
    QVERIFY(tex.find("fill between") != std::string::npos);

    const auto pdflatex = QStandardPaths::findExecutable("pdflatex");
    if (pdflatex.isEmpty()) QSKIP("pdflatex is not installed");
    QProcess which;
    which.start("kpsewhich", {"pgfplots.sty"});
    if (!which.waitForFinished(30000) || which.readAllStandardOutput().trimmed().isEmpty())
      QSKIP("pgfplots is not installed (texlive-pictures)");
    const auto dir = out.filePath("sub");
    if (qEnvironmentVariableIsSet("ROUTELAB_KEEP_TEX")) out.setAutoRemove(false);
    // A second MoD seed: bars with error bars.
    const auto mod2 = fx.add("mod/seed=2", "mod", 2, {4.0, 3.0, 2.6}, {{1, 0.5}, {20, 0.6}}, true);
    // Every generic figure alone, then one \input into a paper.
    for (const auto* name : {"curves", "matched", "pareto", "routed-layers", "cost-length", "token-maps"}) {
      auto r = fx.request(name, {fx.mod, fx.dense1, fx.dense2, mod2});
      if (std::string(name) == "matched") r.budgets = {5, 15};
      write_figure_data_files(build_figure(*fx.store, r), (dir + "/" + name).toStdString());
      const auto error = compile(pdflatex, dir, std::string(name) + ".tex");
      QVERIFY2(error.isEmpty(), qPrintable(QString(name) + ": " + error));
      QVERIFY(QFile::exists(dir + "/" + name + ".pdf"));
    }
    QFile paper(dir + "/paper.tex");
    QVERIFY(paper.open(QIODevice::WriteOnly));
    paper.write("\\documentclass{article}\n\\usepackage{pgfplots}\n\\usepgfplotslibrary{groupplots,fillbetween}\n"
                "\\usetikzlibrary{patterns}\n\\pgfplotsset{compat=1.16}\n\\begin{document}\nBefore.\n\n"
                "\\input{cost-length.tex}\n\nAfter.\n\\end{document}\n");
    paper.close();
    const auto error = compile(pdflatex, dir, "paper.tex");
    QVERIFY2(error.isEmpty(), qPrintable(error));
  }
};

}  // namespace test_figures

ROUTELAB_TEST_SUITE(test_figures, TestFigures)
#include "test_figures.moc"
