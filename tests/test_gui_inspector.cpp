// Qt Test suite (offscreen) for the token inspector and the dashboard's metrics tab (issue 7), on tiny real runs
// trained here: a DTRNet and a dense char model (same corpus, same layer count) and a TAGAT classifier. The
// inspector shows the text's tokens, the routed layers' rows and a filled predictions table; comparing two runs
// shows two maps and a difference map; the metrics tab has lr and gradient-norm plots for a language model and
// expert-load bars (and accuracy first) for TAGAT, whose token view colours by expert id.
#include <QAbstractItemView>
#include <QCheckBox>
#include <QComboBox>
#include <QCompleter>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProcess>
#include <QPushButton>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTabWidget>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/config/experiment_config.h"
#include "core/report/builders/catalog.h"
#include "core/report/export/figure_files.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "tests/figure_view_support.h"
#include "tests/suite.h"
#include "ui/figure_render.h"
#include "ui/run_dashboard.h"
#include "ui/run_metrics_view.h"
#include "ui/store_service.h"
#include "ui/token_inspector.h"
#include "widgets/token_routing_widget.h"
#include "widgets/word_completer.h"

namespace test_gui_inspector {

using routelab::TokenInspector;

namespace {

constexpr int kTimeoutMs = 60000;

qint64 trainTiny(const std::string& db, const std::string& arch) {
  nlohmann::json overrides = routelab::load_preset("tiny");
  overrides["model"]["arch"] = arch;
  overrides["data"]["context"] = 32;
  overrides["train"]["batch_size"] = 8;
  overrides["train"]["steps"] = 6;
  overrides["train"]["warmup_steps"] = 2;
  overrides["train"]["eval_every"] = 3;
  overrides["train"]["checkpoint_every"] = 3;
  overrides["train"]["log_every"] = 1;
  overrides["run"]["threads"] = 1;
  if (arch == "dtrnet") overrides["model"]["routed_layers"] = "1";  // L0 dense, L1 routed
  routelab::TrainRequest request;
  request.config = routelab::resolve_config(overrides, {}, "test-" + arch);
  request.db_path = db;
  const auto outcome = routelab::train(request);
  return outcome.status == routelab::RunStatus::Finished ? outcome.run_id : 0;
}

qint64 trainTinyTagat(const std::string& db) {
  routelab::TrainRequest request;
  request.config = routelab::resolve_config(
      nlohmann::json::object(),
      {"model.arch=tagat", "model.n_layer=1", "model.n_embd=32", "model.n_head=4", "data.source=entailment",
       "data.tokenizer=word", "data.context=48", "data.task_train_examples=64", "data.task_eval_examples=16",
       "train.batch_size=32", "train.epochs=1", "train.lr=1e-3", "train.warmup_steps=1", "train.log_every=1",
       "run.threads=1"},
      "test-tagat");
  request.db_path = db;
  const auto outcome = routelab::train(request);
  return outcome.status == routelab::RunStatus::Finished ? outcome.run_id : 0;
}

}  // namespace

class TestGuiInspector : public QObject {
  Q_OBJECT

  QTemporaryDir home_;
  QString db_;
  qint64 dtrnet_ = 0, dense_ = 0, tagat_ = 0;

  /// An inspector on the test store with every run listed and `runId` chosen on side 0.
  bool prepare(TokenInspector& inspector, qint64 runId) {
    QSignalSpy checkpoints(&inspector, &TokenInspector::checkpointsLoaded);
    if (!QTest::qWaitFor([&] { return inspector.runCombo(0)->count() == 3; }, kTimeoutMs)) return false;
    checkpoints.clear();
    if (!inspector.selectRun(0, runId)) return false;
    return QTest::qWaitFor([&] { return inspector.stepCombo(0)->count() > 0; }, kTimeoutMs);
  }

  bool runAndWait(TokenInspector& inspector) {
    QSignalSpy shown(&inspector, &TokenInspector::traceShown);
    if (!inspector.runButton()->isEnabled()) return false;
    inspector.runButton()->click();
    return shown.wait(kTimeoutMs) || shown.count() > 0;
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(home_.isValid());
    QStandardPaths::setTestModeEnabled(true);
    qputenv("ROUTELAB_HOME", home_.path().toUtf8());
    db_ = home_.filePath(QStringLiteral("inspector.sqlite"));
    dtrnet_ = trainTiny(db_.toStdString(), "dtrnet");
    dense_ = trainTiny(db_.toStdString(), "dense");
    tagat_ = trainTinyTagat(db_.toStdString());
    QVERIFY(dtrnet_ > 0 && dense_ > 0 && tagat_ > 0);
  }

