// Sweep files: the grid's Cartesian product, baselines sharing the budget and seeds, names and tags, and clear
// errors naming the file, the point and the key; the sweep-grid figure reading two swept options together.
#include <QDir>
#include <QTemporaryDir>
#include <QTest>
#include <cmath>

#include "core/config/sweep.h"
#include "core/models/registry.h"
#include "core/report/builders/catalog.h"
#include "core/report/figure/figure.h"
#include "core/report/tables/run_tables.h"
#include "core/store/run_store.h"
#include "core/util/errors.h"
#include "tests/store_test_support.h"
#include "tests/suite.h"

namespace test_sweep {

using namespace routelab;
using nlohmann::json;

class TestSweep : public QObject {
  Q_OBJECT

 private slots:
  void gridIsTheCartesianProductThenBaselines() {
    const json doc = json::parse(R"({
      "name": "lam", "base": "tsa-charlm", "train": {"steps": 200},
      "grid": {"model.depth_coeff": [0, 0.01], "run.seed": [1, 2]},
      "baselines": [{"preset": "tsa-charlm-dense", "name": "dense"}],
      "table": "tsa-table2"})");
    const auto plan = expand_sweep(doc, "lam.json");
    QCOMPARE(plan.points.size(), std::size_t{6});  // 2 x 2 grid + 2 baseline seeds
    QCOMPARE(plan.tag(), std::string("sweep:lam"));
    QCOMPARE(plan.table, std::string("tsa-table2"));
    QCOMPARE(plan.points[0].name, std::string("lam/depth_coeff=0,seed=1"));
    QCOMPARE(plan.points[1].name, std::string("lam/depth_coeff=0,seed=2"));
    QCOMPARE(plan.points[3].name, std::string("lam/depth_coeff=0.01,seed=2"));
    QCOMPARE(plan.points[3].config.model().at("depth_coeff").get<double>(), 0.01);
    QCOMPARE(plan.points[3].config.run().at("seed").get<int>(), 2);
    QCOMPARE(plan.points[3].config.arch(), std::string("tsa"));
    for (const auto& p : plan.points) QCOMPARE(p.config.train().at("steps").get<int>(), 200);
    // Baselines: their own architecture, the shared seeds, never the grid's model keys.
    QCOMPARE(plan.points[4].name, std::string("lam/dense,seed=1"));
    QCOMPARE(plan.points[5].config.arch(), std::string("dense"));
    QCOMPARE(plan.points[5].config.run().at("seed").get<int>(), 2);
    QCOMPARE(plan.points[5].origin, std::string("tsa-charlm-dense"));
    QVERIFY(plan.points[0].config.hash() != plan.points[1].config.hash());
  }

