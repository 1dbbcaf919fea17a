// Qt Test suite for the GUI (offscreen): the loss plot's smoothing, a real run of preset "tiny" driven through
// the Start action to `finished`, Stop leading to `stopped`, closing the window mid-run, and a failing start.
#include <QAction>
#include <QFont>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableView>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <memory>

#include "core/config/experiment_config.h"
#include "core/store/run_store.h"
#include "core/util/paths.h"
#include "ui/app_resources.h"
#include "ui/main_window.h"
#include "ui/presets_panel.h"
#include "ui/run_controller.h"
#include "ui/runs_panel.h"
#include "ui/runs_table_model.h"
#include "widgets/ema_smoother.h"
#include "widgets/loss_plot_widget.h"
#include "widgets/qcustomplot_include.h"
#include "widgets/progress_status_widget.h"

using routelab::LossPlotWidget;
using routelab::MainWindow;
using Series = routelab::LossPlotWidget::Series;

namespace {

constexpr int kRunTimeoutMs = 120000;
const QString kTinyPreset = QStringLiteral("tiny");

}  // namespace

class TestGui : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase();
  void init();

  void emaIsDebiased();
  void lossPlotAppendsInStepOrderOnly();
  void lossPlotFollowsUntilTheUserZooms();
  void aboutNamesVersions();
  void runsTableShowsStoredRunsAndCurves();

  void startTrainsTinyPresetToFinished();
  void stopEndsRunStopped();
  void closeDuringRunStopsItCleanly();
  void failedStartIsReportedNotFatal();

 private:
  std::unique_ptr<MainWindow> makeWindow();
  /// Starts preset "tiny" through the Start action with `steps` (0 = the preset's) and waits for plotted points.
  void startTiny(MainWindow& window, int steps);
  QString statusInTable(const MainWindow& window, qint64 runId) const;
  QString statusInStore(qint64 runId) const;

  QTemporaryDir home_;
  QString dbPath_;
  int dbCounter_ = 0;
};

void TestGui::initTestCase() {
  QVERIFY(home_.isValid());
  QStandardPaths::setTestModeEnabled(true);
  QCoreApplication::setOrganizationName(QStringLiteral("RouteLabTest"));
  QCoreApplication::setApplicationName(QStringLiteral("test_gui"));
  qputenv("ROUTELAB_HOME", home_.path().toUtf8());
  qputenv("XDG_CONFIG_HOME", home_.filePath(QStringLiteral("config")).toUtf8());
  qputenv("ROUTELAB_NO_CONFIRM", "1");

  std::vector<routelab::PresetInfo> presets;
  try {
    presets = routelab::list_presets();
  } catch (const std::exception& e) {
    QFAIL(qPrintable(QStringLiteral("list_presets() failed: %1").arg(QString::fromUtf8(e.what()))));
  }
  const bool haveTiny = std::any_of(presets.begin(), presets.end(),
                                    [](const routelab::PresetInfo& p) { return p.name == "tiny"; });
  if (!haveTiny)
    QFAIL(qPrintable(QStringLiteral("preset 'tiny' is missing from %1: the GUI tests need it (a 2-layer char "
                                    "model on the embedded corpus that trains 30 steps in seconds)")
                         .arg(QString::fromStdString(routelab::experiments_dir()))));
}

void TestGui::init() { dbPath_ = home_.filePath(QStringLiteral("runs-%1.sqlite").arg(++dbCounter_)); }

std::unique_ptr<MainWindow> TestGui::makeWindow() {
  routelab::MainWindowOptions options;
  options.dbPath = dbPath_;
  options.confirmClose = false;
  auto window = std::make_unique<MainWindow>(options);
  window->show();
  return window;
}

void TestGui::startTiny(MainWindow& window, int steps) {
  QVERIFY(QTest::qWaitForWindowExposed(&window));
  QVERIFY(window.presetsPanel()->selectPreset(kTinyPreset));
  window.stepsSpinBox()->setValue(steps);
  QVERIFY(window.startAction()->isEnabled());
  window.startAction()->trigger();
  QVERIFY(window.runController()->isRunning());
  QVERIFY(!window.startAction()->isEnabled());
  QVERIFY(window.stopAction()->isEnabled());
  QTRY_VERIFY_WITH_TIMEOUT(window.lossPlot()->pointCount(Series::TrainRaw) > 0, kRunTimeoutMs);
}

QString TestGui::statusInTable(const MainWindow& window, qint64 runId) const {
  const routelab::RunsTableModel* model = window.runsPanel()->model();
  const int row = model->rowOf(runId);
  if (row < 0) return QString();
  return model->index(row, routelab::RunsTableModel::StatusColumn).data().toString();
}

QString TestGui::statusInStore(qint64 runId) const {
  routelab::RunStore store(dbPath_.toStdString(), /*mark_crashed=*/false);
  const auto run = store.run(runId);
  return run ? QString::fromStdString(routelab::to_string(run->status)) : QString();
}

