// Qt Test suite (offscreen) for the Zero-shot tasks page on two tiny character models trained here (and a TAGAT
// classifier, which the page does not list): task files listed, checked runs scored on the worker thread with the
// numbers `tasks` gives and kept with the run, the second run paired against the first, a bad file's error in the
// table with nothing kept, a stop that keeps nothing of the run it interrupts, the task list remembered, and the main
// window's page and the runs browser's action.
#include <QAction>
#include <QCheckBox>
#include <QFile>
#include <QComboBox>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/analysis/zero_shot_compare.h"
#include "core/analysis/zero_shot_run.h"
#include "core/config/experiment_config.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "tests/suite.h"
#include "ui/main_window.h"
#include "ui/runs_panel.h"
#include "ui/store_service.h"
#include "ui/workspace_tabs.h"
#include "ui/zero_shot_view.h"

namespace test_gui_tasks {

using routelab::ZeroShotView;

namespace {

constexpr int kTimeoutMs = 60000;

qint64 trainRun(const std::string& db, const std::vector<std::string>& sets) {
  routelab::TrainRequest request;
  request.config = routelab::resolve_config(nlohmann::json::object(), sets, "test");
  request.db_path = db;
  const auto outcome = routelab::train(request);
  return outcome.status == routelab::RunStatus::Finished ? outcome.run_id : 0;
}

QString writeFile(const QTemporaryDir& dir, const QString& name, const std::string& text) {
  const QString path = dir.filePath(name);
  std::ofstream(path.toStdString(), std::ios::binary) << text;
  return path;
}

std::string piqaLine(const std::string& goal, const std::string& a, const std::string& b, int label) {
  return nlohmann::json{{"goal", goal}, {"sol1", a}, {"sol2", b}, {"label", label}}.dump() + "\n";
}

}  // namespace

class TestGuiTasks : public QObject {
  Q_OBJECT

  QTemporaryDir home_;
  QString db_, piqa_, lambada_, bad_, big_, forty_;
  qint64 lm_ = 0, lm2_ = 0, tagat_ = 0;

  /// A view on the test store, shown, once its runs are listed.
  bool prepare(ZeroShotView& view, routelab::StoreService& service) {
    view.resize(1100, 700);
    view.show();
    service.requestRuns();
    return QTest::qWaitFor([&] { return view.runList()->count() == 2; }, kTimeoutMs);
  }

  bool scoreAndWait(ZeroShotView& view) {
    QSignalSpy finished(&view, &ZeroShotView::finished);
    if (!view.runButton()->isEnabled()) return false;
    view.runButton()->click();
    return finished.wait(kTimeoutMs) || finished.count() > 0;
  }