  void baselineSetsItsOwnOptions() {
    const json doc = json::parse(R"({
      "name": "lr", "base": "tsa-charlm", "train": {"steps": 200, "lr": 5e-4},
      "grid": {"run.seed": [1, 2]},
      "baselines": [{"preset": "tsa-charlm", "name": "slow", "set": {"train.lr": 1e-4, "model.depth_coeff": 0.01}}]})");
    const auto plan = expand_sweep(doc, "lr.json");
    QCOMPARE(plan.points.size(), std::size_t{4});
    for (std::size_t i = 0; i < 2; ++i) QCOMPARE(plan.points[i].config.train().at("lr").get<double>(), 5e-4);
    for (std::size_t i = 2; i < 4; ++i) {
      QCOMPARE(plan.points[i].config.train().at("lr").get<double>(), 1e-4);
      QCOMPARE(plan.points[i].config.model().at("depth_coeff").get<double>(), 0.01);
      QCOMPARE(plan.points[i].config.train().at("steps").get<int>(), 200);  // the shared budget still holds
    }
    QCOMPARE(plan.points[3].config.run().at("seed").get<int>(), 2);
  }

  void noGridIsOnePoint() {
    const auto plan = expand_sweep(json::parse(R"({"name": "one", "base": "tiny"})"), "one.json");
    QCOMPARE(plan.points.size(), std::size_t{1});
    QCOMPARE(plan.points[0].name, std::string("one"));
  }

  void errorsNameTheFilePointAndKey() {
    auto message = [](const char* text) {
      try {
        sweep_table(expand_sweep(json::parse(text), "bad.json"));  // the table is checked where it is used
      } catch (const ConfigError& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    auto has = [](const std::string& m, const char* part) { return m.find(part) != std::string::npos; };
    auto m = message(R"({"name": "x", "base": "tiny", "grd": {}})");
    QVERIFY2(has(m, "bad.json") && has(m, "grd: unknown key"), m.c_str());
    m = message(R"({"name": "x", "base": "tiny", "grid": {"depth_coeff": [1]}})");
    QVERIFY2(has(m, "grid.depth_coeff: expected section.key"), m.c_str());
    m = message(R"({"name": "x", "base": "tiny", "grid": {"model.n_layer": []}})");
    QVERIFY2(has(m, "grid.model.n_layer: expected a non-empty array"), m.c_str());
    m = message(R"({"name": "x", "base": "tiny", "grid": {"model.n_layer": [2, -1]}})");
    QVERIFY2(has(m, "point 'x/n_layer=-1'") && has(m, "model.n_layer"), m.c_str());
    m = message(R"({"name": "x", "base": "tiny", "table": "seed999"})");
    QVERIFY2(has(m, "table: unknown table 'seed999'"), m.c_str());
    m = message(R"({"name": "x", "base": "no-such-preset"})");
    QVERIFY2(has(m, "bad.json: base: unknown preset 'no-such-preset'"), m.c_str());
    m = message(R"({"name": "x", "base": "tiny", "baselines": [{"preset": "tiny"}, {"preset": "nope"}]})");
    QVERIFY2(has(m, "bad.json: baselines[1].preset: unknown preset 'nope'"), m.c_str());
    m = message(R"({"name": "x", "base": "tiny", "baselines": [{"name": "d"}]})");
    QVERIFY2(has(m, "baselines[0].preset"), m.c_str());
    m = message(R"({"name": "x", "base": "tiny", "baselines": [{"preset": "tiny", "sets": {}}]})");
    QVERIFY2(has(m, "baselines[0].sets: unknown key"), m.c_str());
    m = message(R"({"name": "x", "base": "tiny", "baselines": [{"preset": "tiny", "set": {"lr": 1}}]})");
    QVERIFY2(has(m, "baselines[0].set.lr: expected section.key"), m.c_str());
    // Text fields of another type: named with what they hold, not a JSON type error.
    m = message(R"({"name": 7, "base": "tiny"})");
    QVERIFY2(has(m, "bad.json: name: expected a name, got 7"), m.c_str());
    m = message(R"({"name": "x", "description": null, "base": "tiny"})");
    QVERIFY2(has(m, "description: expected a text, got null"), m.c_str());
    m = message(R"({"name": "x", "base": ["tiny"]})");
    QVERIFY2(has(m, "base: expected a preset name"), m.c_str());
    m = message(R"({"name": "x", "base": "tiny", "table": 1e308})");
    QVERIFY2(has(m, "table: expected a table name"), m.c_str());
    m = message(R"({"name": "x", "base": "tiny", "baselines": [{"preset": "tiny", "name": {}}]})");
    QVERIFY2(has(m, "baselines[0].name: expected a name, got {}"), m.c_str());
  }

  void shippedSweepsResolve() {
    const QDir dir(qEnvironmentVariable("ROUTELAB_EXPERIMENTS") + "/sweeps");
    const auto files = dir.entryList({"*.json"}, QDir::Files);
    QVERIFY(files.size() >= 5);
    for (const auto& file : files) {
      const auto plan = load_sweep(dir.filePath(file).toStdString());
      QVERIFY(plan.points.size() >= 3);
      QVERIFY(!sweep_table(plan).columns.empty());  // the table each names exists
    }
  }

  void sweepGridShowsEachCellsMeanAndTheInteraction() {
    // MoD over capacity x lr, two seeds a cell, whose best lr moves with the capacity (an interaction), and dense
    // at both lrs (no capacity: no panel). Cell means 3.1 (seeds 3.0 and 3.2), 2.5, 2.9, 2.9; grand mean 2.85; the
    // squares: total 0.4, cells 0.38, lr 0.18, capacity 0.02, so the interaction explains (0.38 - 0.2) / 0.4.
    QTemporaryDir dir;
    RunStore store(dir.filePath("runs.sqlite").toStdString());
    const auto add = [&](const std::string& arch, double lr, double capacity, int seed, double loss) {
      json model = {{"arch", arch}, {"n_layer", 2}};
      if (capacity > 0) model["capacity"] = capacity;
      auto r = test::sample_run(arch + std::to_string(seed));
      r.arch = arch;
      r.config_json = json{{"model", model}, {"train", {{"lr", lr}}}, {"run", {{"seed", seed}}}}.dump();
      const auto id = store.create_run(r);
      store.insert_metrics(id, {{"val/loss", 200, 1.0, loss}});
      return id;
    };
    std::vector<std::int64_t> runs;
    for (const int seed : {1, 2}) {
      runs.push_back(add("mod", 1e-3, 0.25, seed, seed == 1 ? 3.0 : 3.2));
      runs.push_back(add("mod", 1e-2, 0.25, seed, 2.5));
      runs.push_back(add("mod", 1e-3, 0.5, seed, 2.9));
      runs.push_back(add("mod", 1e-2, 0.5, seed, 2.9));
    }
    const std::vector<std::int64_t> dense = {add("dense", 1e-3, 0, 1, 2.8), add("dense", 1e-2, 0, 1, 2.4)};
    FigureRequest request;
    request.name = "sweep-grid";
    request.run_ids = runs;
    request.run_ids.insert(request.run_ids.end(), dense.begin(), dense.end());
    auto f = build_figure(store, request);
    QCOMPARE(f.meta.at("options"), json({"model.capacity", "train.lr"}));  // the two that explain most, key order
    QCOMPARE(f.panels.size(), std::size_t{1});
    const auto near = [](double a, double b) { return std::abs(a - b) < 1e-9; };
    QVERIFY(near(f.meta.at("interaction_eta_squared").at("mod").get<double>(), 0.45));
    QCOMPARE(f.panels[0].title, architecture("mod").display_name + " \u00b7 interaction \u03b7\u00b2 0.45");
    auto h = f.panels[0].heatmap;
    QCOMPARE(h.row_labels, (std::vector<std::string>{"0.25", "0.5"}));
    QCOMPARE(h.col_labels, (std::vector<std::string>{"0.001", "0.01"}));
    QCOMPARE(f.panels[0].y_label, std::string("model.capacity"));
    QVERIFY(near(h.values[0], 3.1) && near(h.values[1], 2.5) && near(h.values[2], 2.9) && near(h.values[3], 2.9));
    QCOMPARE(h.cell_text, (std::vector<std::string>{"3.1", "[2.5]", "2.9", "2.9"}));  // the best in brackets
    QVERIFY(near(h.lo, 2.5) && near(h.hi, 3.1));
    QCOMPARE(f.meta.at("cells").size(), std::size_t{4});
    QVERIFY(to_json(figure_from_json(to_json(f), "sidecar")) == to_json(f));
    // The same cells as a table (figure sweep-grid --format-table): a row per capacity, a column per lr.
    const auto table = figure_table("sweep-grid").build(store, request);
    QCOMPARE(table.row_header, std::string("model.capacity \\ train.lr"));
    QCOMPARE(table.rows.size(), std::size_t{2});
    QCOMPARE(table.rows[1].label, std::string("0.5"));
    QCOMPARE(table.columns[1].header, std::string("0.01"));
    QVERIFY(table.columns[1].better == Better::Lower && best_row(table, 1) == 0);
    QVERIFY(near(table.rows[0].cells[0]->mean, 3.1) && near(table.rows[0].cells[0]->std, std::sqrt(0.02)));
    QCOMPARE(table.rows[0].cells[0]->n, std::int64_t{2});
    QVERIFY(test::contains(table.caption, "val/loss over model.capacity (rows) and train.lr (columns)"));
    QVERIFY(test::contains(test::error_of<ConfigError>([&] { figure_table("curves"); }),
                           "figure 'curves' has no table (the figures with one: 'matched', 'sweep-grid')"));
    // Options as asked: lr the rows. Without a seed in one cell the grid is unbalanced: no interaction share.
    request.options = {"train.lr", "model.capacity"};
    request.run_ids.erase(request.run_ids.begin());
    f = build_figure(store, request);
    h = f.panels[0].heatmap;
    QCOMPARE(h.row_labels, (std::vector<std::string>{"0.001", "0.01"}));
    QVERIFY(near(h.values[0], 3.2) && near(h.values[1], 2.9) && near(h.values[2], 2.5));
    QVERIFY(f.meta.at("interaction_eta_squared").at("mod").is_null());
    QCOMPARE(f.panels[0].title, architecture("mod").display_name);
    const auto refusal = [&](std::vector<std::string> options, std::vector<std::int64_t> ids) {
      request.options = std::move(options);
      request.run_ids = std::move(ids);
      try {
        build_figure(store, request);
      } catch (const ConfigError& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    auto m = refusal({"train.lr"}, runs);
    QVERIFY2(m.find("give two options") != std::string::npos, m.c_str());
    m = refusal({"train.lr", "model.n_layer"}, runs);
    QVERIFY2(
        m.find("'model.n_layer' is not an option the runs set to more than one value (model.capacity, train.lr)") !=
            std::string::npos,
        m.c_str());
    m = refusal({}, dense);
    QVERIFY2(m.find("sweep-grid: the runs sweep one option (train.lr): a grid needs two") != std::string::npos,
             m.c_str());
  }
};

}  // namespace test_sweep

ROUTELAB_TEST_SUITE(test_sweep, TestSweep)
#include "test_sweep.moc"