void TestGui::emaIsDebiased() {
  routelab::EmaSmoother ema(0.9);
  // Debiased: a constant series stays exactly constant from the first point on.
  for (int i = 0; i < 5; ++i) QCOMPARE(ema.add(2.5), 2.5);
  QVERIFY(std::isnan(ema.add(std::nan(""))));  // a gap stays a gap
  QCOMPARE(ema.current(), 2.5);
  routelab::EmaSmoother none(0.0);
  QCOMPARE(none.add(1.0), 1.0);
  QCOMPARE(none.add(3.0), 3.0);
}

void TestGui::lossPlotAppendsInStepOrderOnly() {
  LossPlotWidget plot;
  plot.appendTrain({1, 2, 3}, {3.0, 2.0, 1.5});
  plot.appendTrain({2, 3, 4}, {9.0, 9.0, 1.2});  // overlap with what is plotted is ignored
  QCOMPARE(plot.pointCount(Series::TrainRaw), 4);
  QCOMPARE(plot.pointCount(Series::TrainSmoothed), 4);
  QCOMPARE(plot.lastStep(Series::TrainRaw), 4.0);
  plot.appendValidation({4}, {1.4});
  QCOMPARE(plot.pointCount(Series::Validation), 1);
  plot.setSmoothing(0.5);
  QCOMPARE(plot.pointCount(Series::TrainSmoothed), 4);
  plot.clear();
  QCOMPARE(plot.pointCount(Series::TrainRaw), 0);
  QCOMPARE(plot.lastStep(Series::Validation), -1.0);
}

void TestGui::lossPlotFollowsUntilTheUserZooms() {
  LossPlotWidget plot;
  QSignalSpy followChanged(&plot, &LossPlotWidget::autoFollowChanged);
  plot.appendTrain({1, 2, 3, 4}, {3.0, 2.0, 1.5, 1.2});
  QVERIFY(plot.autoFollow());
  QCOMPARE(plot.plot()->xAxis->range().lower, 0.0);
  QVERIFY(plot.plot()->xAxis->range().upper >= 4.0);
  QVERIFY(plot.plot()->yAxis->range().contains(3.0) && plot.plot()->yAxis->range().contains(1.2));
  QCOMPARE(followChanged.count(), 0);  // its own range changes do not count as the user's

  plot.plot()->xAxis->setRange(1, 2);  // what a drag or wheel zoom does
  QVERIFY(!plot.autoFollow());
  plot.appendTrain({5}, {1.1});
  QCOMPARE(plot.plot()->xAxis->range().upper, 2.0);  // the user's view stays put

  plot.setAutoFollow(true);
  QVERIFY(plot.plot()->xAxis->range().upper >= 5.0);
  plot.setLogScaleY(true);
  QVERIFY(plot.autoFollow());
  QVERIFY(plot.plot()->yAxis->range().lower > 0);
}

void TestGui::aboutNamesVersions() {
  const QString html = routelab::aboutHtml();
  QVERIFY2(html.contains(QString::fromLatin1(qVersion())), qPrintable(html));
  QVERIFY2(html.contains(QStringLiteral("LibTorch")), qPrintable(html));
  QVERIFY(!routelab::appIcon().isNull());
}

void TestGui::runsTableShowsStoredRunsAndCurves() {
  qint64 finishedId = 0, failedId = 0, crashedId = 0;
  {
    routelab::RunStore store(dbPath_.toStdString(), false);
    auto makeRun = [&](const char* name, routelab::RunStatus status, const std::string& message) {
      routelab::NewRun run;
      run.name = name;
      run.arch = "dense";
      run.preset = "tiny";
      run.config_json = "{}";
      run.total_steps = 20;
      const qint64 id = store.create_run(run);
      std::vector<routelab::MetricRow> rows;
      for (int step = 1; step <= 20; ++step) rows.push_back({"train/loss", step, 0.0, 4.0 - 0.1 * step});
      rows.push_back({"val/loss", 10, 0.0, 3.1});
      rows.push_back({"val/loss", 20, 0.0, 2.2});
      store.insert_metrics(id, rows);
      store.set_status(id, status, message);
      return id;
    };
    finishedId = makeRun("done", routelab::RunStatus::Finished, "");
    failedId = makeRun("broken", routelab::RunStatus::Failed, "model.n_head: 3 does not divide n_embd 64");
    crashedId = makeRun("lost", routelab::RunStatus::Crashed, "");
  }
  auto window = makeWindow();
  QTRY_COMPARE_WITH_TIMEOUT(window->runsPanel()->model()->rowCount(), 3, 10000);
  const routelab::RunsTableModel* model = window->runsPanel()->model();
  QCOMPARE(statusInTable(*window, finishedId), QStringLiteral("finished"));
  QCOMPARE(statusInTable(*window, failedId), QStringLiteral("failed"));
  QCOMPARE(statusInTable(*window, crashedId), QStringLiteral("crashed"));
  QCOMPARE(model->rowOf(crashedId), 0);  // newest first
  const QModelIndex crashed = model->index(model->rowOf(crashedId), routelab::RunsTableModel::StatusColumn);
  const QModelIndex finished = model->index(model->rowOf(finishedId), routelab::RunsTableModel::StatusColumn);
  QVERIFY(crashed.data(Qt::ForegroundRole).value<QColor>() != finished.data(Qt::ForegroundRole).value<QColor>());
  QVERIFY(crashed.data(Qt::FontRole).value<QFont>().bold());
  const QModelIndex failed = model->index(model->rowOf(failedId), routelab::RunsTableModel::StatusColumn);
  QVERIFY(failed.data(Qt::ToolTipRole).toString().contains(QStringLiteral("does not divide")));
  QCOMPARE(model->index(model->rowOf(finishedId), routelab::RunsTableModel::ValLossColumn).data().toString(),
           QStringLiteral("2.2000"));

  // Selecting a stored run shows its stored curves.
  const QModelIndex row = model->index(model->rowOf(finishedId), routelab::RunsTableModel::NameColumn);
  window->runsPanel()->view()->setCurrentIndex(row);
  QCOMPARE(window->displayedRunId(), finishedId);
  QTRY_COMPARE_WITH_TIMEOUT(window->lossPlot()->pointCount(Series::TrainRaw), 20, 10000);
  QCOMPARE(window->lossPlot()->pointCount(Series::Validation), 2);
  QVERIFY(window->lossPlot()->title().contains(QStringLiteral("done")));
}

