// The trainer end to end on real data: the copy task is learned, resume reproduces the uninterrupted curve,
// NaN fails the run, cancel stops it, and bad devices or configs fail before anything is stored.
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <filesystem>
#include <map>

#include <sqlite3.h>
#include <torch/cuda.h>

#include "core/analysis/run_analysis.h"
#include "core/config/experiment_config.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "core/util/errors.h"
#include "tests/conformance_models.h"
#include "tests/suite.h"
#include "tests/train_test_support.h"

namespace test_trainer {

using namespace routelab;
using routelab::test::StopAfter;

namespace {

/// A small copy-task config: learns within ~150 steps in a few seconds.
ExperimentConfig copy_config(std::vector<std::string> extra = {}) {
  std::vector<std::string> sets = {"model.n_layer=2", "model.n_embd=64", "model.n_head=4", "model.style=gpt2",
                                   "data.source=copy", "train.batch_size=32", "train.lr=3e-3", "train.min_lr=3e-4",
                                   "train.warmup_steps=20", "train.eval_batches=4", "train.log_every=5",
                                   "run.threads=2"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return resolve_config(nlohmann::json::object(), sets, "test");
}

}  // namespace

class TestTrainer : public QObject {
  Q_OBJECT
  QTemporaryDir home_;

 private Q_SLOTS:
  void initTestCase() { qputenv("ROUTELAB_HOME", home_.path().toUtf8()); }

  void copyTaskIsLearned() {
    const auto db = home_.filePath("copy.sqlite").toStdString();
    const auto outcome = train({copy_config({"train.steps=200", "train.eval_every=50"}), db, "copy", ""});
    QCOMPARE(outcome.status, RunStatus::Finished);
    RunStore store(db);
    const auto losses = store.metric(outcome.run_id, "train/loss");
    QCOMPARE(losses.size(), std::size_t(200));
    const double start = losses.front().value, end = losses.back().value;
    QVERIFY2(end < 0.1 * start, qPrintable(QString("loss %1 -> %2").arg(start).arg(end)));
    QVERIFY(outcome.last_val_loss && *outcome.last_val_loss < 0.1 * *outcome.first_val_loss);
    const auto run = store.run(outcome.run_id);
    QCOMPARE(run->status, RunStatus::Finished);
    QCOMPARE(run->last_step, std::int64_t(200));
    QCOMPARE(QString::fromStdString(run->arch), QString("dense"));
    QVERIFY(!run->torch_version.empty());
    QCOMPARE(store.evals(outcome.run_id).size(), std::size_t(5));  // step 0 and every 50
    QVERIFY(!store.routing(outcome.run_id).empty());
    const auto probes = store.probes(outcome.run_id);
    QCOMPARE(probes.size(), std::size_t(5));
    const auto probe = nlohmann::json::parse(probes.back().json);
    QCOMPARE(probe["tokens"].size(), probe["next_logprob"].size());
    QCOMPARE(probe["layers"].size(), std::size_t(2));
    for (const auto& key : {"train/lr", "train/grad_norm", "train/tokens_per_s", "val/loss", "val/ppl", "val/bpc"})
      QVERIFY2(!store.metric(outcome.run_id, key).empty(), key);
  }