  std::vector<routelab::MetricPoint> stored(const std::string& key) {
    routelab::RunStore store(db_.toStdString(), /*mark_crashed=*/false);
    return store.metric(lm_, key);
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(home_.isValid());
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName(QStringLiteral("RouteLabTest"));
    QCoreApplication::setApplicationName(QStringLiteral("test_gui_tasks"));
    qputenv("ROUTELAB_HOME", home_.path().toUtf8());
    qputenv("XDG_CONFIG_HOME", home_.filePath(QStringLiteral("config")).toUtf8());
    QSettings().remove(QStringLiteral("zeroShot"));  // test mode keeps settings in ~/.qttest between runs
    db_ = home_.filePath(QStringLiteral("tasks.sqlite"));
    const std::vector<std::string> lm = {"model.n_layer=2", "model.n_embd=32", "model.n_head=4", "data.context=32",
                                         "train.batch_size=8", "train.steps=6", "train.eval_every=6",
                                         "train.checkpoint_every=6", "train.eval_batches=1", "train.warmup_steps=2",
                                         "run.threads=1"};
    lm_ = trainRun(db_.toStdString(), lm);
    auto seeded = lm;
    seeded.push_back("run.seed=2");
    seeded.push_back("train.checkpoint_every=3");  // checkpoints at steps 3 and 6
    lm2_ = trainRun(db_.toStdString(), seeded);
    tagat_ = trainRun(db_.toStdString(),
                      {"model.arch=tagat", "model.n_layer=1", "model.n_embd=32", "model.n_head=4",
                       "data.source=entailment", "data.tokenizer=word", "data.context=48",
                       "data.task_train_examples=64", "data.task_eval_examples=16", "train.batch_size=32",
                       "train.epochs=1", "train.warmup_steps=1", "run.threads=1"});
    QVERIFY(lm_ > 0 && lm2_ > 0 && tagat_ > 0);
    piqa_ = writeFile(home_, QStringLiteral("piqa.jsonl"),
                      piqaLine("And God said", "let there be light", "qqq zzz", 0) +
                          piqaLine("In the", "xq", "beginning", 1) + piqaLine("And the earth", "was", "qz", 0));
    lambada_ = writeFile(home_, QStringLiteral("last-words.jsonl"),
                         "{\"text\": \"And God said, Let there be light\"}\n{\"text\": \"In the beginning God\"}\n");
    bad_ = writeFile(home_, QStringLiteral("bad.jsonl"),
                     piqaLine("And God", "said", "zz", 0) + "{\"goal\": \"x\", \"sol1\": \"a\", \"sol2\": \"b\"}\n");
    std::string many;
    for (int i = 0; i < 3000; ++i) many += piqaLine("And God said " + std::to_string(i), "unto", "qqq", i % 2);
    big_ = writeFile(home_, QStringLiteral("big.jsonl"), many);
    // Forty two-way examples the two small runs answer differently here and there.
    const std::vector<std::string> words = {"light", "earth", "waters", "beginning", "darkness", "heaven", "God", "day"};
    std::string forty;
    for (std::size_t i = 0; i < 40; ++i)
      forty += piqaLine("And the " + words[i % 8] + " was", words[(i * 3 + 1) % 8] + " upon the",
                        words[(i * 5 + 2) % 8] + " of", static_cast<int>(i % 2));
    forty_ = writeFile(home_, QStringLiteral("forty.jsonl"), forty);
  }

  /// Each function starts from the page's defaults (test mode keeps settings in ~/.qttest between runs).
  void init() { QSettings().remove(QStringLiteral("zeroShot")); }
  void cleanupTestCase() { QSettings().remove(QStringLiteral("zeroShot")); }

