// Classification through the real trainer (issue 5): tiny TAGAT and vanilla-classifier runs on the embedded
// synthetic entailment task store their metrics, probe and checkpoints; a resumed run equals the uninterrupted
// one; an architecture whose task does not match the data source is a ConfigError naming data.source.
#include <QTemporaryDir>
#include <QtTest>

#include <atomic>

#include "core/analysis/run_analysis.h"
#include "core/config/experiment_config.h"
#include "core/data/classification.h"
#include "core/models/registry.h"
#include "core/store/run_store.h"
#include "core/train/classification_step.h"
#include "core/train/trainer.h"
#include "core/util/errors.h"
#include "tests/suite.h"
#include "tests/train_test_support.h"

namespace test_classification_train {

using namespace routelab;
using routelab::test::StopAfter;

namespace {

/// 256 training pairs in batches of 32: 8 steps per epoch, 3 epochs = 24 steps.
ExperimentConfig tiny_config(const std::string& arch, std::vector<std::string> extra = {}) {
  std::vector<std::string> sets = {"model.arch=" + arch, "model.n_embd=32", "model.n_head=4", "data.source=entailment",
                                   "data.tokenizer=word", "data.context=48", "data.task_train_examples=256",
                                   "data.task_eval_examples=64", "train.batch_size=32", "train.epochs=3",
                                   "train.lr=1e-3", "train.min_lr=1e-4", "train.warmup_steps=4", "train.log_every=4",
                                   "run.threads=1"};
  if (arch == "tagat") sets.push_back("model.n_layer=1");
  sets.insert(sets.end(), extra.begin(), extra.end());
  return resolve_config(nlohmann::json::object(), sets, "test");
}

void expect_same_series(RunStore& store, std::int64_t a, std::int64_t b, const std::string& key) {
  const auto x = store.metric(a, key), y = store.metric(b, key);
  QVERIFY2(!x.empty(), key.c_str());
  QCOMPARE(y.size(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    QCOMPARE(y[i].step, x[i].step);
    QVERIFY2(x[i].value == y[i].value, qPrintable(QString("%1 step %2: %3 vs %4")
                                                      .arg(QString::fromStdString(key))
                                                      .arg(x[i].step)
                                                      .arg(x[i].value, 0, 'g', 17)
                                                      .arg(y[i].value, 0, 'g', 17)));
  }
}

}  // namespace

class TestClassificationTrain : public QObject {
  Q_OBJECT
  QTemporaryDir home_;

 private Q_SLOTS:
  void initTestCase() { qputenv("ROUTELAB_HOME", home_.path().toUtf8()); }

  void routingChangeCountsChangedExperts() {
    // 1 example, 3 positions (the last one padding), 2 layers, top-2 with the highest gate first.
    const auto before = torch::tensor({0, 1, 1, 2, -1, -1, /*L1*/ 2, 3, 0, 3, -1, -1}, torch::kShort)
                            .view({2, 1, 3, 2}).permute({1, 2, 0, 3}).contiguous();  // (1, 3, 2, 2)
    auto after = before.clone();
    after.index_put_({0, 1, 0, 0}, 0);                            // layer 0, token 1: (1, 2) -> (0, 2)
    after.index_put_({0, 0, 1, 0}, 3);                            // layer 1, token 0: (2, 3) -> (3, 2),
    after.index_put_({0, 0, 1, 1}, 2);                            // the same set, another top expert
    const auto change = routing_change(before, after);
    QCOMPARE(change.at("routing_change/L0"), 0.5);                // 1 of 2 real tokens
    QCOMPARE(change.at("routing_change/L1"), 0.5);
    QCOMPARE(change.at("routing_change"), 0.5);
    QCOMPARE(change.at("routing_change_set/L0"), 0.5);
    QCOMPARE(change.at("routing_change_set/L1"), 0.0);            // a reordering is no change of the set
    QCOMPARE(change.at("routing_change_set"), 0.25);
    QVERIFY(routing_change(torch::Tensor(), after).empty());      // first evaluation
    QVERIFY(routing_change(before.narrow(1, 0, 2), after).empty());  // another shape
    QCOMPARE(routing_change(after, after).at("routing_change"), 0.0);
  }

  /// Dynamic padding: the trailing all-padding positions go, the predictions stay.
  void trimmedBatchesGiveTheSamePredictions() {
    const auto config = tiny_config("tagat");
    const auto data = make_classification_dataset(config.data());
    const auto full = data->batch(Split::Val, {0, 1, 2, 3, 4, 5});
    const auto trimmed = trim_padding(full);
    const auto longest = full.mask.sum(1).max().item<std::int64_t>();
    QCOMPARE(trimmed.input.size(1), longest);
    QVERIFY(longest < full.input.size(1));
    QVERIFY(trimmed.mask.equal(full.mask.narrow(1, 0, longest)));
    QCOMPARE(trim_padding(trimmed).input.size(1), longest);  // nothing left to trim
    for (const std::string arch : {"tagat", "vanilla-classifier"}) {
      torch::manual_seed(3);
      auto model = create_classifier(tiny_config(arch).model(),
                                     {data->vocab_size(), data->max_length(), data->num_classes()});
      model->eval();
      torch::NoGradGuard no_grad;
      const auto a = model->forward(full.input, full.mask, full.segment).logits;
      const auto b = model->forward(trimmed.input, trimmed.mask, trimmed.segment).logits;
      QVERIFY2((a - b).abs().max().item<double>() < 1e-5, arch.c_str());
    }
  }