  void routedRunStoresItsRouting() {
    const auto db = home_.filePath("routed.sqlite").toStdString();
    const auto outcome = train({copy_config({"model.arch=dtrnet", "model.n_layer=4", "model.routed_layers=1,2",
                                             "train.steps=20", "train.eval_every=10"}),
                                db, "routed", ""});
    QCOMPARE(outcome.status, RunStatus::Finished);
    RunStore store(db);
    const auto rows = store.routing(outcome.run_id);
    QVERIFY(!rows.empty());
    for (const auto& r : rows) {
      const bool routed_layer = r.layer == 1 || r.layer == 2;
      QVERIFY(r.routed_fraction >= 0 && r.routed_fraction <= 1);
      if (!routed_layer) QCOMPARE(r.routed_fraction, 1.0);
      if (routed_layer) QVERIFY(r.tokens_attn < r.tokens_mlp);
    }
    const auto ratio = store.metric(outcome.run_id, "val/flops_ratio");
    QCOMPARE(ratio.size(), std::size_t(3));
    QVERIFY(ratio.back().value < 1.0 && ratio.back().value > 0.3);
    QVERIFY(!store.metric(outcome.run_id, "train/flops_ratio").empty());
    QVERIFY(!store.metric(outcome.run_id, "val/routed_fraction").empty());
    const auto extra = nlohmann::json::parse(store.evals(outcome.run_id).back().extra_json);
    QCOMPARE(extra["mode"].get<std::string>(), std::string("inference"));
    QCOMPARE(extra["layers"].size(), std::size_t(4));
    QVERIFY(extra["layers"][1]["routed"].get<bool>() && !extra["layers"][0]["routed"].get<bool>());
    const auto probe = nlohmann::json::parse(store.probes(outcome.run_id).back().json);
    QCOMPARE(probe["layers"][2]["gate"].size(), probe["tokens"].size());
    QCOMPARE(probe["layers"][2]["decision"].size(), probe["tokens"].size());
    QVERIFY(!probe["layers"][0].contains("gate"));
  }

  void resumeReproducesTheCurve_data() {
    QTest::addColumn<QStringList>("extra");
    QTest::addColumn<int>("stop_after");  // the observer sees a step when it is read back: at a multiple of 5 here
    QTest::newRow("cpu") << QStringList{} << 11;
    // The GPU's way of reading scalars back (in batches) on the CPU, with dropout drawing from the CPU generator.
    QTest::newRow("cpu, settled every 5 steps, dropout") << QStringList{"train.sync_every=5", "model.dropout=0.1"} << 10;
    // The CUDA twin: its generator state must travel in the checkpoint for dropout to resume exactly.
    QTest::newRow("cuda, dropout") << QStringList{"run.device=cuda", "model.dropout=0.1"} << 10;
  }
  void resumeReproducesTheCurve() {
    QFETCH(QStringList, extra);
    QFETCH(int, stop_after);
    if (extra.contains("run.device=cuda") && !torch::cuda::is_available()) QSKIP("no CUDA device here");
    const auto db = home_.filePath("resume-%1.sqlite").arg(QTest::currentDataTag()).toStdString();
    std::vector<std::string> sets = {"train.steps=24", "train.eval_every=8", "train.checkpoint_every=8"};
    for (const auto& e : extra) sets.push_back(e.toStdString());
    const auto cfg = copy_config(sets);
    const auto full = train({cfg, db, "full", ""});
    QCOMPARE(full.status, RunStatus::Finished);

    std::atomic<bool> cancel{false};
    StopAfter stopper(cancel, stop_after);  // the stop writes a checkpoint at that step
    const auto part = train({cfg, db, "part", ""}, &stopper, &cancel);
    QCOMPARE(part.status, RunStatus::Stopped);
    QCOMPARE(part.last_step, std::int64_t(stop_after));
    {
      RunStore store(db);
      QCOMPARE(store.run(part.run_id)->status, RunStatus::Stopped);
      QCOMPARE(store.latest_checkpoint(part.run_id)->step, std::int64_t(stop_after));
    }
    const auto resumed = resume(db, part.run_id);
    QCOMPARE(resumed.status, RunStatus::Finished);
    QCOMPARE(resumed.run_id, part.run_id);

    RunStore store(db);
    const auto a = store.metric(full.run_id, "train/loss"), b = store.metric(part.run_id, "train/loss");
    QCOMPARE(b.size(), a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      QCOMPARE(b[i].step, a[i].step);
      QVERIFY2(a[i].value == b[i].value,
               qPrintable(QString("step %1: %2 vs %3").arg(a[i].step).arg(a[i].value, 0, 'g', 17).arg(b[i].value, 0, 'g', 17)));
    }
    const auto va = store.metric(full.run_id, "val/loss"), vb = store.metric(part.run_id, "val/loss");
    QCOMPARE(vb.size(), va.size());
    for (std::size_t i = 0; i < va.size(); ++i) QCOMPARE(vb[i].value, va[i].value);
    QCOMPARE(store.run(part.run_id)->resumed_from_step.value_or(-1), std::int64_t(stop_after));
    // Whatever the settling interval, the observer saw every step once, in order, up to the stop.
    QCOMPARE(stopper.steps_seen.size(), std::size_t(stop_after));
    for (std::size_t i = 0; i < stopper.steps_seen.size(); ++i) QCOMPARE(stopper.steps_seen[i], std::int64_t(i + 1));
  }

