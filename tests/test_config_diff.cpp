// Config diff: flattening to dotted keys, only differing keys kept, missing keys shown as a dash, the sort by
// section then key, JSON value equality, and the store overload's errors (unknown run, config not JSON).
#include <QTemporaryDir>
#include <QTest>

#include <string>

#include <nlohmann/json.hpp>

#include "core/report/tables/config_diff.h"
#include "core/store/run_store.h"
#include "core/util/errors.h"
#include "store_test_support.h"
#include "tests/suite.h"

namespace test_config_diff {

using namespace routelab;
using nlohmann::json;

namespace {

std::vector<std::string> keys_of(const ConfigDiff& diff) {
  std::vector<std::string> keys;
  for (const auto& row : diff.rows) keys.push_back(row.key);
  return keys;
}

/// Named std::vector arguments: a braced list converts to nlohmann::json as well as to a vector.
ConfigDiff diff_of(const std::vector<json>& configs, const std::vector<std::string>& labels) {
  return config_diff(configs, labels);
}

const ConfigDiffRow* row_of(const ConfigDiff& diff, const std::string& key) {
  for (const auto& row : diff.rows)
    if (row.key == key) return &row;
  return nullptr;
}

}  // namespace

class TestConfigDiff : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void flattensToDottedKeys() {
    const json doc = json::parse(R"({"model":{"arch":"dtrnet","attn":{"n_head":4},"layers":[1,3],"extra":{}},
                                     "train":{"lr":0.001}})");
    const auto flat = flatten_config(doc);
    QCOMPARE(flat.size(), std::size_t{5});
    QCOMPARE(flat[0].first, std::string("model.arch"));
    QCOMPARE(flat[1].first, std::string("model.attn.n_head"));
    QCOMPARE(flat[2].first, std::string("model.extra"));  // an empty object is a leaf
    QCOMPARE(flat[3].first, std::string("model.layers"));  // arrays are one value
    QCOMPARE(config_value_text(flat[3].second), std::string("[1,3]"));
    QCOMPARE(config_value_text(flat[0].second), std::string("dtrnet"));  // strings unquoted
    QCOMPARE(config_value_text(json(true)), std::string("true"));
    QCOMPARE(config_value_text(json(nullptr)), std::string("null"));
    QVERIFY_THROWS_EXCEPTION(ConfigError, flatten_config(json::array({1, 2}), "x.json"));
  }

  void keepsOnlyDifferingKeys_data() {
    QTest::addColumn<QString>("a");
    QTest::addColumn<QString>("b");
    QTest::addColumn<QStringList>("expected");
    QTest::newRow("identical") << R"({"model":{"n_layer":4},"train":{"lr":0.001}})"
                               << R"({"train":{"lr":0.001},"model":{"n_layer":4}})" << QStringList{};
    QTest::newRow("one value") << R"({"model":{"n_layer":4},"train":{"lr":0.001}})"
                               << R"({"model":{"n_layer":6},"train":{"lr":0.001}})" << QStringList{"model.n_layer"};
    QTest::newRow("int equals float") << R"({"train":{"lr":1}})" << R"({"train":{"lr":1.0}})" << QStringList{};
    QTest::newRow("type differs") << R"({"train":{"lr":1}})" << R"({"train":{"lr":"1"}})"
                                  << QStringList{"train.lr"};
    QTest::newRow("array element") << R"({"model":{"layers":[1,3]}})" << R"({"model":{"layers":[1,2]}})"
                                   << QStringList{"model.layers"};
    QTest::newRow("missing key") << R"({"model":{"arch":"mod","capacity":0.5}})" << R"({"model":{"arch":"mod"}})"
                                 << QStringList{"model.capacity"};
    QTest::newRow("object vs scalar") << R"({"data":{"source":{"file":"a.txt"}}})" << R"({"data":{"source":"kjv"}})"
                                      << QStringList{"data.source", "data.source.file"};
    QTest::newRow("sorted by section then key")
        << R"({"train":{"lr":1,"steps":2},"model":{"a_b":1,"a":{"b":1}},"data":{"x":1}})"
        << R"({"train":{"lr":2,"steps":3},"model":{"a_b":2,"a":{"b":2}},"data":{"x":2}})"
        << QStringList{"data.x", "model.a.b", "model.a_b", "train.lr", "train.steps"};
  }

  void keepsOnlyDifferingKeys() {
    QFETCH(QString, a);
    QFETCH(QString, b);
    QFETCH(QStringList, expected);
    const ConfigDiff diff = diff_of({json::parse(a.toStdString()), json::parse(b.toStdString())}, {"a", "b"});
    QStringList got;
    for (const auto& key : keys_of(diff)) got << QString::fromStdString(key);
    QCOMPARE(got, expected);
    QCOMPARE(diff.columns, (std::vector<std::string>{"a", "b"}));
  }

  void missingIsADashAndValuesFollowRunOrder() {
    const ConfigDiff diff = diff_of({json::parse(R"({"model":{"arch":"dtrnet","pattern":"bilayer"}})"),
                                         json::parse(R"({"model":{"arch":"dense"}})"),
                                         json::parse(R"({"model":{"arch":"mod","capacity":0.125}})")},
                                        {"r1", "r2", "r3"});
    QCOMPARE(keys_of(diff), (std::vector<std::string>{"model.arch", "model.capacity", "model.pattern"}));
    QCOMPARE(diff.keys_compared, std::size_t{3});
    QCOMPARE(row_of(diff, "model.arch")->values, (std::vector<std::string>{"dtrnet", "dense", "mod"}));
    QCOMPARE(row_of(diff, "model.capacity")->values,
             (std::vector<std::string>{kConfigDiffMissing, kConfigDiffMissing, "0.125"}));
    QCOMPARE(row_of(diff, "model.pattern")->values,
             (std::vector<std::string>{"bilayer", kConfigDiffMissing, kConfigDiffMissing}));
  }

  void oneOrNoConfigHasNoDifferences() {
    QVERIFY(diff_of({json::parse(R"({"a":{"b":1}})")}, {"only"}).rows.empty());
    QCOMPARE(diff_of({json::parse(R"({"a":{"b":1}})")}, {"only"}).keys_compared, std::size_t{1});
    QVERIFY(diff_of({}, {}).rows.empty());
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, diff_of({json::object()}, {}));
  }

  void readsStoredConfigsAndNamesErrors() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string path = dir.filePath(QStringLiteral("runs.sqlite")).toStdString();
    RunStore store(path, /*mark_crashed=*/false);
    auto a = test::sample_run("dense-a");
    a.config_json = R"({"model":{"arch":"dense","n_layer":4},"run":{"seed":1}})";
    auto b = test::sample_run("dtr-b");
    b.config_json = R"({"model":{"arch":"dtrnet","n_layer":4},"run":{"seed":2}})";
    const auto ida = store.create_run(a), idb = store.create_run(b);

    const ConfigDiff diff = config_diff(store, {idb, ida});
    QCOMPARE(keys_of(diff), (std::vector<std::string>{"model.arch", "run.seed"}));
    QCOMPARE(diff.columns[0], "#" + std::to_string(idb) + " dtr-b");
    QCOMPARE(row_of(diff, "model.arch")->values, (std::vector<std::string>{"dtrnet", "dense"}));

    try {
      config_diff(store, {ida, 999});
      QFAIL("an unknown run must throw");
    } catch (const StoreError& e) {
      const std::string what = e.what();
      QVERIFY2(what.find(path) != std::string::npos && what.find("999") != std::string::npos, e.what());
    }

    auto broken = test::sample_run("broken");
    broken.config_json = "{not json";
    const auto idc = store.create_run(broken);
    try {
      config_diff(store, {ida, idc});
      QFAIL("a config that is not JSON must throw");
    } catch (const DataError& e) {
      const std::string what = e.what();
      QVERIFY2(what.find("run " + std::to_string(idc)) != std::string::npos &&
                   what.find("broken") != std::string::npos,
               e.what());
    }
  }
};

}  // namespace test_config_diff

ROUTELAB_TEST_SUITE(test_config_diff, TestConfigDiff)
#include "test_config_diff.moc"
