// Tests of the run model's first parts: run health (the alerts the dashboard and the CLI share) and the typed
// evaluation record (one parser, one error policy, old documents readable).
#include <QTemporaryDir>
#include <QTest>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/run/context_curve.h"
#include "core/run/evaluation_record.h"
#include "core/run/probe_record.h"
#include "core/run/queued_request.h"
#include "core/run/routing_history.h"
#include "core/run/run_health.h"
#include "core/run/smoothing.h"
#include "core/store/run_store.h"
#include "core/util/errors.h"
#include "core/util/logging.h"
#include "tests/store_test_support.h"
#include "tests/suite.h"

namespace test_run_health {

using namespace routelab;

/// The messages of alerts of one kind.
std::vector<std::string> of_kind(const std::vector<HealthAlert>& alerts, const std::string& kind) {
  std::vector<std::string> out;
  for (const auto& a : alerts)
    if (a.kind == kind) out.push_back(a.message);
  return out;
}

EvalRow eval_row(std::int64_t step, const std::string& extra) { return {step, "val", 2.0, 7.4, 1.1, extra}; }

/// An evaluation document with these routed shares; layer 0 is dense.
std::string routing_doc(const std::vector<double>& shares) {
  EvaluationRecord r;
  r.flops_ratio = 0.8;
  for (std::size_t l = 0; l < shares.size(); ++l)
    r.layers.push_back({static_cast<int>(l), l == 0 ? "dense" : "routed", l != 0, shares[l], 10.0, 12.0, {}});
  return evaluation_extra_json(r).dump();
}

class TestRunHealth : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { init_logging({.log_dir = "-", .console = true, .level = "error"}); }

  void alertsRiseAndClear() {
    RunHealth health;
    const std::vector<bool> routed{false, true, true};
    for (int i = 0; i < 2; ++i) health.add_evaluation(i * 10, {1.0, 0.0, 0.5}, routed);
    QVERIFY(health.alerts(0).empty());  // two evaluations are not yet "many"
    health.add_evaluation(20, {1.0, 0.004, 0.5}, routed);
    const auto collapse = of_kind(health.alerts(0), "router_collapse");
    QCOMPARE(collapse.size(), std::size_t(1));
    QVERIFY2(collapse[0].find("layer 1 ") != std::string::npos, collapse[0].c_str());
    QVERIFY(collapse[0].find("layer 0") == std::string::npos);  // dense layers never collapse
    health.add_evaluation(30, {1.0, 0.3, 0.5}, routed);
    QVERIFY(health.alerts(0).empty());  // recovered

    for (int step = 1; step <= 30; ++step) health.add_train_loss(step, step <= 20 ? 4.0 - 0.1 * step : 8.0);
    QCOMPARE(of_kind(health.alerts(0), "diverging").size(), std::size_t(1));
    health.add_train_loss(31, std::nan(""));
    const auto alerts = health.alerts(0);
    QCOMPARE(alerts.front().severity, HealthAlert::Severity::Error);  // errors first
    QVERIFY2(alerts.front().message == "train loss is NaN at step 31", alerts.front().message.c_str());

    RunHealth live;
    live.set_live(true);
    // Reports every 0.5 s, each of 5 steps (a live batch): 0.1 s per step.
    for (int i = 0; i < 10; ++i) live.note_progress(i * 0.5, 5.0 * (i + 1));
    QVERIFY(live.alerts(10).empty());
    const auto stalled = of_kind(live.alerts(100), "stalled");
    QCOMPARE(stalled.size(), std::size_t(1));
    QVERIFY2(stalled[0].find("no training step for 96 s (a step usually takes 0.1 s)") != std::string::npos,
             stalled[0].c_str());
    live.set_live(false);
    QVERIFY(live.alerts(100).empty());  // a finished run never stalls
  }

  void thresholdsAreTheCallers() {
    HealthThresholds t;
    t.collapse_evals = 1;
    t.collapse_low = 0.1;
    RunHealth health(t);
    health.add_evaluation(1, {0.05}, {true});
    QCOMPARE(of_kind(health.alerts(0), "router_collapse").size(), std::size_t(1));
  }