  void throughputIsMeasuredOverSettledSteps() {
    // Scalars read back every 40 steps (a GPU's way), logged at the last step of each batch: every logged rate must
    // be the tokens of the settled steps over the time they took; not one step's tokens over a whole batch's time,
    // nor 39 steps' tokens over the microseconds between two records of one batch. The reference is the observer's
    // own clock over the same steps, so a machine that slows down halfway changes both alike.
    struct Seen : TrainObserver {
      std::map<std::int64_t, StepMetrics> steps;
      void on_step(const StepMetrics& m) override { steps[m.step] = m; }
    } observer;
    const auto db = home_.filePath("throughput.sqlite").toStdString();
    const auto outcome =
        train({copy_config({"train.steps=80", "train.eval_every=1000", "train.sync_every=40", "train.log_every=40"}), db,
               "rate", ""},
              &observer);
    QCOMPARE(outcome.status, RunStatus::Finished);
    const auto rates = RunStore(db).metric(outcome.run_id, "train/tokens_per_s");
    QCOMPARE(rates.size(), std::size_t(3));  // steps 1, 40 and 80
    for (std::size_t i = 1; i < rates.size(); ++i) {
      const auto& from = observer.steps.at(rates[i - 1].step);
      const auto& to = observer.steps.at(rates[i].step);
      const double expected = static_cast<double>(to.tokens_seen - from.tokens_seen) / (to.elapsed_s - from.elapsed_s);
      QVERIFY2(rates[i].value > expected / 1.5 && rates[i].value < expected * 1.5,
               qPrintable(QString("step %1: %2 tokens/s, the observer's %3 over steps %4-%5")
                              .arg(rates[i].step).arg(rates[i].value).arg(expected).arg(from.step + 1).arg(to.step)));
    }
  }

  void epochsSetTheLanguageModelBudget() {
    // 10,000 characters: 8,000 training tokens; batch 4 x context 32 = 128 tokens a step -> 63 steps an epoch.
    const auto corpus = home_.filePath("epochs.txt");
    {
      QFile file(corpus);
      QVERIFY(file.open(QIODevice::WriteOnly));
      QByteArray text;
      while (text.size() < 10000) text += "In the beginning was the word, and the word was routed. ";
      file.write(text.left(10000));
    }
    const auto db = home_.filePath("epochs.sqlite").toStdString();
    const auto cfg = resolve_config(nlohmann::json::object(),
                                    {"model.n_layer=1", "model.n_embd=32", "model.n_head=2", "data.source=file",
                                     "data.path=" + corpus.toStdString(), "data.context=32", "train.batch_size=4",
                                     "train.epochs=2", "train.warmup_steps=2", "train.eval_every=1000",
                                     "train.checkpoint_every=10", "run.threads=2"},
                                    "test");
    std::atomic<bool> cancel{false};
    StopAfter stopper(cancel, 10);
    const auto part = train({cfg, db, "epochs", ""}, &stopper, &cancel);
    QCOMPARE(part.status, RunStatus::Stopped);
    QCOMPARE(RunStore(db).run(part.run_id)->total_steps, std::int64_t(2 * 63));
    // A queue slot resumes it on one thread; the budget is the stored one.
    const auto resumed = resume(db, part.run_id, nullptr, nullptr, /*threads=*/1);
    QCOMPARE(resumed.status, RunStatus::Finished);
    QCOMPARE(resumed.last_step, std::int64_t(2 * 63));
  }

