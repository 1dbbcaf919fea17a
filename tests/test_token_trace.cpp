// Token traces of stored runs (issue 7): shapes (tokens x layers), the stored probe equals the trace of the probe
// text (one code path), top-k predictions sorted with a total probability <= 1, long text keeps its last
// `context` tokens, clear errors for empty or unencodable text, and a TAGAT classifier's trace of a pair.
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <map>

#include "core/analysis/token_trace.h"
#include "core/config/experiment_config.h"
#include "core/data/tokenizer.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "core/util/errors.h"
#include "tests/suite.h"

namespace test_token_trace {

using namespace routelab;

namespace {

ExperimentConfig lm_config(const std::string& arch) {
  std::vector<std::string> sets = {"model.arch=" + arch, "model.n_layer=2", "model.n_embd=32", "model.n_head=4",
                                   "data.source=copy", "train.batch_size=8", "train.steps=6", "train.eval_every=6",
                                   "train.checkpoint_every=6", "train.eval_batches=1", "train.log_every=3",
                                   "train.lr=3e-3", "train.warmup_steps=2", "run.threads=1"};
  if (arch == "dtrnet") sets.push_back("model.routed_layers=1");  // layer 1 routes, layer 0 stays dense
  return resolve_config(nlohmann::json::object(), sets, "test");
}

ExperimentConfig tagat_config() {
  return resolve_config(nlohmann::json::object(),
                        {"model.arch=tagat", "model.n_layer=1", "model.n_embd=32", "model.n_head=4",
                         "data.source=entailment", "data.tokenizer=word", "data.context=48",
                         "data.task_train_examples=64", "data.task_eval_examples=16", "train.batch_size=32",
                         "train.epochs=1", "train.lr=1e-3", "train.warmup_steps=1", "train.log_every=1",
                         "run.threads=1"},
                        "test");
}

/// The stored probe of the run's latest checkpoint step.
nlohmann::json stored_probe(const std::string& db, std::int64_t run_id) {
  RunStore store(db);
  const auto step = store.latest_checkpoint(run_id)->step;
  for (const auto& p : store.probes(run_id))
    if (p.step == step) return nlohmann::json::parse(p.json);
  return {};
}

}  // namespace

class TestTokenTrace : public QObject {
  Q_OBJECT
  QTemporaryDir home_;
  std::string db_;
  std::map<std::string, std::int64_t> runs_;

 private Q_SLOTS:
  void initTestCase() {
    qputenv("ROUTELAB_HOME", home_.path().toUtf8());
    db_ = home_.filePath("trace.sqlite").toStdString();
    for (const std::string arch : {"dense", "dtrnet"}) {
      const auto outcome = train({lm_config(arch), db_, arch, ""});
      QVERIFY2(outcome.status == RunStatus::Finished, outcome.message.c_str());
      runs_[arch] = outcome.run_id;
    }
    const auto outcome = train({tagat_config(), db_, "tagat", ""});
    QVERIFY2(outcome.status == RunStatus::Finished, outcome.message.c_str());
    runs_["tagat"] = outcome.run_id;
  }

  void storedProbeEqualsTheTraceOfTheProbeText_data() {
    QTest::addColumn<QString>("arch");
    QTest::newRow("dense") << "dense";
    QTest::newRow("dtrnet") << "dtrnet";
  }
  void storedProbeEqualsTheTraceOfTheProbeText() {
    QFETCH(QString, arch);
    const auto id = runs_.at(arch.toStdString());
    auto run = load_run(db_, id);
    const auto text = run.dataset->tokenizer().decode(run.dataset->probe_tokens());
    const auto trace = trace_text(run, text, TraceTextOptions{0, /*last_token_is_target=*/true});
    const auto stored = stored_probe(db_, id);
    QVERIFY(!stored.is_null());
    QCOMPARE(QString::fromStdString(trace.to_json().dump()), QString::fromStdString(stored.dump()));
  }