  void inspectorShowsTokensLayersAndPredictions() {
    routelab::StoreService service(db_);
    TokenInspector inspector(&service);
    inspector.resize(1200, 800);
    inspector.show();
    QVERIFY(prepare(inspector, dtrnet_));
    QCOMPARE(inspector.stepCombo(0)->count(), 2);  // checkpoints at steps 3 and 6, latest first
    QCOMPARE(inspector.stepCombo(0)->currentData().toLongLong(), 6);
    const QString text = QStringLiteral("In the beginning");
    inspector.textEdit()->setPlainText(text);
    QVERIFY(runAndWait(inspector));
    QCOMPARE(inspector.results().size(), 1);
    QVERIFY2(inspector.results()[0].ok, qPrintable(inspector.results()[0].error));
    QCOMPARE(inspector.results()[0].layerCount, 2);
    routelab::TokenRoutingWidget* map = inspector.map(0);
    QCOMPARE(map->tokenCount(), static_cast<int>(text.size()));  // char tokenizer
    QCOMPARE(map->rowCount(), 2);  // the routed layer L1, and p(next token)
    QVERIFY2(map->row(0).label.startsWith(QStringLiteral("L1 dtrnet")), qPrintable(map->row(0).label));
    QCOMPARE(map->row(0).values.size(), static_cast<int>(text.size()));
    QTableWidget* table = inspector.predictions();
    QCOMPARE(table->rowCount(), static_cast<int>(text.size()));
    QCOMPARE(table->columnCount(), 5);  // #, token, actual next, p(next), top-k
    QCOMPARE(table->item(0, 1)->text(), QStringLiteral("I"));
    QCOMPARE(table->item(0, 2)->text(), QStringLiteral("n"));
    bool ok = false;
    const double p = table->item(0, 3)->text().toDouble(&ok);
    QVERIFY(ok && p > 0 && p <= 1);
    QCOMPARE(table->item(0, 4)->text().count(QStringLiteral(" · ")), 4);  // five ranked tokens
    QCOMPARE(table->item(text.size() - 1, 3)->text(), QStringLiteral("–"));  // nothing follows the text

    // Another checkpoint of the same run, and an empty text: the error lands in the status line.
    inspector.stepCombo(0)->setCurrentIndex(1);
    QVERIFY(runAndWait(inspector));
    QCOMPARE(inspector.results()[0].step, 3);
    inspector.textEdit()->clear();
    QVERIFY(runAndWait(inspector));
    QVERIFY(!inspector.results()[0].ok);
    QVERIFY2(inspector.statusLabel()->text().contains(QStringLiteral("empty")),
             qPrintable(inspector.statusLabel()->text()));
  }

  void checkpointListFollowsTheStore() {
    // A run listed before its first checkpoint: the message says so, and the step list fills (and the message
    // goes) once the store holds one, without choosing the run again (issue 24, item 6).
    const auto db = home_.filePath(QStringLiteral("growing.sqlite"));
    qint64 id = 0;
    {
      routelab::RunStore store(db.toStdString());
      routelab::NewRun run;
      run.name = "growing";
      run.arch = "dense";
      id = store.create_run(run);
    }
    routelab::StoreService service(db);
    TokenInspector inspector(&service);
    inspector.show();
    QSignalSpy loaded(&inspector, &TokenInspector::checkpointsLoaded);
    QVERIFY(QTest::qWaitFor([&] { return inspector.runCombo(0)->count() == 1; }, kTimeoutMs));
    QVERIFY(inspector.selectRun(0, id));
    QVERIFY(QTest::qWaitFor([&] { return loaded.count() > 0; }, kTimeoutMs));
    QCOMPARE(inspector.stepCombo(0)->count(), 0);
    QVERIFY2(inspector.statusLabel()->text().contains(QStringLiteral("has no checkpoint yet")),
             qPrintable(inspector.statusLabel()->text()));
    routelab::RunStore(db.toStdString()).insert_checkpoint(id, {7, "/tmp/ckpt-7.pt", 1, 0, std::nullopt});
    service.requestRuns();
    QVERIFY(QTest::qWaitFor([&] { return inspector.stepCombo(0)->count() == 1; }, kTimeoutMs));
    QCOMPARE(inspector.stepCombo(0)->currentData().toLongLong(), 7);
    QVERIFY2(!inspector.statusLabel()->text().contains(QStringLiteral("no checkpoint")),
             qPrintable(inspector.statusLabel()->text()));
  }