  void smoothingIsDebiasedAndKeepsGaps() {
    const auto s = debiased_ema({2.0, 4.0, std::nan(""), 4.0}, 0.5);
    QCOMPARE(s[0], 2.0);  // debiased: the first point is the first value, not half of it
    QCOMPARE(s[1], (0.25 * 2.0 + 0.5 * 4.0) / 0.75);
    QVERIFY(std::isnan(s[2]));
    QCOMPARE(s[3], (0.125 * 2.0 + 0.25 * 4.0 + 0.5 * 4.0) / 0.875);
    QCOMPARE(debiased_ema({1.0, 3.0}, 0.0), (std::vector<double>{1.0, 3.0}));
  }

  void evaluationRoundTrips() {
    EvaluationRecord r;
    r.task = Task::Classification;
    r.flops_ratio = 0.61;
    r.layers.push_back({0, "routed", true, 0.25, 3e6, 5e6, {{"entropy", 0.4}}});
    r.stats = {{"entropy", 0.43}, {"nan_stat", std::numeric_limits<double>::quiet_NaN()}};
    r.accuracy = 0.7;
    r.macro_f1 = 0.66;
    r.f1 = {0.6, 0.7, 0.68};
    r.labels = {"entailment", "neutral", "contradiction"};
    r.examples = 9815;
    const auto back = read_evaluation(eval_row(40, evaluation_extra_json(r).dump()));
    QCOMPARE(back.step, std::int64_t(40));
    QCOMPARE(back.task, Task::Classification);
    QCOMPARE(*back.flops_ratio, 0.61);
    QCOMPARE(back.layers.size(), std::size_t(1));
    QCOMPARE(back.layers[0].kind, std::string("routed"));
    QCOMPARE(back.layers[0].routed_fraction, 0.25);
    QCOMPARE(back.layers[0].dense_flops, 5e6);
    QCOMPARE(back.layers[0].stats.at("entropy"), 0.4);
    QCOMPARE(*back.stat("entropy"), 0.43);
    QVERIFY(std::isnan(*back.stat("nan_stat")));  // written as null, read back as NaN
    QVERIFY(!back.stat("absent"));
    QCOMPARE(*back.accuracy, 0.7);
    QCOMPARE(back.f1, r.f1);
    QCOMPARE(back.labels, r.labels);
    QCOMPARE(*back.examples, std::int64_t(9815));
  }

  void olderDocumentsTakeDefaults() {
    // A language-model evaluation stored before FLOPs were priced per layer.
    const auto e = read_evaluation(eval_row(5, R"({"layers": [{"layer": 0, "routed": true, "routed_fraction": 0.3}]})"));
    QCOMPARE(e.task, Task::LanguageModel);
    QVERIFY(!e.flops_ratio);
    QCOMPARE(e.layers[0].kind, std::string("dense"));
    QCOMPARE(e.layers[0].flops, 0.0);
    QVERIFY(e.any_routed());
    QVERIFY(read_evaluation(eval_row(6, "")).layers.empty());
  }

  void badDocumentsNameStepAndKey_data() {
    QTest::addColumn<QString>("doc");
    QTest::addColumn<QString>("expected");
    QTest::newRow("not json") << "{oops" << "evaluation at step 7: its document is not JSON";
    QTest::newRow("array") << "[1]" << "evaluation at step 7: its document is a array, not an object";
    QTest::newRow("ratio") << R"({"flops_ratio": "fast"})" << "evaluation at step 7: flops_ratio: expected a number, found string";
    QTest::newRow("layers") << R"({"layers": 3})" << "evaluation at step 7: layers: expected an array, found number";
    QTest::newRow("layer") << R"({"layers": [{"routed": true}, {"routed_fraction": [1]}]})"
                           << "evaluation at step 7: layers[1].routed_fraction: expected a number, found array";
    QTest::newRow("stat") << R"({"layers": [{"stats": {"alpha": "x"}}]})"
                          << "evaluation at step 7: layers[0].stats.alpha: expected a number, found string";
    QTest::newRow("task") << R"({"task": "vision"})" << "evaluation at step 7: task: 'vision' (lm or classification)";
    QTest::newRow("label") << R"({"labels": ["a", 2]})" << "evaluation at step 7: labels[1]: expected a string";
  }