  void cudaAndDataParallelOnlyOptionsChangeNothingHere() {
    // What the schemas mark cuda_only (train.tf32, train.deterministic) or data_parallel_only (run.backend, the
    // run.dist_* options) is not read by a run on the CPU in one process: each other value of each trains the same
    // losses, bit for bit, as the defaults do (what unread_config_keys tells the user).
    const auto db = home_.filePath("unread.sqlite").toStdString();
    const auto losses = [&](const std::string& set) {
      std::vector<std::string> sets = {"train.steps=4", "train.eval_every=4", "train.warmup_steps=2"};
      if (!set.empty()) sets.push_back(set);
      const auto outcome = train({copy_config(sets), db, "unread", ""});
      std::vector<double> out;
      for (const auto* key : {"train/loss", "val/loss"})
        for (const auto& row : RunStore(db).metric(outcome.run_id, key)) out.push_back(row.value);
      return outcome.status == RunStatus::Finished ? out : std::vector<double>{};
    };
    const auto base = losses("");
    QCOMPARE(base.size(), std::size_t{6});  // four training losses, evaluations at steps 0 and 4
    int flipped = 0;
    for (const auto& [section, schema] : {std::pair{"train.", &train_schema()}, std::pair{"run.", &run_schema()}})
      for (const auto& spec : *schema) {
        if (!spec.cuda_only && !spec.data_parallel_only) continue;
        for (const auto& value : routelab::test::conformance::other_values(spec)) {
          const auto set = section + spec.key + "=" + option_value_text(value);
          QVERIFY2(losses(set) == base, set.c_str());
          ++flipped;
        }
      }
    QVERIFY2(flipped >= 6, std::to_string(flipped).c_str());
  }

  void resumeRefusesFinishedRun() {
    const auto db = home_.filePath("resume-cpu.sqlite").toStdString();
    RunStore store(db);
    const auto finished = store.list_runs().back();  // the "full" run above
    QCOMPARE(finished.status, RunStatus::Finished);
    QVERIFY_THROWS_EXCEPTION(StoreError, resume(db, finished.id));
    QVERIFY_THROWS_EXCEPTION(StoreError, resume(db, 987654));
  }

  void nanLossFailsTheRun_data() {
    QTest::addColumn<int>("sync_every");
    QTest::newRow("read every step") << 1;
    QTest::newRow("read every 16 steps") << 16;  // the first non-finite step is still the one named and the last stored
  }
  void nanLossFailsTheRun() {
    QFETCH(int, sync_every);
    const auto db = home_.filePath("nan-%1.sqlite").arg(sync_every).toStdString();
    // A diverging run: lr 1e5 without clipping overflows the activations within a few steps (inf - inf = NaN).
    const auto cfg = resolve_config(nlohmann::json::object(),
                                    {"model.n_layer=2", "model.n_embd=64", "data.source=copy", "train.steps=60",
                                     "train.lr=1e5", "train.min_lr=1e5", "train.warmup_steps=0", "train.grad_clip=0",
                                     "train.eval_every=1000", "train.log_every=100",
                                     "train.sync_every=" + std::to_string(sync_every), "run.threads=2"},
                                    "test");
    const auto outcome = train({cfg, db, "nan", ""});
    QCOMPARE(outcome.status, RunStatus::Failed);
    QVERIFY2(QString::fromStdString(outcome.message).contains("loss became"), outcome.message.c_str());
    RunStore store(db);
    const auto run = store.run(outcome.run_id);
    QCOMPARE(run->status, RunStatus::Failed);
    QCOMPARE(QString::fromStdString(run->message), QString::fromStdString(outcome.message));
    const auto losses = store.metric(outcome.run_id, "train/loss");
    QVERIFY(!losses.empty() && !std::isfinite(losses.back().value));  // the non-finite value itself is stored
    for (std::size_t i = 0; i + 1 < losses.size(); ++i) QVERIFY(std::isfinite(losses[i].value));
    QVERIFY2(QString::fromStdString(outcome.message).contains(QString("at step %1 ").arg(losses.back().step)),
             outcome.message.c_str());
    QCOMPARE(outcome.last_step, losses.back().step);
  }

  void cudaWithoutGpuIsClearError() {
    const auto db = home_.filePath("cuda.sqlite").toStdString();
    try {
      train({copy_config({"run.device=cuda", "train.steps=2", "train.warmup_steps=0"}), db, "cuda", ""});
      QSKIP("a CUDA device is available here");
    } catch (const DeviceError& e) {
      QVERIFY2(QString(e.what()).contains("run.device"), e.what());
    }
    QVERIFY(RunStore(db).list_runs().empty());  // nothing stored for a run that never started
  }