  void comparingTwoRunsShowsTwoMapsAndTheirDifference() {
    routelab::StoreService service(db_);
    TokenInspector inspector(&service);
    inspector.resize(1200, 900);
    inspector.show();
    QVERIFY(prepare(inspector, dtrnet_));
    inspector.compareCheck()->setChecked(true);
    QVERIFY(inspector.selectRun(1, dense_));
    QVERIFY(QTest::qWaitFor([&] { return inspector.stepCombo(1)->count() > 0; }, kTimeoutMs));
    const QString text = QStringLiteral("And God said, Let there be light");
    inspector.textEdit()->setPlainText(text);
    QVERIFY(runAndWait(inspector));
    QCOMPARE(inspector.results().size(), 2);
    QVERIFY(inspector.results()[1].ok);
    QVERIFY(inspector.map(0)->isVisible() && inspector.map(1)->isVisible());
    QCOMPARE(inspector.map(0)->tokenCount(), static_cast<int>(text.size()));
    QCOMPARE(inspector.map(1)->tokenCount(), static_cast<int>(text.size()));
    QCOMPARE(inspector.map(1)->rowCount(), 1);  // dense: p(next token) only
    QCOMPARE(inspector.predictions()->columnCount(), 7);  // and p(next), top-k of run B
    QVERIFY(inspector.differenceCheck()->isEnabled());    // both have 2 layers
    inspector.differenceCheck()->setChecked(true);
    QVERIFY(inspector.differenceMap()->isVisible());
    QCOMPARE(inspector.differenceMap()->rowCount(), 1);  // the rows both have: p(next token)
    QCOMPARE(inspector.differenceMap()->row(0).label, QStringLiteral("Δ p(next token)"));
    QCOMPARE(inspector.differenceMap()->tokenCount(), static_cast<int>(text.size()));
    const QString shot = QDir::temp().filePath(QStringLiteral("routelab-token-inspector.png"));
    QVERIFY(inspector.grab().save(shot));
    qInfo("screenshot: %s", qPrintable(shot));
  }

  void sameRunTracedWithOtherOptions() {
    // The same run on both sides, B with RoPE scaling (an option marked for inference): both trace, B's result holds
    // its overrides and its predictions differ. A typed item without '=' and an unknown key are named in the status.
    routelab::StoreService service(db_);
    TokenInspector inspector(&service);
    inspector.resize(1200, 900);
    inspector.show();
    QVERIFY(prepare(inspector, dtrnet_));
    const QString help = inspector.optionsEdit(0)->toolTip();
    QVERIFY2(help.contains(QStringLiteral("rope_scaling: none | linear | yarn (trained: none)")), qPrintable(help));
    // The field completes the run's inference options: each choice as key=value, a number's key as key=.
    const QStringList words = inspector.optionsCompleter(0)->words();
    QVERIFY2(words.contains(QStringLiteral("rope_scaling=yarn")) && words.contains(QStringLiteral("rope_factor=")) &&
                 !words.contains(QStringLiteral("n_layer=")),
             qPrintable(words.join(' ')));
    inspector.optionsEdit(0)->setFocus();
    QTest::keyClicks(inspector.optionsEdit(0), QStringLiteral("rope_sc"));
    auto* popup = inspector.optionsCompleter(0)->completer()->popup();
    QTRY_VERIFY(popup->isVisible());
    QTest::keyClick(popup, Qt::Key_Down);
    QTest::keyClick(popup, Qt::Key_Return);  // none, linear, yarn: the second
    QCOMPARE(inspector.optionsEdit(0)->text(), QStringLiteral("rope_scaling=linear"));
    inspector.optionsEdit(0)->clear();
    inspector.compareCheck()->setChecked(true);
    QVERIFY(inspector.selectRun(1, dtrnet_));
    QVERIFY(QTest::qWaitFor([&] { return inspector.stepCombo(1)->count() > 0; }, kTimeoutMs));
    inspector.textEdit()->setPlainText(QStringLiteral("And God said, Let there be light"));
    // The largest change of p(next token) from A to B (the same weights: none without options).
    const auto largestChange = [&] {
      inspector.differenceCheck()->setChecked(true);
      if (inspector.differenceMap()->rowCount() == 0) return -1.0;
      const auto& changed = inspector.differenceMap()->row(inspector.differenceMap()->rowCount() - 1);
      if (changed.label != QStringLiteral("Δ p(next token)")) return -1.0;
      return *std::max_element(changed.values.begin(), changed.values.end());
    };
    QVERIFY(runAndWait(inspector));
    QCOMPARE(largestChange(), 0.0);
    inspector.optionsEdit(1)->setText(QStringLiteral("rope_scaling=linear, model.rope_factor=4"));
    QVERIFY(runAndWait(inspector));
    QCOMPARE(inspector.results().size(), 2);
    QVERIFY2(inspector.results()[1].ok, qPrintable(inspector.results()[1].error));
    QVERIFY(inspector.results()[0].sets.isEmpty());
    QCOMPARE(inspector.results()[1].sets,
             (QStringList{QStringLiteral("model.rope_scaling=linear"), QStringLiteral("model.rope_factor=4")}));
    QVERIFY(largestChange() > 0);  // barely: six steps taught the model little about positions

    inspector.optionsEdit(1)->setText(QStringLiteral("rope_scaling"));
    inspector.runButton()->click();
    QVERIFY2(inspector.statusLabel()->text().contains(QStringLiteral("'rope_scaling' is not key=value")),
             qPrintable(inspector.statusLabel()->text()));
    inspector.optionsEdit(1)->setText(QStringLiteral("no_such_option=1"));
    QVERIFY(runAndWait(inspector));
    QVERIFY(inspector.results()[0].ok && !inspector.results()[1].ok);
    QVERIFY2(inspector.statusLabel()->text().contains(QStringLiteral("model.no_such_option")),
             qPrintable(inspector.statusLabel()->text()));
  }