void TestGui::startTrainsTinyPresetToFinished() {
  auto window = makeWindow();
  startTiny(*window, 0);
  QTRY_VERIFY_WITH_TIMEOUT(!window->runController()->isRunning(), kRunTimeoutMs);
  const qint64 runId = window->runController()->currentRunId();
  QVERIFY(runId > 0);
  QTRY_COMPARE_WITH_TIMEOUT(statusInTable(*window, runId), QStringLiteral("finished"), kRunTimeoutMs);
  QCOMPARE(statusInStore(runId), QStringLiteral("finished"));

  // The plot followed the live run: one smoothed point per raw point, the last one at the run's last step.
  LossPlotWidget* plot = window->lossPlot();
  QCOMPARE(plot->pointCount(Series::TrainSmoothed), plot->pointCount(Series::TrainRaw));
  QCOMPARE(window->displayedRunId(), runId);
  QCOMPARE(window->runsPanel()->selectedRunId(), runId);
  routelab::RunStore store(dbPath_.toStdString(), false);
  QCOMPARE(static_cast<qint64>(plot->lastStep(Series::TrainRaw)), store.run(runId)->last_step);
  QVERIFY(!window->progressStatus()->progressText().isEmpty());
  QVERIFY(window->startAction()->isEnabled());
  QVERIFY(!window->stopAction()->isEnabled());
}

void TestGui::stopEndsRunStopped() {
  auto window = makeWindow();
  startTiny(*window, 100000);  // far longer than the test waits
  window->stopAction()->trigger();
  QVERIFY(!window->stopAction()->isEnabled());
  QTRY_VERIFY_WITH_TIMEOUT(!window->runController()->isRunning(), kRunTimeoutMs);
  const qint64 runId = window->runController()->currentRunId();
  QVERIFY(runId > 0);
  QTRY_COMPARE_WITH_TIMEOUT(statusInTable(*window, runId), QStringLiteral("stopped"), kRunTimeoutMs);
  QCOMPARE(statusInStore(runId), QStringLiteral("stopped"));
}

void TestGui::closeDuringRunStopsItCleanly() {
  auto window = makeWindow();
  startTiny(*window, 100000);
  const qint64 runId = window->runController()->currentRunId();
  QVERIFY(runId > 0);
  // The window does not block in close(): it stops the run, keeps painting, and closes when the run has ended.
  window->close();
  QTRY_VERIFY_WITH_TIMEOUT(!window->isVisible(), kRunTimeoutMs);
  QVERIFY(!window->runController()->isRunning());
  QCOMPARE(statusInStore(runId), QStringLiteral("stopped"));
}

void TestGui::failedStartIsReportedNotFatal() {
  auto window = makeWindow();
  QVERIFY(QTest::qWaitForWindowExposed(window.get()));
  QSignalSpy finished(window->runController(), &routelab::RunController::runFinished);
  routelab::RunRequest request;
  request.preset = QStringLiteral("no-such-preset");
  request.dbPath = dbPath_;
  QVERIFY(window->runController()->start(request));
  QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, kRunTimeoutMs);
  const auto result = finished.first().first().value<routelab::RunResult>();
  QCOMPARE(result.status, QStringLiteral("failed"));
  QVERIFY2(result.message.contains(QStringLiteral("no-such-preset")), qPrintable(result.message));
  QVERIFY(!window->runController()->isRunning());
  QVERIFY(window->startAction()->isEnabled());
}

QTEST_MAIN(TestGui)
#include "test_gui.moc"