  void tagatRunStoresItsMetrics() {
    const auto db = home_.filePath("tagat.sqlite").toStdString();
    const auto outcome = train({tiny_config("tagat"), db, "tagat", ""});
    QVERIFY2(outcome.status == RunStatus::Finished, outcome.message.c_str());
    QCOMPARE(outcome.last_step, std::int64_t(24));
    QVERIFY(outcome.first_val_accuracy && outcome.last_val_accuracy);
    RunStore store(db);
    const auto id = outcome.run_id;
    QCOMPARE(store.run(id)->total_steps, std::int64_t(24));
    QCOMPARE(store.metric(id, "train/loss").size(), std::size_t(24));
    QCOMPARE(store.metric(id, "train/accuracy").size(), std::size_t(24));
    QCOMPARE(store.metric(id, "train/epoch_accuracy").size(), std::size_t(3));
    // Validation before training and after each epoch, over the whole split.
    const auto accuracy = store.metric(id, "val/accuracy");
    QCOMPARE(accuracy.size(), std::size_t(4));
    QCOMPARE(accuracy[1].step, std::int64_t(8));
    for (const auto& p : accuracy) QVERIFY(p.value >= 0 && p.value <= 1);
    for (const auto* key : {"val/loss", "val/macro_f1", "val/entropy", "val/load_imbalance",
                            "val/load_imbalance_per_layer", "val/load/L0/E0",
                            "val/load/L0/E3", "val/load/E1", "val/assign/L0/E2", "train/entropy", "train/aux_loss",
                            "train/load/L0/E0", "train/lr", "train/grad_norm", "val/epoch"})
      QVERIFY2(!store.metric(id, key).empty(), key);
    double load_sum = 0;
    for (int i = 0; i < 4; ++i) load_sum += store.metric(id, "val/load/L0/E" + std::to_string(i)).back().value;
    QVERIFY2(std::abs(load_sum - 1.0) < 1e-5, qPrintable(QString::number(load_sum)));
    // Routing change: from the second evaluation on, a share in [0, 1] per layer and as the mean.
    const auto change = store.metric(id, "val/routing_change");
    QCOMPARE(change.size(), std::size_t(3));
    QCOMPARE(change[0].step, std::int64_t(8));
    for (const auto& p : change) QVERIFY(p.value >= 0 && p.value <= 1);
    QCOMPARE(store.metric(id, "val/routing_change/L0").size(), std::size_t(3));
    QCOMPARE(store.metric(id, "val/routing_change_set").size(), std::size_t(3));
    const auto entropy = store.metric(id, "val/entropy").back().value;
    QVERIFY(entropy >= 0 && entropy <= std::log(2.0) + 1e-6);  // top-2: at most ln 2
    const auto evals = store.evals(id);
    QCOMPARE(evals.size(), std::size_t(4));
    const auto extra = nlohmann::json::parse(evals.back().extra_json);
    QCOMPARE(extra["task"].get<std::string>(), std::string("classification"));
    QCOMPARE(extra["f1"].size(), std::size_t(3));
    QCOMPARE(extra["examples"].get<int>(), 64);
    QVERIFY(extra["layers"][0]["stats"].contains("load_E0"));
    QVERIFY(!store.routing(id).empty());
    // The probe: the tokens of one validation pair and their gate probabilities per layer and expert.
    const auto probe = nlohmann::json::parse(store.probes(id).back().json);
    QCOMPARE(probe["task"].get<std::string>(), std::string("classification"));
    const auto n = probe["tokens"].size();
    QVERIFY(n >= 3);
    QCOMPARE(probe["token_data"]["gate"].size(), n);
    QCOMPARE(probe["token_data"]["gate"][0].size(), std::size_t(1));     // layers
    QCOMPARE(probe["token_data"]["gate"][0][0].size(), std::size_t(4));  // experts
    QCOMPARE(probe["token_data"]["expert"][0][0].size(), std::size_t(2));  // top-k ids
    QCOMPARE(probe["class_probs"].size(), std::size_t(3));
    QVERIFY(!store.checkpoints(id).empty());
    QCOMPARE(store.latest_checkpoint(id)->step, std::int64_t(24));
  }

  void vanillaClassifierRunsWithExtraEvaluations() {
    const auto db = home_.filePath("vanilla.sqlite").toStdString();
    const auto outcome = train({tiny_config("vanilla-classifier", {"train.eval_every=4"}), db, "vanilla", ""});
    QVERIFY2(outcome.status == RunStatus::Finished, outcome.message.c_str());
    RunStore store(db);
    const auto accuracy = store.metric(outcome.run_id, "val/accuracy");
    QCOMPARE(accuracy.size(), std::size_t(7));  // step 0, then every 4 steps (epochs end at 8, 16, 24)
    QVERIFY(!store.metric(outcome.run_id, "val/macro_f1").empty());
    QVERIFY(store.metric(outcome.run_id, "val/entropy").empty());  // no routing
    QCOMPARE(store.metric(outcome.run_id, "train/accuracy").size(), std::size_t(24));
  }