  void inspectorTracesAClassifierPair() {
    routelab::StoreService service(db_);
    TokenInspector inspector(&service);
    inspector.show();
    QVERIFY(prepare(inspector, tagat_));
    inspector.colourBy()->setCurrentIndex(inspector.colourBy()->findData(QStringLiteral("expert")));
    inspector.textEdit()->setPlainText(QStringLiteral("the cat sleeps\nthe cat is awake"));
    QVERIFY(runAndWait(inspector));
    QVERIFY2(inspector.results()[0].ok, qPrintable(inspector.results()[0].error));
    const auto& trace = inspector.results()[0].trace;
    QCOMPARE(trace.task, QStringLiteral("classification"));
    QCOMPARE(inspector.map(0)->tokenCount(), static_cast<int>(trace.tokens.size()));
    QCOMPARE(trace.tokens.first(), QStringLiteral("[CLS]"));
    QVERIFY2(inspector.map(0)->row(0).label.startsWith(QStringLiteral("L0 expert #1")),
             qPrintable(inspector.map(0)->row(0).label));
    QCOMPARE(inspector.map(0)->row(0).hi, 3.0);  // 4 experts: ids 0..3
    QCOMPARE(inspector.predictions()->rowCount(), 3);  // one row per label
  }

  void metricsTabOfALanguageModelRun() {
    routelab::StoreService service(db_);
    routelab::RunDashboard dashboard(dtrnet_, &service);
    QSignalSpy loaded(&dashboard, &routelab::RunDashboard::dataLoaded);
    QVERIFY(loaded.wait(kTimeoutMs));
    routelab::RunMetricsView* view = dashboard.metricsView();
    const QStringList panels = view->panelIds();
    QVERIFY2(panels.size() >= 4, qPrintable(panels.join(QLatin1Char(','))));
    QCOMPARE(panels.value(0), QStringLiteral("lr"));
    QCOMPARE(panels.value(1), QStringLiteral("grad_norm"));
    QVERIFY(panels.contains(QStringLiteral("tokens_per_s")));
    QVERIFY(!panels.contains(QStringLiteral("loss")));
    const routelab::Figure& lr = view->panel(QStringLiteral("lr"))->figure();
    QCOMPARE(lr.panels.size(), std::size_t{1});
    QCOMPARE(lr.panels[0].series.size(), std::size_t{1});       // train/lr only
    QCOMPARE(lr.panels[0].series[0].x.size(), std::size_t{6});  // every step logged
    QVERIFY(view->panel(QStringLiteral("routed_fraction")));
    QVERIFY(view->expertLoads()->isHidden());
    // Screen = export: each panel is the catalogue figure `routelab-cli figure metrics --metric ID` builds, and the
    // plot on screen holds its numbers.
    routelab::RunStore store(db_.toStdString());
    for (const QString& id : panels) {
      const routelab::FigureView* shown = view->panel(id);
      QCOMPARE(routelab::figure_to_csv(shown->figure()),
               routelab::figure_to_csv(routelab::build_figure(store, view->panelRequest(id))));
      QVERIFY2(test::screenShowsFigure(shown->plot(), shown->figure()), qPrintable(id));
    }
  }