  void cudaGraphIsRefusedByName_data() {
    QTest::addColumn<QStringList>("sets");
    QTest::addColumn<QString>("expected");
    QTest::newRow("on the CPU") << QStringList{"model.arch=dense"} << "run.device is cpu";
    // Radial Networks compact each step's running tokens (shapes from the data): its step is not declared capturable.
    QTest::newRow("routed model") << QStringList{"model.arch=radial"} << "Radial Networks";
    // DTRNet's step is captured with its routed rows packed, which needs bf16, and with the compacted attention.
    QTest::newRow("DTRNet in fp32") << QStringList{"model.arch=dtrnet", "model.routed_layers=T-D"}
                                    << "train.precision=fp32";
    // The captured step runs no teacher: distillation is refused rather than silently dropped.
    QTest::newRow("distillation") << QStringList{"model.arch=dense", "train.distill_from=1"} << "train.distill_from";
    QTest::newRow("DTRNet masked") << QStringList{"model.arch=dtrnet", "model.routed_layers=T-D",
                                                  "model.attention=masked", "train.precision=bf16"}
                                   << "model.attention=masked";
  }
  void cudaGraphIsRefusedByName() {
    QFETCH(QStringList, sets);
    QFETCH(QString, expected);
    const auto db = home_.filePath("graph.sqlite").toStdString();
    std::vector<std::string> settings{"train.cuda_graph=true", "train.steps=2", "train.warmup_steps=0"};
    for (const auto& s : sets) settings.push_back(s.toStdString());
    try {
      train({copy_config(settings), db, "graph", ""});
      QFAIL("no error");
    } catch (const ConfigError& e) {
      QVERIFY2(QString(e.what()).startsWith("train.cuda_graph: ") && QString(e.what()).contains(expected), e.what());
    }
    QVERIFY(!QFile::exists(QString::fromStdString(db)) || RunStore(db).list_runs().empty());
  }

  void cudaRunOpensOnTheCpu() {
    if (torch::cuda::is_available()) QSKIP("a CUDA device is available here: the run would open on it");
    // A run stored as trained on cuda:0 (its config says so) opens where no GPU is, on the CPU.
    const auto db = home_.filePath("moved.sqlite").toStdString();
    const auto outcome = train({copy_config({"train.steps=2", "train.warmup_steps=0"}), db, "moved", ""});
    QCOMPARE(outcome.status, RunStatus::Finished);
    {
      sqlite3* handle = nullptr;
      QCOMPARE(sqlite3_open(db.c_str(), &handle), SQLITE_OK);
      const auto sql = "UPDATE runs SET config_json = replace(config_json, '\"device\":\"cpu\"', "
                       "'\"device\":\"cuda:0\"'), device = 'cuda:0' WHERE id = " + std::to_string(outcome.run_id);
      QCOMPARE(sqlite3_exec(handle, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
      QCOMPARE(sqlite3_changes(handle), 1);
      sqlite3_close(handle);
    }
    const auto run = load_run(db, outcome.run_id);
    QCOMPARE(QString::fromStdString(run.config.run().at("device").get<std::string>()), QString("cuda:0"));
    QVERIFY(run.device.is_cpu());
    const auto logits = run.model->forward(torch::zeros({1, 4}, torch::kLong)).logits;
    QVERIFY(logits.device().is_cpu() && torch::isfinite(logits).all().item<bool>());
  }

  void badCorpusFileIsClearError() {
    const auto db = home_.filePath("bad.sqlite").toStdString();
    const auto missing = home_.filePath("no-such-corpus.txt").toStdString();
    try {
      train({resolve_config(nlohmann::json::object(), {"data.source=file", "data.path=" + missing}), db, "", ""});
      QFAIL("no error");
    } catch (const DataError& e) {
      QVERIFY2(QString(e.what()).contains(QString::fromStdString(missing)), e.what());
    }
  }
};

}  // namespace test_trainer

ROUTELAB_TEST_SUITE(test_trainer, TestTrainer)
#include "test_trainer.moc"