  void badDocumentsNameStepAndKey() {
    QFETCH(QString, doc);
    QFETCH(QString, expected);
    try {
      read_evaluation(eval_row(7, doc.toStdString()));
      QFAIL("no error");
    } catch (const DataError& e) {
      QCOMPARE(QString::fromStdString(e.what()), expected);
    }
  }

  void probesReadTyped() {
    // The documents of token_probe.cpp: a language model's probe text and a classifier's example.
    const auto lm = read_probe(nlohmann::json::parse(R"({
        "tokens": ["a", " ", "b"], "next_logprob": [-1.5, -0.5, null],
        "layers": [{"layer": 0, "kind": "dense", "routed": false},
                   {"layer": 1, "kind": "dtrnet", "routed": true, "gate": [0.9, 0.1, 0.6], "decision": [1, 0, true]}],
        "token_data": {"path": [[0, 1], [0, -1], [1, 2]], "depth": [2, 1, 2]},
        "top_k": [[{"id": 3, "text": "b", "p": 0.7}], [], []], "dropped_tokens": 4})"),
                               20, "probe at step 20");
    QCOMPARE(lm.step, std::int64_t(20));
    QCOMPARE(lm.tokens, (std::vector<std::string>{"a", " ", "b"}));
    QVERIFY(std::isnan(lm.next_logprob[2]));
    QCOMPARE(lm.layers[1].gate, (std::vector<double>{0.9, 0.1, 0.6}));
    QCOMPARE(lm.layers[1].decision, (std::vector<double>{1, 0, 1}));
    QVERIFY(lm.layers[0].gate.empty());
    const auto* path = lm.series("path");
    QVERIFY(path && path->integral);
    QCOMPARE(path->shape, (std::vector<int>{2}));
    QCOMPARE(path->at(1, 1), -1.0);
    QVERIFY(std::isnan(path->at(3, 0)));
    QCOMPARE(lm.series("depth")->shape.size(), std::size_t(0));
    QCOMPARE(lm.top_k[0][0].text, std::string("b"));
    QCOMPARE(lm.dropped_tokens, std::int64_t(4));
    const auto cls = read_probe(nlohmann::json::parse(R"({"task": "classification", "tokens": ["x"], "labels": ["yes", "no"],
        "class_probs": [0.2, 0.8], "predicted": 1, "label": 0, "layers": [],
        "token_data": {"gate": [[[0.25, 0.75], [0.5, 0.5]]]}})"),
                                0, "probe");
    QCOMPARE(cls.task, Task::Classification);
    QCOMPARE(cls.predicted, 1);
    QCOMPARE(cls.label, 0);
    const auto* gate = cls.series("gate");  // (T, L, N) = (1, 2, 2)
    QCOMPARE(gate->shape, (std::vector<int>{2, 2}));
    QVERIFY(!gate->integral);
    QCOMPARE(gate->at(0, 1 * 2 + 0), 0.5);
  }

  void badProbesNameStepAndKey_data() {
    QTest::addColumn<QString>("doc");
    QTest::addColumn<QString>("expected");
    QTest::newRow("not json") << "{" << "probe at step 9: its document is not JSON";
    QTest::newRow("tokens") << R"({"tokens": ["a", 1]})" << "probe at step 9: tokens[1]: expected a string";
    QTest::newRow("gate") << R"({"layers": [{"gate": [0.5, "x"]}]})"
                          << "probe at step 9: layers[0].gate[1]: expected a number, found string";
    QTest::newRow("series") << R"({"token_data": {"path": [[0], ["a"]]}})"
                            << "probe at step 9: token_data.path[1][0]: expected a number, found string";
    QTest::newRow("top_k") << R"({"top_k": [[{"id": "3"}]]})" << "probe at step 9: top_k[0][0].id: expected an integer, found string";
  }

  void badProbesNameStepAndKey() {
    QFETCH(QString, doc);
    QFETCH(QString, expected);
    try {
      read_probe(ProbeRow{9, doc.toStdString()});
      QFAIL("no error");
    } catch (const DataError& e) {
      QCOMPARE(QString::fromStdString(e.what()), expected);
    }
  }

  void probeCacheParsesEachDocumentOnce() {
    // Read through a ProbeRecordCache, a run's probes are what a direct read gives, and a read again parses only the
    // documents it has not parsed: new steps, and a step whose document changed (a truncated run trained again); an
    // unreadable document is skipped with its message as in a direct read.
    QTemporaryDir dir;
    const std::string db = dir.filePath("runs.sqlite").toStdString();
    RunStore store(db);
    const auto id = store.create_run(test::sample_run());
    const auto probe = [](double gate) {
      return nlohmann::json({{"tokens", {"a", "b"}}, {"layers", {{{"layer", 0}, {"gate", {gate, 0.5}}}}}}).dump();
    };
    for (int step = 10; step <= 30; step += 10) store.insert_probe(id, {step, probe(step / 100.0)});
    ProbeRecordCache cache;
    const CachedProbeReads cached(cache);
    const auto gates = [&] {
      std::vector<double> out;
      for (const auto& record : read_probes(store, id)) out.push_back(record.layers.at(0).gate.at(0));
      return out;
    };
    QCOMPARE(gates(), (std::vector<double>{0.1, 0.2, 0.3}));
    QCOMPARE(cache.parsed(), std::int64_t(3));
    store.insert_probe(id, {40, probe(0.4)});
    QCOMPARE(gates(), (std::vector<double>{0.1, 0.2, 0.3, 0.4}));
    QCOMPARE(cache.parsed(), std::int64_t(4));  // only step 40's
    store.truncate_after(id, 20);
    store.insert_probe(id, {30, probe(0.7)});
    QCOMPARE(gates(), (std::vector<double>{0.1, 0.2, 0.7}));
    QCOMPARE(cache.parsed(), std::int64_t(5));  // only step 30's new document
    store.insert_probe(id, {50, "{not json"});
    std::vector<std::string> unreadable;
    QCOMPARE(read_probes(store, id, &unreadable).size(), std::size_t(3));
    QCOMPARE(unreadable.size(), std::size_t(1));
    QVERIFY2(unreadable[0].find(db + ": run " + std::to_string(id) + ": probe at step 50") == 0, unreadable[0].c_str());
  }

  void routingCacheReadsOnlyNewRows() {
    // Read through a RoutingHistoryCache, a run's routing history is what a direct read gives after every change to
    // the store: steps appended (only they and the last step's rows are read again), a last step read before all of
    // its layers were stored, a resume's truncation trained again (other values: read whole), one not trained again.
    QTemporaryDir dir;
    RunStore store(dir.filePath("runs.sqlite").toStdString());
    const auto id = store.create_run(test::sample_run());
    const auto add = [&](std::int64_t from, std::int64_t to, double offset, std::vector<int> layers = {0, 2}) {
      std::vector<RoutingRow> rows;
      for (std::int64_t step = from; step <= to; ++step)
        for (const int layer : layers)
          rows.push_back({step, layer, offset + 0.001 * static_cast<double>(step) + 0.1 * layer, 0.5, 0.0, 8, 8});
      store.insert_routing(id, rows);
    };
    RoutingHistoryCache cache;
    const auto equal = [](const RoutingHistory& a, const RoutingHistory& b) {
      if (a.steps != b.steps || a.fractions.size() != b.fractions.size()) return false;
      for (std::size_t c = 0; c < a.fractions.size(); ++c) {
        if (a.fractions[c].size() != b.fractions[c].size()) return false;
        for (std::size_t l = 0; l < a.fractions[c].size(); ++l) {
          const double x = a.fractions[c][l], y = b.fractions[c][l];
          if (x != y && !(std::isnan(x) && std::isnan(y))) return false;
        }
      }
      return true;
    };
    const auto same = [&] {
      // Expected: the history built here from the store's whole rows; read_routing_history without a cache gives it
      // too.
      RoutingHistory expected;
      for (const RoutingRow& row : store.routing(id)) {
        if (expected.steps.empty() || expected.steps.back() != row.step) expected.append(row.step, {});
        auto& column = expected.fractions.back();
        const auto layer = static_cast<std::size_t>(row.layer);
        if (column.size() <= layer) column.resize(layer + 1, std::nan(""));
        column[layer] = row.routed_fraction;
      }
      const RoutingHistory uncached = read_routing_history(store, id);
      const CachedRoutingReads through(cache);
      return equal(expected, uncached) && equal(expected, read_routing_history(store, id));
    };
    add(1, 100, 0);
    QVERIFY(same());
    QCOMPARE(cache.rows_read(), std::int64_t(200));
    add(101, 110, 0);
    QVERIFY(same());
    QCOMPARE(cache.rows_read(), std::int64_t(200 + 2 + 20));  // step 100's rows again, then the new ones
    add(111, 111, 0, {0});  // read before the step's last layer was stored
    QVERIFY(same());
    add(111, 111, 0, {2});
    QVERIFY(same());
    QCOMPARE(cache.history(store, id).fractions.back().size(), std::size_t(3));
    QVERIFY(std::isnan(cache.history(store, id).fractions.back()[1]));  // layer 1 logged nothing
    store.truncate_after(id, 50);  // a resume from step 50 trains the steps after it again, routing otherwise
    add(51, 120, 0.3);
    QVERIFY(same());
    QCOMPARE(cache.history(store, id).steps.size(), std::size_t(120));
    store.truncate_after(id, 80);
    QVERIFY(same());
    QCOMPARE(cache.history(store, id).steps.back(), std::int64_t(80));
    // At most max_runs runs are held: reading another forgets the least recently read one.
    RoutingHistoryCache small(1);
    const auto other = store.create_run(test::sample_run("other"));
    small.history(store, id);
    small.history(store, other);
    const auto before = small.rows_read();
    small.history(store, id);  // forgotten: read whole again
    QCOMPARE(small.rows_read(), before + 160);
  }

  void contextCurvesAreTheirOwnDocument() {
    ContextCurve c;
    c.run_id = 3;
    c.step = 500;
    c.trained_context = 256;
    c.scaling = "yarn";
    c.factor = 4;
    c.points = {{256, 1.4, 4.06, 2.0, 64}, {1024, std::nan(""), std::nan(""), std::nan(""), 16}};
    const EvalRow row{500, c.split_name(), 0, 0, 0, c.to_json().dump()};
    QVERIFY(is_context_curve(row));
    const auto back = read_context_curve(row);
    QCOMPARE(back.trained_context, std::int64_t(256));
    QCOMPARE(back.points.size(), std::size_t(2));
    QCOMPARE(back.points[0].ppl, 4.06);
    QVERIFY(std::isnan(back.points[1].ppl));  // NaN was stored as null
    QCOMPARE(back.split_name(), std::string("context:yarnx4"));
    try {
      read_context_curve({500, "context:nonex1", 0, 0, 0, R"({"points": [{"length": "long"}]})"});
      QFAIL("no error");
    } catch (const DataError& e) {
      QCOMPARE(std::string(e.what()),
               std::string("evaluation 'context:nonex1' at step 500: points[0].length: expected an integer, found string"));
    }
    // The run's evaluations leave the curves to their reader.
    QTemporaryDir dir;
    RunStore store(dir.filePath("runs.sqlite").toStdString());
    const auto id = store.create_run(test::sample_run());
    store.insert_eval(id, eval_row(100, routing_doc({1.0, 0.5})));
    store.insert_eval(id, row);
    const auto evals = read_evaluations(store, id);
    QCOMPARE(evals.size(), std::size_t(1));
    QCOMPARE(evals[0].step, std::int64_t(100));
  }

  void queuedRequestsRoundTripAndNameBadKeys() {
    QueuedRequest q;
    q.preset = "tiny";
    q.config_json = R"({"model": {"n_layer": 2}})";
    q.sets = {"train.lr=1e-3", "run.threads=1"};
    q.steps = 30;
    q.name = "a";
    q.tags = "x,y";
    const auto back = read_queued_request(q.to_json(), "queue item 1");
    QCOMPARE(back.preset, q.preset);
    QCOMPARE(back.config_json, q.config_json);
    QCOMPARE(back.sets, q.sets);
    QCOMPARE(back.steps, q.steps);
    QCOMPARE(back.name, q.name);
    QCOMPARE(back.tags, q.tags);
    QueuedRequest resume;
    resume.resume_run = 4;
    resume.preset = "ignored";
    QCOMPARE(resume.to_json(), std::string(R"({"resume":4})"));
    QCOMPARE(read_queued_request(resume.to_json(), "queue item 2").resume_run, std::int64_t{4});
    // A request stored by an earlier version (the GUI's own JSON writer) reads the same.
    QCOMPARE(read_queued_request(R"({"preset":"tiny","steps":30,"sets":["a=1"]})", "q").sets,
             std::vector<std::string>{"a=1"});
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"[1]", "queue item 3: the request is not a JSON object"},
        {"{", "queue item 3: the request is not a JSON object"},
        {R"({"preset": "tiny", "sets": ["a=1", 2]})", "queue item 3: sets[1]: expected a string"},
        {R"({"preset": "tiny", "steps": "30"})", "queue item 3: steps: expected an integer"},
        {R"({"name": "orphan"})", "queue item 3: the request names no preset, config or run to resume"},
    };
    for (const auto& [doc, message] : bad) {
      try {
        read_queued_request(doc, "queue item 3");
        QFAIL(("accepted: " + doc).c_str());
      } catch (const DataError& e) {
        QVERIFY2(std::string(e.what()).find(message) == 0, e.what());
      }
    }
  }

  void storedRunsAreJudgedByTheSameRules() {
    QTemporaryDir dir;
    const std::string db = dir.filePath("runs.sqlite").toStdString();
    RunStore store(db);
    const auto collapsed = store.create_run(test::sample_run("collapsed"));
    for (int i = 1; i <= 3; ++i) store.insert_eval(collapsed, eval_row(i * 10, routing_doc({1.0, 0.995, 0.4})));
    store.insert_eval(collapsed, eval_row(40, "{not json"));  // unreadable: skipped, the rest still judged
    std::vector<MetricRow> losses;
    for (int s = 1; s <= 5; ++s) losses.push_back({"train/loss", s, 1000.0 + s, s == 5 ? test::kNan : 3.0});
    store.insert_metrics(collapsed, losses);
    store.set_status(collapsed, RunStatus::Finished);
    const auto alerts = assess_run(store, collapsed, 1e9);
    QCOMPARE(alerts.size(), std::size_t(2));
    QCOMPARE(alerts[0].message, std::string("train loss is NaN at step 5"));
    QVERIFY2(alerts[1].message.find("layer 1 routed ≥99%") != std::string::npos, alerts[1].message.c_str());
    try {
      read_evaluations(store, collapsed);
      QFAIL("an unreadable evaluation was read");
    } catch (const DataError& e) {
      QVERIFY2(std::string(e.what()).find(db + ": run " + std::to_string(collapsed) + ": evaluation at step 40") == 0,
               e.what());
    }

    // A running run whose last logged step is long past its usual pace has stalled; 2 s later it has not.
    const auto running = store.create_run(test::sample_run("running"));
    std::vector<MetricRow> steps;
    for (int s = 1; s <= 10; ++s) steps.push_back({"train/loss", s, 2000.0 + s, 3.0});
    store.insert_metrics(running, steps);
    QCOMPARE(of_kind(assess_run(store, running, 2012.0), "stalled").size(), std::size_t(0));
    QCOMPARE(of_kind(assess_run(store, running, 2100.0), "stalled").size(), std::size_t(1));
    store.set_status(running, RunStatus::Stopped);
    QVERIFY(assess_run(store, running, 2100.0).empty());
  }
};

}  // namespace test_run_health

ROUTELAB_TEST_SUITE(test_run_health, TestRunHealth)
#include "test_run_health.moc"