  void liveReadsSpacedByTheirCost() {
    // A live dashboard reads the store every 3 s with the metrics tab shown, or, where a read (request to applied)
    // takes longer than a fifth of that, five times the read's time: a long run's reads keep the reader and the GUI
    // busy at most a fifth of the time.
    using routelab::RunDashboard;
    QCOMPARE(RunDashboard::liveMetricsReloadMs(0), RunDashboard::kLiveMetricsReloadMs);
    QCOMPARE(RunDashboard::liveMetricsReloadMs(600), 3000);
    QCOMPARE(RunDashboard::liveMetricsReloadMs(601), 3005);
    QCOMPARE(RunDashboard::liveMetricsReloadMs(4000), 20000);
    routelab::StoreService service(db_);
    RunDashboard dashboard(dtrnet_, &service);
    QSignalSpy loaded(&dashboard, &RunDashboard::dataLoaded);
    for (int read = 1; read <= 2; ++read) {
      if (read > 1) dashboard.reload();
      QTRY_COMPARE_WITH_TIMEOUT(loaded.count(), read, kTimeoutMs);
      QVERIFY(dashboard.lastReadMs() >= 0);
      QCOMPARE(dashboard.metricsReloadIntervalMs(), RunDashboard::liveMetricsReloadMs(dashboard.lastReadMs()));
    }
  }

  void dashboardBenchTimesEveryRead() {
    // routelab-bench-dashboard at a small size: a seed run trained, made long, every read printed with its store
    // read no longer than the whole read; the store it keeps holds the long run with the live reads' steps.
    const QString bench = qEnvironmentVariable("ROUTELAB_BENCH_DASHBOARD");
    QVERIFY2(QFile::exists(bench), "ROUTELAB_BENCH_DASHBOARD not set");
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("long.sqlite"));
    QProcess process;
    process.start(bench, {"--set", "model.n_layer=4", "--set", "data.probe_chars=32", "--seed-steps", "4", "--steps",
                          "300", "--eval-every", "100", "--reads", "2", "--live-reads", "2", "--append", "10", "--db",
                          db});
    QVERIFY(process.waitForFinished(kTimeoutMs * 10));
    const QString out = QString::fromUtf8(process.readAllStandardOutput());
    QVERIFY2(process.exitCode() == 0, qPrintable(out + QString::fromUtf8(process.readAllStandardError())));
    QVERIFY2(out.contains(QRegularExpression(QStringLiteral("seed run \\d+ \\(dtrnet\\): 4 steps"))), qPrintable(out));
    QVERIFY2(out.contains(QStringLiteral("long run: to step 300, a logged step every 1, an evaluation every 100")),
             qPrintable(out));
    const QRegularExpression row(QStringLiteral("^(\\d+)\\s+(first|again|live)\\s+(\\d+)\\s+(\\d+)$"),
                                 QRegularExpression::MultilineOption);
    QStringList kinds;
    for (auto it = row.globalMatch(out); it.hasNext();) {
      const auto m = it.next();
      kinds << m.captured(2);
      QVERIFY2(m.captured(4).toLongLong() <= m.captured(3).toLongLong(), qPrintable(m.captured(0)));
    }
    QCOMPARE(kinds, (QStringList{"first", "again", "live", "live"}));
    routelab::RunStore store(db.toStdString(), false);
    const auto runs = store.list_runs();
    QCOMPARE(runs.size(), std::size_t{1});
    QCOMPARE(store.metric(runs[0].id, "train/loss").back().step, std::int64_t{320});
    QCOMPARE(store.evals(runs[0].id).back().step, std::int64_t{304});  // 4, then every 100 from there
    QVERIFY(!store.routing(runs[0].id, 319).empty());
    // The kept store read again as it is.
    process.start(bench, {"--db", db, "--reads", "1", "--live-reads", "0"});
    QVERIFY(process.waitForFinished(kTimeoutMs));
    const QString reread = QString::fromUtf8(process.readAllStandardOutput());
    QVERIFY2(process.exitCode() == 0 && reread.contains(QStringLiteral("reusing run")), qPrintable(reread));
    QCOMPARE(store.metric(runs[0].id, "train/loss").back().step, std::int64_t{320});  // nothing appended
    // A file that is not a run store: an error naming it, nothing written.
    const QString text = dir.filePath(QStringLiteral("notes.txt"));
    {
      QFile file(text);
      QVERIFY(file.open(QIODevice::WriteOnly));
      file.write("not a store\n");
    }
    process.start(bench, {"--db", text, "--reads", "1", "--live-reads", "0"});
    QVERIFY(process.waitForFinished(kTimeoutMs));
    QCOMPARE(process.exitCode(), 1);
    QVERIFY2(QString::fromUtf8(process.readAllStandardError()).contains(text), "the message names the file");
    QFile file(text);
    QVERIFY(file.open(QIODevice::ReadOnly));
    QCOMPARE(file.readAll(), QByteArray("not a store\n"));
  }

