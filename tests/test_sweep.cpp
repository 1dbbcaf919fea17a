// Sweep files: the grid's Cartesian product, baselines sharing the budget and seeds, names and tags, and clear
// errors naming the file, the point and the key.
#include <QDir>
#include <QTest>

#include "core/config/sweep.h"
#include "core/report/tables/run_tables.h"
#include "core/util/errors.h"
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
};

}  // namespace test_sweep

ROUTELAB_TEST_SUITE(test_sweep, TestSweep)
#include "test_sweep.moc"