  void scoresTheCheckedRunsAsTheCliDoes() {
    routelab::StoreService service(db_);
    ZeroShotView view(&service);
    QVERIFY(prepare(view, service));  // the classifier is not listed
    QSet<QString> listed;
    for (int i = 0; i < 2; ++i) listed << view.runList()->item(i)->text().section(QStringLiteral(" · "), 0, 0);
    QCOMPARE(listed, (QSet<QString>{QString::number(lm_), QString::number(lm2_)}));
    QVERIFY(!view.runButton()->isEnabled());
    QVERIFY(view.addTask(piqa_));
    QVERIFY(view.addTask(lambada_, QStringLiteral("lambada")));
    QVERIFY(!view.addTask(piqa_));  // listed once
    auto* format = qobject_cast<QComboBox*>(view.taskTable()->cellWidget(1, 1));
    QVERIFY(format);
    format->setCurrentIndex(format->findData(QStringLiteral("lambada")));
    QCOMPARE(view.taskSpecs(), (QStringList{QStringLiteral("piqa=") + piqa_,
                                            QStringLiteral("lambada=") + lambada_ + QStringLiteral(":lambada")}));
    QVERIFY(!view.runButton()->isEnabled());  // no run checked yet
    view.checkRuns({lm_, lm2_, tagat_});
    QCOMPARE(view.checkedRuns(), (QList<qint64>{lm_, lm2_}));
    QVERIFY(scoreAndWait(view));
    QCOMPARE(view.outcomes().size(), 2);
    QVERIFY2(view.outcomes()[0].error.isEmpty(), qPrintable(view.outcomes()[0].error));

    // The same numbers as `tasks` (evaluate_zero_shot) on the same files, shown and kept.
    routelab::ZeroShotOptions options;
    for (const QString& spec : view.taskSpecs()) options.tasks.push_back(routelab::parse_task_spec(spec.toStdString()));
    const auto direct = routelab::evaluate_zero_shot(db_.toStdString(), lm_, options);
    QTableWidget* results = view.resultTable();
    QCOMPARE(results->rowCount(), 4);  // two tasks of each run
    QCOMPARE(results->item(0, 1)->text(), QStringLiteral("piqa"));
    QCOMPARE(results->item(0, 2)->text(), QStringLiteral("3"));
    const auto& piqa = direct.tasks.at(0);
    QCOMPARE(results->item(0, 3)->text(),
             QStringLiteral("%1 ± %2").arg(piqa.acc, 0, 'f', 4).arg(piqa.acc_stderr, 0, 'f', 4));
    QCOMPARE(results->item(1, 1)->text(), QStringLiteral("lambada"));
    QCOMPARE(results->item(1, 5)->text(), QString::number(direct.tasks.at(1).perplexity, 'f', 3));
    QCOMPARE(results->item(1, 4)->text(), QStringLiteral("–"));  // cloze: no acc_norm
    const auto acc = stored("task/piqa/acc");
    QCOMPARE(acc.size(), std::size_t{1});
    QCOMPARE(acc[0].value, piqa.acc);
    QCOMPARE(acc[0].step, direct.step);
    QCOMPARE(stored("task/lambada/ppl").size(), std::size_t{1});
    QVERIFY(view.statusLabel()->text().contains(QStringLiteral("kept")));

    // The second run against the first, example by example: piqa's acc and acc_norm, lambada's acc.
    QTableWidget* pairs = view.pairTable();
    QVERIFY(pairs->isVisible());
    QCOMPARE(pairs->rowCount(), 3);
    QCOMPARE(pairs->item(0, 0)->text(), QStringLiteral("piqa"));
    QCOMPARE(pairs->item(1, 1)->text(), QStringLiteral("acc_norm"));
    QCOMPARE(pairs->item(2, 0)->text(), QStringLiteral("lambada"));
    QVERIFY(pairs->item(0, 2)->text().startsWith(QString::number(lm_) + QStringLiteral(": ")));
    QVERIFY(pairs->item(0, 3)->text().startsWith(QString::number(lm2_) + QStringLiteral(": ")));
    const auto expected = routelab::compare_reports(view.outcomes()[0].report, view.outcomes()[1].report);
    QCOMPARE(pairs->item(0, 5)->text(), QString::number(expected.at(0).only_a));
    QCOMPARE(pairs->item(0, 7)->text(), QString::number(expected.at(0).p_value, 'g', 3));

    const QStringList markdown = view.markdown().split(QLatin1Char('\n'), Qt::SkipEmptyParts);
    QCOMPARE(markdown.size(), 11);  // header, rule and four rows; header, rule and three pairs
    QVERIFY(markdown[0].startsWith(QStringLiteral("| Run | Task | Examples | acc |")));
    QVERIFY(markdown[2].contains(QStringLiteral(" | piqa | 3 | ")));
    QVERIFY(markdown[6].startsWith(QStringLiteral("| Task | Measure | Run a | Run b |")));
  }