  void traceShapesAreTokensByLayers_data() { storedProbeEqualsTheTraceOfTheProbeText_data(); }
  void traceShapesAreTokensByLayers() {
    QFETCH(QString, arch);
    auto run = load_run(db_, runs_.at(arch.toStdString()));
    const auto trace = trace_text(run, "<bos> 1 2 3 <sep> 1 2", 5);
    const std::size_t n = 7;
    QCOMPARE(trace.tokens.size(), n);
    QCOMPARE(trace.tokens.front(), std::string("<bos>"));
    QCOMPARE(trace.layers.size(), std::size_t(2));  // n_layer
    int routed = 0;
    for (const auto& layer : trace.layers) {
      if (layer.contains("gate")) QCOMPARE(layer["gate"].size(), n);
      if (layer.contains("decision")) QCOMPARE(layer["decision"].size(), n);
      routed += layer["routed"].get<bool>() ? 1 : 0;
    }
    QCOMPARE(routed > 0, arch == "dtrnet");
    QCOMPARE(trace.next_logprob.size(), n);
    for (std::size_t i = 0; i + 1 < n; ++i) QVERIFY(trace.next_logprob[i] <= 0);
    QVERIFY(std::isnan(trace.next_logprob.back()));  // nothing follows the text
    QCOMPARE(trace.top_k.size(), n);
    for (const auto& position : trace.top_k) {
      QCOMPARE(position.size(), std::size_t(5));
      double sum = 0;
      for (std::size_t j = 0; j < position.size(); ++j) {
        if (j > 0) QVERIFY(position[j].prob <= position[j - 1].prob);
        QVERIFY(position[j].prob >= 0);
        QVERIFY(!position[j].text.empty());
        sum += position[j].prob;
      }
      QVERIFY2(sum <= 1 + 1e-6, qPrintable(QString::number(sum)));
    }
    // p(actual next) is one of the ranked probabilities when the actual token is ranked.
    const auto doc = trace.to_json();
    QCOMPARE(doc["top_k"].size(), n);
    QVERIFY(doc["next_logprob"].back().is_null());
    QVERIFY(!doc.contains("dropped_tokens"));
  }

  void longTextKeepsTheLastContextTokens() {
    auto run = load_run(db_, runs_.at("dense"));
    const auto context = run.dataset->context();
    std::string text;
    for (std::int64_t i = 0; i < 3 * context; ++i) text += std::to_string(i % 5) + " ";
    const auto trace = trace_text(run, text, 3);
    QCOMPARE(static_cast<std::int64_t>(trace.tokens.size()), context);
    QCOMPARE(trace.dropped_tokens, 2 * context);
    QCOMPARE(trace.tokens.back(), std::to_string((3 * context - 1) % 5));
    QCOMPARE(trace.to_json()["dropped_tokens"].get<std::int64_t>(), 2 * context);
  }

  void emptyOrUnencodableTextIsAClearError() {
    auto run = load_run(db_, runs_.at("dense"));
    for (const char* text : {"", "   \n ", "1 2 banana"}) {
      try {
        trace_text(run, text, 5);
        QFAIL(qPrintable(QString("accepted '%1'").arg(QString::fromUtf8(text))));
      } catch (const DataError& e) {
        const std::string what = e.what();
        QVERIFY2(what.find("run " + std::to_string(run.run_id)) != std::string::npos, e.what());
        if (std::string(text).find("banana") != std::string::npos) QVERIFY2(what.find("banana") != std::string::npos, e.what());
      }
    }
    QVERIFY_THROWS_EXCEPTION(DataError, trace_text(run, "1", TraceTextOptions{5, true}));  // no target left
  }

  void openTraceableReadsLanguageModelsToo() {
    auto run = open_traceable(db_, runs_.at("dtrnet"));
    QCOMPARE(run.task, Task::LanguageModel);
    QCOMPARE(run.num_layers, std::int64_t(2));
    QVERIFY(run.step > 0);
    QCOMPARE(trace_text(run, "<bos> 4 2", 2).tokens.size(), std::size_t(3));
    QVERIFY_THROWS_EXCEPTION(CheckpointError, open_traceable(db_, runs_.at("dtrnet"), 12345));
  }

  void classifierTraceOfAPair() {
    const auto id = runs_.at("tagat");
    auto run = open_traceable(db_, id);
    QCOMPARE(run.task, Task::Classification);
    QCOMPARE(run.labels.size(), std::size_t(3));
    // The stored probe's pair, written back as text: premise, line break, hypothesis.
    auto stored = stored_probe(db_, id);
    QVERIFY(!stored.is_null());
    std::string premise, hypothesis;
    int seps = 0;
    for (const auto& t : stored["tokens"]) {
      const auto word = t.get<std::string>();
      if (word == "[CLS]") continue;
      if (word == "[SEP]") {
        ++seps;
        continue;
      }
      (seps == 0 ? premise : hypothesis) += word + " ";
    }
    const auto trace = trace_text(run, premise + "\n" + hypothesis, 5);
    QCOMPARE(trace.task, Task::Classification);
    const auto n = trace.tokens.size();
    QCOMPARE(n, stored["tokens"].size());
    double sum = 0;
    for (double p : trace.class_probs) sum += p;
    QVERIFY(std::abs(sum - 1) < 1e-5);
    QVERIFY(trace.predicted >= 0 && trace.predicted < 3);
    QCOMPARE(trace.token_data["expert"].size(), n);     // (T, L, k)
    QCOMPARE(trace.token_data["gate"][0].size(), std::size_t(1));
    // The same code path as the stored probe: equal but for which validation example and its gold label.
    for (const auto* key : {"index", "label", "label_name"}) stored.erase(key);
    QCOMPARE(QString::fromStdString(trace.to_json().dump()), QString::fromStdString(stored.dump()));
  }
};

}  // namespace test_token_trace

ROUTELAB_TEST_SUITE(test_token_trace, TestTokenTrace)
#include "test_token_trace.moc"