  void metricsTabAndTokenViewOfATagatRun() {
    routelab::StoreService service(db_);
    routelab::RunDashboard dashboard(tagat_, &service);
    QSignalSpy loaded(&dashboard, &routelab::RunDashboard::dataLoaded);
    QVERIFY(loaded.wait(kTimeoutMs));
    routelab::RunMetricsView* view = dashboard.metricsView();
    const QStringList panels = view->panelIds();
    QCOMPARE(panels.value(0), QStringLiteral("accuracy"));
    QCOMPARE(panels.value(1), QStringLiteral("macro_f1"));
    QVERIFY(panels.contains(QStringLiteral("entropy")) && panels.contains(QStringLiteral("load_imbalance")));
    QVERIFY(panels.contains(QStringLiteral("routing_change")) && panels.contains(QStringLiteral("routing_change_set")));
    QVERIFY(!panels.contains(QStringLiteral("routing_change/L0")));  // per-layer series stay out of the panels
    // Token groups are a language model's: a classifier's dashboard has no By-token tab.
    QVERIFY(!dashboard.tabs()->isTabVisible(dashboard.tabs()->indexOf(dashboard.tokenRouting())));
    // Cost: the measured FLOPs ratio of each evaluation (top-2 of 4 experts: below 1); no KV cache panel.
    // The catalogue's "curves" figure of val/flops_ratio, as `routelab-cli figure` builds it.
    const routelab::Figure& cost = dashboard.panelFigure(routelab::RunDashboard::Panel::Cost);
    QCOMPARE(cost.panels.size(), std::size_t{1});
    QCOMPARE(cost.panels[0].series.size(), std::size_t{1});
    const auto& ratio = cost.panels[0].series[0];
    QCOMPARE(ratio.x.size(), std::size_t{2});  // step 0 and the end of the epoch
    QVERIFY(ratio.y.back() > 0.3 && ratio.y.back() < 1.0);
    {
      routelab::RunStore store(db_.toStdString());
      const auto request = dashboard.panelRequest(routelab::RunDashboard::Panel::Cost);
      QCOMPARE(request.metric, std::string("val/flops_ratio"));
      QCOMPARE(routelab::figure_to_csv(cost), routelab::figure_to_csv(routelab::build_figure(store, request)));
    }
    QVERIFY(!view->expertLoads()->isHidden());
    const routelab::Figure& loads = view->expertLoads()->figure();
    QCOMPARE(loads.panels.size(), std::size_t{1});
    const auto& bars = loads.panels[0].bars;
    QCOMPARE(bars.categories.size(), std::size_t{1});  // one layer
    QCOMPARE(bars.members.size(), std::size_t{4});     // four experts
    double sum = 0;
    for (const auto& expert : bars.members) sum += expert.values.at(0);
    QVERIFY2(std::abs(sum - 1) < 1e-5, qPrintable(QString::number(sum)));
    QCOMPARE(loads.panels[0].series.at(0).y.at(0), 0.25);  // the uniform share, dashed
    {
      routelab::RunStore store(db_.toStdString());
      QCOMPARE(routelab::figure_to_csv(loads),
               routelab::figure_to_csv(routelab::build_figure(store, view->expertLoadsRequest())));
      QVERIFY(test::screenShowsFigure(view->expertLoads()->plot(), loads));
    }
    // The probe's token view colours by expert id by default.
    QCOMPARE(dashboard.colourBy()->currentData().toString(), QStringLiteral("expert"));
    QVERIFY2(dashboard.tokenView()->row(0).label.startsWith(QStringLiteral("L0 expert #1")),
             qPrintable(dashboard.tokenView()->row(0).label));
  }
};

}  // namespace test_gui_inspector

ROUTELAB_TEST_SUITE(test_gui_inspector, TestGuiInspector)
#include "test_gui_inspector.moc"