  void disagreementsListTheDiscordantExamples() {
    // Selecting a pair lists the examples behind its discordant counts, each with its text and both runs' choices.
    routelab::StoreService service(db_);
    ZeroShotView view(&service);
    QVERIFY(prepare(view, service));
    QVERIFY(view.addTask(forty_));
    view.storeCheck()->setChecked(false);
    view.checkRuns({lm_, lm2_});
    QVERIFY(scoreAndWait(view));
    QTableWidget* pairs = view.pairTable();
    QTableWidget* examples = view.disagreementTable();
    QCOMPARE(pairs->rowCount(), 2);  // acc and acc_norm
    QVERIFY(!examples->isVisible());
    const auto task = routelab::read_task(routelab::parse_task_spec(forty_.toStdString()));
    int listed = 0;
    for (int row = 0; row < 2; ++row) {
      pairs->selectRow(row);
      QVERIFY(examples->isVisible());
      const int discordant = pairs->item(row, 5)->text().toInt() + pairs->item(row, 6)->text().toInt();
      QCOMPARE(examples->rowCount(), discordant);
      const auto expected = routelab::disagreements(view.outcomes()[0].report, view.outcomes()[1].report, "forty",
                                                    pairs->item(row, 1)->text().toStdString());
      QCOMPARE(static_cast<int>(expected.size()), discordant);
      for (int r = 0; r < discordant; ++r) {
        const auto& d = expected[static_cast<std::size_t>(r)];
        const auto& example = task.examples.at(static_cast<std::size_t>(d.example));
        QCOMPARE(examples->item(r, 0)->text(), QString::number(d.example));
        QCOMPARE(examples->item(r, 1)->text(), QString::number(d.right_a ? lm_ : lm2_));
        QCOMPARE(examples->item(r, 2)->toolTip(), QString::fromStdString(example.requests[0].context));
        QCOMPARE(examples->item(r, 3)->text(),
                 QString::fromStdString(example.requests.at(static_cast<std::size_t>(d.label)).continuation).trimmed());
        // The run it is right for chose the answer; the other run chose the other choice.
        QCOMPARE(examples->item(r, d.right_a ? 4 : 5)->text(), examples->item(r, 3)->text());
        QVERIFY(examples->item(r, d.right_a ? 5 : 4)->text() != examples->item(r, 3)->text());
      }
      listed += discordant;
    }
    QVERIFY2(listed > 0, "the two runs agreed on every example: the check read nothing");
    pairs->clearSelection();
    QVERIFY(!examples->isVisible());
    view.everyPairCheck()->setChecked(true);  // two runs have one pair either way: redrawn, the same
    QCOMPARE(pairs->rowCount(), 2);
    QCOMPARE(pairs->item(1, 2)->text().section(QLatin1Char(':'), 0, 0), QString::number(lm_));
  }