  /// `eval` reopens a stored classifier: the same numbers as the trainer's last evaluation, the dense oracle as an
  /// eval-only option, and a clear error where an analysis needs a language model.
  void storedClassifierReEvaluates() {
    const auto db = home_.filePath("eval.sqlite").toStdString();
    const auto outcome = train({tiny_config("tagat"), db, "tagat", ""});
    QVERIFY2(outcome.status == RunStatus::Finished, outcome.message.c_str());
    QVERIFY(is_classification_run(db, outcome.run_id));
    auto run = load_classifier_run(db, outcome.run_id);
    const auto report = evaluate_run(run);
    RunStore store(db);
    QCOMPARE(report.task, Task::Classification);
    QCOMPARE(report.step, std::int64_t(24));
    QCOMPARE(report.examples, std::int64_t(64));
    QCOMPARE(report.accuracy, store.metric(outcome.run_id, "val/accuracy").back().value);
    QVERIFY(std::abs(report.loss - store.metric(outcome.run_id, "val/loss").back().value) < 1e-6);
    QVERIFY(std::abs(report.flops_ratio - store.metric(outcome.run_id, "val/flops_ratio").back().value) < 1e-9);
    QVERIFY(report.flops_ratio > 0.3 && report.flops_ratio < 1.0);  // top-2 of 4 experts
    QVERIFY(report.stats.count("load/E0") && !report.layers.empty());
    auto dense = load_classifier_run(db, outcome.run_id, {"model.dispatch=dense"});
    const auto oracle = evaluate_run(dense);
    QCOMPARE(oracle.accuracy, report.accuracy);
    QCOMPARE(oracle.flops_ratio, 1.0);
    try {
      load_run(db, outcome.run_id);
      QFAIL("a classifier opened as a language model");
    } catch (const ConfigError& e) {
      QVERIFY2(QString(e.what()).contains("run " + QString::number(outcome.run_id) + " (tagat)"), e.what());
    }
  }

  void resumeEqualsUninterrupted() {
    const auto db = home_.filePath("resume.sqlite").toStdString();
    const auto cfg = tiny_config("tagat", {"model.dropout=0.2", "train.checkpoint_every=5"});
    const auto full = train({cfg, db, "full", ""});
    QCOMPARE(full.status, RunStatus::Finished);
    std::atomic<bool> cancel{false};
    StopAfter stopper(cancel, 11);  // inside epoch 2: the resumed run must continue that epoch's order
    const auto part = train({cfg, db, "part", ""}, &stopper, &cancel);
    QCOMPARE(part.status, RunStatus::Stopped);
    QCOMPARE(part.last_step, std::int64_t(11));
    const auto resumed = resume(db, part.run_id);
    QVERIFY2(resumed.status == RunStatus::Finished, resumed.message.c_str());
    RunStore store(db);
    for (const auto* key : {"train/loss", "train/accuracy", "train/epoch_loss", "train/epoch_accuracy", "val/loss",
                            "val/accuracy", "val/macro_f1", "val/load/L0/E1"})
      expect_same_series(store, full.run_id, part.run_id, key);
    QCOMPARE(store.run(part.run_id)->resumed_from_step.value_or(-1), std::int64_t(11));
  }

  void taskMustMatchTheDataSource() {
    try {
      resolve_config({{"model", {{"arch", "tagat"}}}}, {}, "test");
      QFAIL("tagat on kjv data accepted");
    } catch (const ConfigError& e) {
      QVERIFY2(QString(e.what()).contains("data.source"), e.what());
    }
    try {
      resolve_config({{"model", {{"arch", "dense"}}}, {"data", {{"source", "entailment"}, {"tokenizer", "word"}}}}, {},
                     "test");
      QFAIL("a language model on entailment data accepted");
    } catch (const ConfigError& e) {
      QVERIFY2(QString(e.what()).contains("data.source"), e.what());
    }
  }

  void presetsResolve() {
    for (const auto* name : {"tagat-balanced", "tagat-specialised", "vanilla-classifier"}) {
      const auto c = preset_config(name);
      QCOMPARE(c.data().at("source").get<std::string>(), std::string("entailment"));
      QCOMPARE(c.train().at("epochs").get<int>(), 20);
      QCOMPARE(c.train().at("batch_size").get<int>(), 64);
      QCOMPARE(c.data().at("context").get<int>(), 128);
    }
    const auto balanced = preset_config("tagat-balanced");
    QCOMPARE(balanced.model().at("lambda_ent").get<double>(), 2.0);
    QCOMPARE(balanced.model().at("lambda_bal").get<double>(), 3.0);
    QCOMPARE(preset_config("tagat-specialised").model().at("lambda_bal").get<double>(), 1.0);
  }
};

}  // namespace test_classification_train

ROUTELAB_TEST_SUITE(test_classification_train, TestClassificationTrain)
#include "test_classification_train.moc"