  void keptResultsShowWithoutScoring() {
    // "Show kept": each checked run's stored results, paired, nothing scored: the figures and pairs of the scoring
    // that kept them, and the disagreements' text read again from the task file (or said to be gone).
    routelab::StoreService service(db_);
    ZeroShotView view(&service);
    QVERIFY(prepare(view, service));
    const QString copy = home_.filePath(QStringLiteral("kept.jsonl"));
    QFile::remove(copy);
    QVERIFY(QFile::copy(forty_, copy));
    QVERIFY(view.addTask(copy));
    view.checkRuns({lm_, lm2_});
    QVERIFY(scoreAndWait(view));  // kept with the runs (the default)
    const auto scored = view.outcomes();
    QCOMPARE(scored.size(), 2);
    QSignalSpy finished(&view, &ZeroShotView::finished);
    view.storedButton()->click();
    QVERIFY(finished.wait(kTimeoutMs) || finished.count() > 0);
    QCOMPARE(view.outcomes().size(), 2);
    QVERIFY2(view.outcomes()[0].error.isEmpty(), qPrintable(view.outcomes()[0].error));
    QVERIFY(view.statusLabel()->text().contains(QStringLiteral("kept results")));
    const auto& kept = view.outcomes()[1].report;
    const auto at = std::find_if(kept.tasks.begin(), kept.tasks.end(), [](const auto& t) { return t.name == "kept"; });
    QVERIFY(at != kept.tasks.end());
    QCOMPARE(at->acc, scored[1].report.tasks.at(0).acc);
    QCOMPARE(at->acc_norm, scored[1].report.tasks.at(0).acc_norm);
    QTableWidget* pairs = view.pairTable();
    const auto keptRow = [pairs] {  // the kept task's acc_norm pair among every stored task's
      for (int r = 0; r < pairs->rowCount(); ++r)
        if (pairs->item(r, 0)->text() == QStringLiteral("kept") && pairs->item(r, 1)->text() == "acc_norm") return r;
      return -1;
    };
    const int row = keptRow();
    QVERIFY(row >= 0);
    const auto expected = routelab::compare_reports(scored[0].report, scored[1].report);
    QCOMPARE(pairs->item(row, 5)->text(), QString::number(expected.at(1).only_a));
    QCOMPARE(pairs->item(row, 6)->text(), QString::number(expected.at(1).only_b));
    const int discordant = static_cast<int>(expected.at(1).only_a + expected.at(1).only_b);
    QVERIFY(discordant > 0);
    pairs->selectRow(row);
    QCOMPARE(view.disagreementTable()->rowCount(), discordant);
    QVERIFY(view.disagreementTable()->item(0, 2)->text().startsWith(QStringLiteral("Question: ")));
    // The task file gone: the same rows, by index and choice number.
    QVERIFY(QFile::remove(copy));
    view.storedButton()->click();
    QVERIFY(finished.wait(kTimeoutMs) || finished.count() > 1);
    QVERIFY(keptRow() >= 0);
    pairs->selectRow(keptRow());
    QCOMPARE(view.disagreementTable()->rowCount(), discordant);
    QVERIFY(view.disagreementTable()->item(0, 2)->text().contains(QStringLiteral("no longer at hand")));
    QVERIFY(view.disagreementTable()->item(0, 3)->text().startsWith(QStringLiteral("choice ")));
  }

  void perplexityRowsSayWhatIsNotScored() {
    // The runs' character tokenizer has no prefix token: a text task's row says each document's first token was fed,
    // not scored, as `tasks` prints it under its table; a multiple-choice row says nothing of it.
    routelab::StoreService service(db_);
    ZeroShotView view(&service);
    QVERIFY(prepare(view, service));
    QVERIFY(view.addTask(piqa_));
    QVERIFY(view.addTask(lambada_, QStringLiteral("pages"), QStringLiteral("text")));
    QCOMPARE(view.taskSpecs().value(1), QStringLiteral("pages=") + lambada_ + QStringLiteral(":text"));
    view.checkRuns({lm_});
    QVERIFY(scoreAndWait(view));
    QVERIFY2(view.outcomes().value(0).error.isEmpty(), qPrintable(view.outcomes().value(0).error));
    QTableWidget* results = view.resultTable();
    QCOMPARE(results->rowCount(), 2);
    QCOMPARE(results->item(1, 1)->text(), QStringLiteral("pages"));
    const auto note = QStringLiteral("each document's first token fed, not scored");
    QVERIFY2(results->item(1, 5)->toolTip().contains(note), qPrintable(results->item(1, 5)->toolTip()));
    QVERIFY2(!results->item(0, 5)->toolTip().contains(note), qPrintable(results->item(0, 5)->toolTip()));
  }

  void fewShotPromptsScoreAsTheCliDoes() {
    // Shots and a task's few-shot file: the figures `tasks --fewshot 2 --fewshot-from forty=piqa.jsonl` gives.
    {
      routelab::StoreService service(db_);
      ZeroShotView view(&service);
      QVERIFY(prepare(view, service));
      QVERIFY(view.addTask(forty_));
      view.taskTable()->selectRow(0);
      view.taskTable()->item(0, 3)->setText(piqa_);  // what "Few-shot file…" sets
      view.shotsSpin()->setValue(2);
      view.storeCheck()->setChecked(false);
      QCOMPARE(view.fewshotSpecs(), QStringList{QStringLiteral("forty=") + piqa_});
      view.checkRuns({lm_});
      QVERIFY(scoreAndWait(view));
      QVERIFY2(view.outcomes().at(0).error.isEmpty(), qPrintable(view.outcomes().at(0).error));
      routelab::ZeroShotOptions options;
      options.tasks = {routelab::parse_task_spec(forty_.toStdString())};
      options.fewshot = 2;
      options.fewshot_from = {routelab::parse_task_spec("forty=" + piqa_.toStdString())};
      const auto direct = routelab::evaluate_zero_shot(db_.toStdString(), lm_, options);
      QCOMPARE(view.resultTable()->item(0, 1)->text(), QStringLiteral("forty_2shot"));
      const auto& task = view.outcomes().at(0).report.tasks.at(0);
      QCOMPARE(task.shots, std::int64_t{2});
      QCOMPARE(task.acc, direct.tasks.at(0).acc);
      QCOMPARE(task.acc_norm, direct.tasks.at(0).acc_norm);
      const auto prompts = routelab::read_tasks(options).at(0);  // the solved examples of piqa.jsonl, as drawn
      QVERIFY(prompts.examples.at(0).requests.at(0).context.find("Question: In the\nAnswer:") != std::string::npos ||
              prompts.examples.at(0).requests.at(0).context.find("Question: And") != std::string::npos);
      for (std::size_t e = 0; e < prompts.examples.size(); ++e)
        QCOMPARE(view.outcomes().at(0).tasks->at(0).examples.at(e).requests, prompts.examples.at(e).requests);
    }
    routelab::StoreService service(db_);
    ZeroShotView again(&service);  // remembered
    QCOMPARE(again.shotsSpin()->value(), 2);
    QCOMPARE(again.fewshotSpecs(), QStringList{QStringLiteral("forty=") + piqa_});
  }

  void badFilesAndStopsKeepNothing() {
    routelab::StoreService service(db_);
    ZeroShotView view(&service);
    QVERIFY(prepare(view, service));
    view.checkRuns({lm_});
    while (view.taskTable()->rowCount() > 0) view.taskTable()->removeRow(0);
    QVERIFY(view.addTask(bad_));
    QVERIFY(scoreAndWait(view));
    QCOMPARE(view.outcomes().size(), 1);
    QVERIFY(!view.pairTable()->isVisible());
    const QString error = view.outcomes()[0].error;
    QVERIFY2(error.contains(bad_ + QStringLiteral(":2")) && error.contains(QStringLiteral("label")), qPrintable(error));
    QCOMPARE(view.resultTable()->rowCount(), 1);
    QCOMPARE(view.resultTable()->item(0, 1)->text(), QStringLiteral("error"));
    QVERIFY(view.statusLabel()->text().contains(QStringLiteral("1 failed")));
    QVERIFY(stored("task/bad/acc").empty());

    // A stop at the next batch: the run it interrupts keeps nothing.
    view.taskTable()->removeRow(0);
    QVERIFY(view.addTask(big_));
    view.batchSpin()->setValue(1);
    QSignalSpy finished(&view, &ZeroShotView::finished);
    view.runButton()->click();
    QVERIFY(view.stopButton()->isEnabled() && !view.runButton()->isEnabled() && !view.taskTable()->isEnabled());
    QVERIFY(QTest::qWaitFor([&] { return view.statusLabel()->text().contains(QStringLiteral("requests scored")); },
                            kTimeoutMs));
    view.stopButton()->click();
    QVERIFY(finished.wait(kTimeoutMs) || finished.count() > 0);
    QVERIFY2(view.statusLabel()->text().startsWith(QStringLiteral("Stopped")), qPrintable(view.statusLabel()->text()));
    QVERIFY(view.outcomes().isEmpty());
    QCOMPARE(view.resultTable()->rowCount(), 0);
    QVERIFY(stored("task/big/acc").empty());
    QVERIFY(view.runButton()->isEnabled() && !view.stopButton()->isEnabled());
  }

  void everyCheckpointDrawsTheTaskOverTraining() {
    routelab::StoreService service(db_);
    ZeroShotView view(&service);
    QVERIFY(prepare(view, service));
    view.checkRuns({lm2_});
    while (view.taskTable()->rowCount() > 0) view.taskTable()->removeRow(0);
    QVERIFY(view.addTask(piqa_));
    view.batchSpin()->setValue(0);
    view.everyCheckpointCheck()->setChecked(true);
    QVERIFY(scoreAndWait(view));
    QCOMPARE(view.outcomes().size(), 2);  // steps 3 and 6, oldest first
    QCOMPARE(view.outcomes()[0].report.step, 3);
    QCOMPARE(view.outcomes()[1].report.step, 6);
    QVERIFY(view.resultTable()->item(0, 0)->text().endsWith(QStringLiteral("step 3")));
    routelab::RunStore store(db_.toStdString(), /*mark_crashed=*/false);
    const auto curve = store.metric(lm2_, "task/piqa/acc");
    QCOMPARE(curve.size(), std::size_t{2});
    QCOMPARE(curve[0].step, 3);
    QCOMPARE(curve[1].step, 6);
    QCOMPARE(curve[1].value, view.outcomes()[1].report.tasks.at(0).acc);
    QVERIFY(!view.pairTable()->isVisible());  // one run
    view.everyCheckpointCheck()->setChecked(false);
  }

  void choicesAreRemembered() {
    routelab::StoreService service(db_);
    QStringList specs;
    {
      ZeroShotView view(&service);
      while (view.taskTable()->rowCount() > 0) view.taskTable()->removeRow(0);
      QVERIFY(view.addTask(piqa_, QStringLiteral("my-piqa"), QStringLiteral("piqa")));
      QVERIFY(view.addTask(lambada_));
      view.limitSpin()->setValue(50);
      view.storeCheck()->setChecked(false);
      specs = view.taskSpecs();
    }
    ZeroShotView again(&service);
    QCOMPARE(again.taskSpecs(), specs);
    QCOMPARE(specs.front(), QStringLiteral("my-piqa=") + piqa_ + QStringLiteral(":piqa"));
    QCOMPARE(again.limitSpin()->value(), 50);
    QVERIFY(!again.storeCheck()->isChecked());
  }

  void mainWindowOpensThePageWithTheSelectedRuns() {
    routelab::MainWindowOptions options;
    options.dbPath = db_;
    options.confirmClose = false;
    routelab::MainWindow window(options);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    routelab::WorkspaceTabs* tabs = window.workspace();
    ZeroShotView* view = window.zeroShotView();
    QVERIFY(!tabs->isPageOpen(view));
    QCOMPARE(window.tasksAction()->shortcut(), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_T));
    window.tasksAction()->trigger();
    QVERIFY(tabs->isPageOpen(view));
    QTRY_COMPARE_WITH_TIMEOUT(view->runList()->count(), 2, kTimeoutMs);
    Q_EMIT tabs->tabCloseRequested(tabs->tabOf(view));
    auto* score = window.runsPanel()->findChild<QAction*>(QStringLiteral("scoreTasksAction"));
    QVERIFY(score);
    window.runsPanel()->selectRun(lm_);
    QTRY_COMPARE(window.runsPanel()->selectedRunIds(), (QList<qint64>{lm_}));
    QTRY_VERIFY(score->isEnabled());
    score->trigger();
    QVERIFY(tabs->isPageOpen(view));
    QCOMPARE(tabs->currentIndex(), tabs->tabOf(view));
    QCOMPARE(view->checkedRuns(), (QList<qint64>{lm_}));
  }
};

}  // namespace test_gui_tasks

ROUTELAB_TEST_SUITE(test_gui_tasks, TestGuiTasks)
#include "test_gui_tasks.moc"
