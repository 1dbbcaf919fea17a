// Qt Test suite for the GUI (offscreen; the plot widgets alone are in test_gui_plots): a real run of preset "tiny"
// driven through the Start action to `finished`, Stop leading to `stopped`, closing the window mid-run, and failing
// starts joining one error box;
// the run dashboard on a tiny real DTRNet run (routing bars, heat map, token view, cost curves), run-health
// alerts, the cost adapter, and the schema-generated experiment designer.
#include <QAction>
#include <QComboBox>
#include <QDir>
#include <QElapsedTimer>
#include <QFont>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTabWidget>
#include <QTableView>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTimer>
#include <QtTest>

#include <cmath>
#include <memory>

#include <nlohmann/json.hpp>

#include "core/config/experiment_config.h"
#include "core/cost/cost_curve.h"
#include "core/report/builders/catalog.h"
#include "core/report/export/figure_files.h"
#include "core/run/run_health.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "core/util/paths.h"
#include "tests/figure_view_support.h"
#include "tests/suite.h"
#include "ui/app_resources.h"
#include "ui/dashboard_loader.h"
#include "ui/experiment_designer.h"
#include "ui/figure_render.h"
#include "ui/main_window.h"
#include "ui/presets_panel.h"
#include "ui/run_controller.h"
#include "ui/run_dashboard.h"
#include "ui/run_queue.h"
#include "ui/run_token_routing.h"
#include "ui/runs_panel.h"
#include "ui/runs_table_model.h"
#include "ui/store_service.h"
#include "ui/workspace_tabs.h"
#include "widgets/alert_bar_widget.h"
#include "widgets/loss_plot_widget.h"
#include "widgets/progress_status_widget.h"
#include "widgets/qcustomplot_include.h"
#include "widgets/token_routing_widget.h"

namespace test_gui {

using routelab::LossPlotWidget;
using routelab::MainWindow;
using Series = routelab::LossPlotWidget::Series;

namespace {

constexpr int kRunTimeoutMs = 120000;
const QString kTinyPreset = QStringLiteral("tiny");

/// The logged steps the dashboard's routing-history panel shows now.
std::size_t historyColumns(const routelab::RunDashboard& dashboard) {
  const auto& figure = dashboard.panelFigure(routelab::RunDashboard::Panel::RoutingHistory);
  return figure.panels.empty() ? 0 : figure.panels[0].heatmap.cols;
}

}  // namespace

class TestGui : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase();
  void init();

  void aboutNamesVersions();
  void runsTableShowsStoredRunsAndCurves();

  void startTrainsTinyPresetToFinished();
  void stopEndsRunStopped();
  void closeDuringRunStopsItCleanly();
  void failedStartIsReportedNotFatal();

  void dashboardShowsRoutingOfATinyDtrnetRun();
  void designerValidatesAsTheUserTypes();
  void designerQueuesArchitecturesTimesSeeds();
  void designerLaunchFeedsALiveDashboard_data();
  void designerLaunchFeedsALiveDashboard();
  void guiThreadStallIsMeasured();
  void mainPlotDrawsTheRunItNames();

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
  QVERIFY(window.startAction()->isEnabled());  // Start queues further runs while one is in progress
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

void TestGui::aboutNamesVersions() {
  const QString html = routelab::aboutHtml();
  QVERIFY2(html.contains(QString::fromLatin1(qVersion())), qPrintable(html));
  QVERIFY2(html.contains(QStringLiteral("LibTorch")), qPrintable(html));
  QVERIFY2(html.contains(QStringLiteral("CUDA")), qPrintable(html));
  QVERIFY2(html.contains(QStringLiteral("Torch threads")), qPrintable(html));
  QVERIFY2(html.contains(QStringLiteral("no run in progress")), qPrintable(html));
  QVERIFY2(routelab::aboutHtml(QStringLiteral("run 3 on cuda:0")).contains(QStringLiteral("run 3 on cuda:0")), "in use");
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
  window->runsPanel()->view()->setCurrentIndex(window->runsPanel()->proxy()->mapFromSource(row));
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
  // The run's live dashboard opened with the run and holds its whole curve after the final store read.
  routelab::RunDashboard* dashboard = window->workspace()->dashboard(runId);
  QVERIFY(dashboard);
  QVERIFY(!dashboard->isLive());
  QTRY_COMPARE_WITH_TIMEOUT(dashboard->lossPlot()->pointCount(Series::TrainRaw), plot->pointCount(Series::TrainRaw),
                            10000);
  QTRY_COMPARE_WITH_TIMEOUT(dashboard->probeCount(), 4, 10000);  // evaluations at steps 0, 10, 20, 30
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
  auto* box = window->findChild<QMessageBox*>(QStringLiteral("errorBox"));
  QVERIFY(box != nullptr);
  QVERIFY2(box->text().contains(QStringLiteral("no-such-preset")), qPrintable(box->text()));

  // Further failures while the box is open join it, each named, instead of stacking boxes (issue 24, item 7).
  routelab::RunResult seven;
  seven.runId = 7;
  seven.status = QStringLiteral("failed");
  seven.message = QStringLiteral("data.path: /nowhere/corpus.txt: no such file");
  Q_EMIT window->runQueue()->runFinished(seven);
  const auto boxes = window->findChildren<QMessageBox*>();
  QCOMPARE(std::count_if(boxes.begin(), boxes.end(), [](QMessageBox* b) { return b->isVisible(); }), 1);
  QVERIFY2(box->text().contains(QStringLiteral("run 7 failed: data.path: /nowhere/corpus.txt")),
           qPrintable(box->text()));
  QCOMPARE(box->windowTitle(), QStringLiteral("2 messages"));
}

void TestGui::dashboardShowsRoutingOfATinyDtrnetRun() {
  // A real tiny DTRNet run (3 layers, Bilayer pattern T-D-T: layer 1 routes), trained here, shown from the store.
  nlohmann::json overrides = routelab::load_preset("tiny");
  overrides["model"]["arch"] = "dtrnet";
  overrides["model"]["n_layer"] = 3;
  overrides["data"]["context"] = 32;
  overrides["train"]["batch_size"] = 8;
  overrides["train"]["steps"] = 10;
  overrides["train"]["checkpoint_every"] = 5;  // checkpoints at steps 5 and 10 (the By-token tab's)
  overrides["train"]["warmup_steps"] = 2;
  overrides["train"]["eval_every"] = 5;
  overrides["train"]["log_every"] = 2;
  routelab::TrainRequest request;
  request.config = routelab::resolve_config(overrides, {}, "test-dtrnet");
  request.db_path = dbPath_.toStdString();
  const auto outcome = routelab::train(request);
  QCOMPARE(outcome.status, routelab::RunStatus::Finished);

  // What the store holds, read independently of the dashboard.
  routelab::RunStore store(dbPath_.toStdString(), false);
  const auto probes = store.probes(outcome.run_id);
  QCOMPARE(static_cast<int>(probes.size()), 3);  // steps 0, 5, 10
  const auto last = nlohmann::json::parse(probes.back().json);
  const int tokens = static_cast<int>(last.at("tokens").size());
  int routedLayers = 0;
  for (const auto& layer : last.at("layers")) routedLayers += layer.contains("gate") || layer.contains("decision");
  QCOMPARE(routedLayers, 1);

  routelab::StoreService service(dbPath_);
  routelab::RunDashboard dashboard(outcome.run_id, &service);
  dashboard.resize(1400, 900);
  dashboard.show();
  QSignalSpy loaded(&dashboard, &routelab::RunDashboard::dataLoaded);
  QTRY_VERIFY_WITH_TIMEOUT(loaded.count() > 0, 20000);

  QCOMPARE(dashboard.probeCount(), 3);
  QCOMPARE(dashboard.shownProbeStep(), 10);  // the latest evaluation
  routelab::TokenRoutingWidget* view = dashboard.tokenView();
  QCOMPARE(view->tokenCount(), tokens);
  QCOMPARE(view->rowCount(), routedLayers + 1);  // one row per routed layer, plus p(next token)
  QVERIFY2(view->row(0).label.startsWith(QStringLiteral("L1 dtrnet")), qPrintable(view->row(0).label));
  QCOMPARE(view->row(1).label, QStringLiteral("p(next token)"));
  QCOMPARE(view->row(0).values.size(), tokens);
  const QString tip = view->toolTipAt(view->cellRect(0, 2).center());
  QVERIFY2(tip.contains(QStringLiteral("token 2")) && tip.contains(QStringLiteral("gate")), qPrintable(tip));

  dashboard.colourBy()->setCurrentIndex(1);  // hard decisions
  QCOMPARE(view->row(0).scale, routelab::TokenRoutingWidget::Scale::Binary);
  dashboard.showProbe(0);  // scrub back to the untrained model
  QCOMPARE(dashboard.shownProbeStep(), 0);
  QCOMPARE(view->tokenCount(), tokens);

  // Every panel but the loss plot is a catalogue figure: what the dashboard draws is, number for number, what
  // `routelab-cli figure` exports for the same request (the CSV holds every plotted number), and the plot on
  // screen holds the figure's numbers.
  using Panel = routelab::RunDashboard::Panel;
  dashboard.showProbe(2);
  for (const Panel panel : {Panel::RoutedLayers, Panel::RoutingHistory, Panel::TokenMap, Panel::Cost}) {
    const routelab::FigureRequest request = dashboard.panelRequest(panel);
    const routelab::Figure& shown = dashboard.panelFigure(panel);
    QVERIFY2(!shown.empty(), request.name.c_str());
    QCOMPARE(routelab::figure_to_csv(shown), routelab::figure_to_csv(routelab::build_figure(store, request)));
  }
  const routelab::Figure& bars = dashboard.panelFigure(Panel::RoutedLayers);
  QCOMPARE(bars.panels.at(0).bars.categories.size(), std::size_t{3});
  QCOMPARE(bars.panels.at(0).bars.members.size(), std::size_t{3});  // inference, training (faint), dense hatched
  QVERIFY(test::screenShowsFigure(dashboard.routingBars()->plot(), bars));
  const routelab::FigureHeatmap& history = dashboard.panelFigure(Panel::RoutingHistory).panels.at(0).heatmap;
  QCOMPARE(history.col_labels, (std::vector<std::string>{"1", "2", "4", "6", "8", "10"}));  // logged steps
  QCOMPARE(history.rows, std::size_t{3});
  QVERIFY(std::isnan(history.values[5]) && std::isfinite(history.values[history.cols + 5]));  // dense layers blank
  QVERIFY(test::screenShowsFigure(dashboard.routingHistory()->plot(), dashboard.panelFigure(Panel::RoutingHistory)));
  QVERIFY(test::screenShowsFigure(dashboard.costView()->plot(), dashboard.panelFigure(Panel::Cost)));
  const routelab::FigureHeatmap& map = dashboard.panelFigure(Panel::TokenMap).panels.at(0).heatmap;
  QCOMPARE(view->rowCount(), static_cast<int>(map.rows));
  for (int r = 0; r < view->rowCount(); ++r)
    for (int c = 0; c < tokens; ++c) {
      QVERIFY(routelab::test::same(view->row(r).values.value(c), map.values[static_cast<std::size_t>(r) * map.cols + c]));
    }

  // The alerts the dashboard shows are the ones routelab-cli reports for the stored run (core/run/run_health.h):
  // here none (the dense layers 0 and 2 take every token, which is no collapse).
  const auto* alerts = dashboard.findChild<routelab::AlertBarWidget*>();
  QVERIFY(alerts);
  QStringList reported;
  {
    routelab::RunStore store(dbPath_.toStdString());
    for (const auto& a : routelab::assess_run(store, outcome.run_id, 0)) reported << QString::fromStdString(a.message);
  }
  QCOMPARE(alerts->errors() + alerts->warnings(), reported);

  const routelab::Figure& cost = dashboard.panelFigure(Panel::Cost);
  QCOMPARE(cost.panels.size(), std::size_t{2});               // FLOPs ratio and KV cache against length
  QCOMPARE(cost.panels[0].series.size(), std::size_t{3});     // dense, the run's routing, its measured ratio
  QVERIFY2(dashboard.costView()->caption().contains(QStringLiteral("eval step 10")),
           qPrintable(dashboard.costView()->caption()));
  QCOMPARE(dashboard.lossPlot()->pointCount(Series::TrainRaw), 10);
  QCOMPARE(dashboard.lossPlot()->pointCount(Series::Validation), 3);
  dashboard.setXAxis(routelab::RunDashboard::XAxis::Tokens);
  QCOMPARE(dashboard.lossPlot()->lastStep(Series::TrainRaw), 10.0 * 8 * 32);  // steps x batch x context
  dashboard.setXAxis(routelab::RunDashboard::XAxis::WallTime);
  QVERIFY(dashboard.lossPlot()->lastStep(Series::TrainRaw) > 0);
  dashboard.setXAxis(routelab::RunDashboard::XAxis::Flops);  // priced from the run's measured ratios
  const routelab::CumulativeFlops flops = routelab::training_flops_axis(store, outcome.run_id);
  const double lastFlops = dashboard.lossPlot()->lastStep(Series::TrainRaw);
  QVERIFY2(qFuzzyCompare(lastFlops, flops.at(10)), qPrintable(QString::number(lastFlops)));
  QVERIFY(lastFlops > 0 && lastFlops < 10 * flops.dense_step_flops() * 1.1);  // DTRNet: at most ~dense

  // The By-token tab, built off the GUI thread when shown: the routing-by-token figure of the run's latest
  // checkpoint, then of another grouping, a chosen checkpoint and the history over them (mean and per layer), each
  // what `routelab-cli figure` draws for the tab's request; the checkpoint box lists them and each checkpoint.
  routelab::RunTokenRouting* byToken = dashboard.tokenRouting();
  QCOMPARE(byToken->figure().panels.size(), std::size_t{0});  // not built before it is shown
  QCOMPARE(byToken->checkpointBox()->count(), 5);  // latest, over training (mean, per layer), step 10, step 5
  QCOMPARE(byToken->checkpointBox()->itemData(4).toLongLong(), 5);
  QSignalSpy built(byToken, &routelab::RunTokenRouting::figureShown);
  const auto showsItsRequest = [&](const char* grouping, qint64 step, const char* figure) {
    QTRY_VERIFY_WITH_TIMEOUT(built.count() > 0 && !byToken->isBuilding(), 60000);
    built.clear();
    const routelab::FigureRequest request = byToken->request();
    QCOMPARE(request.name, std::string(figure));
    QCOMPARE(request.metric, std::string(grouping));
    QCOMPARE(request.step, step);
    QVERIFY2(byToken->figure().panels.size() == 1, qPrintable(byToken->statusLabel()->text()));
    QCOMPARE(routelab::figure_to_csv(byToken->figure()),
             routelab::figure_to_csv(routelab::build_figure(store, request)));
    QVERIFY(test::screenShowsFigure(byToken->figureView()->plot(), byToken->figure()));
  };
  dashboard.tabs()->setCurrentWidget(byToken);
  showsItsRequest("class", 0, "routing-by-token");
  QCOMPARE(byToken->figure().meta["checkpoint_step"][std::to_string(outcome.run_id)].get<qint64>(), 10);
  QVERIFY2(byToken->statusLabel()->text().startsWith(QStringLiteral("step 10, 16384 tokens")),
           qPrintable(byToken->statusLabel()->text()));
  byToken->groupingBox()->setCurrentText(QStringLiteral("position"));
  showsItsRequest("position", 0, "routing-by-token");
  byToken->checkpointBox()->setCurrentIndex(4);
  showsItsRequest("position", 5, "routing-by-token");
  QCOMPARE(byToken->figure().meta["checkpoint_step"][std::to_string(outcome.run_id)].get<qint64>(), 5);
  byToken->checkpointBox()->setCurrentIndex(byToken->checkpointBox()->findData(routelab::RunTokenRouting::kHistory));
  showsItsRequest("position", 0, "routing-by-token-history");
  QCOMPARE(byToken->figure().meta["checkpoint_steps"][std::to_string(outcome.run_id)], nlohmann::json({5, 10}));
  byToken->checkpointBox()->setCurrentIndex(
      byToken->checkpointBox()->findData(routelab::RunTokenRouting::kHistoryPerLayer));
  showsItsRequest("position", 0, "routing-by-token-history-layers");
  byToken->checkpointBox()->setCurrentIndex(byToken->checkpointBox()->findData(routelab::RunTokenRouting::kHistory));
  showsItsRequest("position", 0, "routing-by-token-history");
  // A live run's new checkpoint: the history and the latest are built again, a chosen step's figure stays; a hidden
  // tab builds when next shown.
  byToken->setCheckpoints({5, 10, 15});
  QVERIFY(byToken->isBuilding());
  QCOMPARE(byToken->checkpointBox()->count(), 6);
  showsItsRequest("position", 0, "routing-by-token-history");
  byToken->checkpointBox()->setCurrentIndex(byToken->checkpointBox()->findData(qint64{5}));
  showsItsRequest("position", 5, "routing-by-token");
  byToken->setCheckpoints({5, 10, 15, 20});
  QVERIFY(!byToken->isBuilding());
  QCOMPARE(byToken->request().step, 5);
  byToken->checkpointBox()->setCurrentIndex(0);
  showsItsRequest("position", 0, "routing-by-token");
  dashboard.tabs()->setCurrentIndex(0);
  byToken->setCheckpoints({5, 10, 15, 20, 25});
  QVERIFY(!byToken->isBuilding());
  dashboard.tabs()->setCurrentWidget(byToken);
  QVERIFY(byToken->isBuilding());
  showsItsRequest("position", 0, "routing-by-token");
  dashboard.tabs()->setCurrentIndex(0);

  const QString shots = qEnvironmentVariable("ROUTELAB_SCREENSHOT_DIR");
  if (!shots.isEmpty()) {
    dashboard.setXAxis(routelab::RunDashboard::XAxis::Step);
    dashboard.showProbe(2);
    QTest::qWait(300);
    QVERIFY(dashboard.grab().save(shots + QStringLiteral("/dashboard.png")));
  }
}

void TestGui::designerQueuesArchitecturesTimesSeeds() {
  routelab::ExperimentDesigner designer;
  QVERIFY(designer.loadPreset(QStringLiteral("tiny")));  // dense, 2 layers, d 64
  designer.setFieldText(QStringLiteral("model.n_layer"), QStringLiteral("4"));
  QCOMPARE(designer.requests().size(), 1);
  QVERIFY(designer.setAlsoArchitecture(QStringLiteral("dtrnet"), true));
  QVERIFY(designer.setAlsoArchitecture(QStringLiteral("mod"), true));
  QVERIFY(!designer.setAlsoArchitecture(QStringLiteral("dense"), true));  // the form's own
  QVERIFY(!designer.setAlsoArchitecture(QStringLiteral("nonsense"), true));
  designer.setSeedsText(QStringLiteral("1-2"));
  QVERIFY(designer.isValid());
  const QList<routelab::RunRequest> runs = designer.requests();
  QCOMPARE(runs.size(), 6);  // 3 architectures x 2 seeds
  QStringList seen;
  for (const routelab::RunRequest& r : runs) {
    const auto doc = nlohmann::json::parse(r.configJson.toStdString());
    QCOMPARE(doc["model"]["n_layer"].get<int>(), 4);  // the trunk's shape carries over
    QCOMPARE(doc["model"]["n_embd"].get<int>(), 64);
    QCOMPARE(doc["train"]["steps"].get<int>(), 30);   // so do data, train and run
    seen << QStringLiteral("%1/%2").arg(QString::fromStdString(doc["model"]["arch"].get<std::string>()))
                .arg(doc["run"]["seed"].get<int>());
  }
  QCOMPARE(seen, (QStringList{"dense/1", "dense/2", "dtrnet/1", "dtrnet/2", "mod/1", "mod/2"}));
  // Each queued run reads as its own name (architecture, changed options, seed), not "tiny · designer" six times.
  QStringList described;
  for (const routelab::RunRequest& r : runs) described << routelab::RunQueue::describe(routelab::RunQueue::requestToJson(r));
  QCOMPARE(QSet<QString>(described.begin(), described.end()).size(), 6);
  QVERIFY2(described[3].startsWith(QStringLiteral("dtrnet-")) && described[3].contains(QStringLiteral("-s2 (from tiny)")),
           qPrintable(described[3]));
  const auto mod = nlohmann::json::parse(runs[4].configJson.toStdString());
  QVERIFY(!mod["model"].contains("routed_layers"));  // routing options keep MoD's defaults

  // A bad seed list or an architecture that cannot take the settings: nothing is launched, the error says why.
  designer.setSeedsText(QStringLiteral("3-1"));
  QVERIFY(!designer.isValid());
  QString error;
  QVERIFY(designer.requests(&error).isEmpty());
  designer.setSeedsText(QStringLiteral("1"));
  QVERIFY(designer.isValid());
  QVERIFY(designer.setAlsoArchitecture(QStringLiteral("tagat"), true));  // a classifier on a text corpus
  QVERIFY(!designer.isValid());
  QVERIFY(designer.requests(&error).isEmpty());
  QVERIFY2(error.contains(QStringLiteral("tagat")), qPrintable(error));
}

void TestGui::designerValidatesAsTheUserTypes() {
  routelab::ExperimentDesigner designer;
  designer.show();
  QVERIFY(designer.setArchitecture(QStringLiteral("dense")));
  QVERIFY(designer.isValid());
  QVERIFY(designer.fieldEditor(QStringLiteral("model.n_layer")));
  QVERIFY(designer.fieldEditor(QStringLiteral("train.lr")));
  QVERIFY(designer.fieldEditor(QStringLiteral("model.n_layer"))->toolTip().contains(QStringLiteral("range")));

  // Out of range: the core's message appears under the field as it is typed.
  QVERIFY(designer.setFieldText(QStringLiteral("model.n_layer"), QStringLiteral("1000")));
  QVERIFY2(designer.fieldError(QStringLiteral("model.n_layer")).contains(QStringLiteral("model.n_layer")),
           qPrintable(designer.fieldError(QStringLiteral("model.n_layer"))));
  QVERIFY(!designer.isValid());
  QVERIFY(designer.resolvedConfigJson().isEmpty());
  designer.setFieldText(QStringLiteral("model.n_layer"), QStringLiteral("3"));
  QVERIFY(designer.fieldError(QStringLiteral("model.n_layer")).isEmpty());
  QVERIFY(designer.isValid());

  // Not a number at all.
  designer.setFieldText(QStringLiteral("train.lr"), QStringLiteral("fast"));
  QVERIFY(!designer.fieldError(QStringLiteral("train.lr")).isEmpty());
  designer.setFieldText(QStringLiteral("train.lr"), QStringLiteral("0.002"));

  // A cross-field rule (resolve_config) lands under the field its key path names.
  designer.setFieldText(QStringLiteral("model.n_head"), QStringLiteral("3"));
  QVERIFY2(designer.fieldError(QStringLiteral("model.n_head")).contains(QStringLiteral("does not divide")),
           qPrintable(designer.fieldError(QStringLiteral("model.n_head")) + " | " + designer.formError()));
  QVERIFY(!designer.isValid());
  designer.setFieldText(QStringLiteral("model.n_head"), QStringLiteral("4"));
  QVERIFY(designer.isValid());

  // Files are checked before launch: a missing corpus or shard folder is flagged under data.path.
  designer.setFieldText(QStringLiteral("data.source"), QStringLiteral("file"));
  designer.setFieldText(QStringLiteral("data.path"), QStringLiteral("/nowhere/corpus.txt"));
  const QString pathError = designer.fieldError(QStringLiteral("data.path"));
  QVERIFY2(pathError.contains(QStringLiteral("/nowhere/corpus.txt: no such file")),
           qPrintable(pathError + " | " + designer.formError()));
  QVERIFY(!designer.isValid());
  designer.setFieldText(QStringLiteral("data.source"), QStringLiteral("shards"));
  designer.setFieldText(QStringLiteral("data.path"), QDir::tempPath());
  QVERIFY(designer.isValid());  // a folder exists; its shards are read at launch
  designer.setFieldText(QStringLiteral("data.source"), QStringLiteral("kjv"));
  // The folder stays valid but unread: a note (not an error) under data.path says so.
  QVERIFY(designer.isValid());
  QVERIFY(designer.fieldError(QStringLiteral("data.path")).isEmpty());
  QVERIFY2(
      designer.fieldNote(QStringLiteral("data.path")).contains(QStringLiteral("is not read: data.source is 'kjv'")),
      qPrintable(designer.fieldNote(QStringLiteral("data.path"))));
  designer.setFieldText(QStringLiteral("data.path"), QString());
  QVERIFY(designer.isValid());
  QVERIFY(designer.fieldNote(QStringLiteral("data.path")).isEmpty());
  // A model option its schema reads under other values only (OptionSpec::read_when): a note under it too.
  designer.setFieldText(QStringLiteral("model.rope_factor"), QStringLiteral("4"));
  QVERIFY(designer.isValid());
  QVERIFY2(designer.fieldNote(QStringLiteral("model.rope_factor"))
               .contains(QStringLiteral("is not read: model.rope_scaling is 'none'")),
           qPrintable(designer.fieldNote(QStringLiteral("model.rope_factor"))));
  designer.setFieldText(QStringLiteral("model.rope_scaling"), QStringLiteral("linear"));
  QVERIFY(designer.fieldNote(QStringLiteral("model.rope_factor")).isEmpty());
  designer.setFieldText(QStringLiteral("model.rope_scaling"), QStringLiteral("none"));
  designer.setFieldText(QStringLiteral("model.rope_factor"), QStringLiteral("1"));
  QVERIFY(designer.fieldNote(QStringLiteral("model.rope_factor")).isEmpty());
  // A data-parallel option is read when the launch runs more than one process (the Processes box).
  designer.setFieldText(QStringLiteral("run.dist_bucket_mb"), QStringLiteral("8"));
  QVERIFY2(designer.fieldNote(QStringLiteral("run.dist_bucket_mb")).contains(QStringLiteral("the run is one process")),
           qPrintable(designer.fieldNote(QStringLiteral("run.dist_bucket_mb"))));
  auto* processes = designer.findChild<QSpinBox*>(QStringLiteral("designerProcesses"));
  QVERIFY(processes);
  processes->setValue(2);
  QVERIFY(designer.fieldNote(QStringLiteral("run.dist_bucket_mb")).isEmpty());
  processes->setValue(1);
  designer.setFieldText(QStringLiteral("run.dist_bucket_mb"), QStringLiteral("25"));

  designer.setFieldText(QStringLiteral("train.steps"), QStringLiteral("7"));
  designer.setFieldText(QStringLiteral("train.warmup_steps"), QStringLiteral("2"));
  const auto config = nlohmann::json::parse(designer.resolvedConfigJson().toStdString());
  QCOMPARE(config["model"]["arch"].get<std::string>(), std::string("dense"));
  QCOMPARE(config["model"]["n_layer"].get<int>(), 3);
  QCOMPARE(config["train"]["steps"].get<int>(), 7);
  QCOMPARE(config["train"]["lr"].get<double>(), 0.002);

  // A preset fills the form with its architecture and overrides; the request carries the form.
  QVERIFY(designer.loadPreset(QStringLiteral("tiny")));
  QCOMPARE(designer.architecture(), QStringLiteral("dense"));
  const auto tiny = nlohmann::json::parse(designer.resolvedConfigJson().toStdString());
  QCOMPARE(tiny["model"]["n_embd"].get<int>(), 64);
  QCOMPARE(tiny["train"]["steps"].get<int>(), 30);
  const routelab::RunRequest r = designer.request();
  QCOMPARE(r.preset, QStringLiteral("tiny"));
  QCOMPARE(nlohmann::json::parse(r.configJson.toStdString())["model"]["n_embd"].get<int>(), 64);

  // Another architecture's schema replaces the model section.
  QVERIFY(designer.setArchitecture(QStringLiteral("dtrnet")));
  QVERIFY(designer.fieldEditor(QStringLiteral("model.routed_layers")));
  // tiny's 2 layers keep across the switch, and DTRNet's own check objects under its field.
  QVERIFY(!designer.isValid());
  QVERIFY2(designer.fieldError(QStringLiteral("model.routed_layers")).contains(QStringLiteral("routes no layer")),
           qPrintable(designer.fieldError(QStringLiteral("model.routed_layers")) + " | " + designer.formError()));
  designer.setFieldText(QStringLiteral("model.n_layer"), QStringLiteral("4"));
  QVERIFY(designer.isValid());
  QVERIFY(designer.fieldError(QStringLiteral("model.routed_layers")).isEmpty());
  const auto dtr = nlohmann::json::parse(designer.resolvedConfigJson().toStdString());
  QCOMPARE(dtr["model"]["arch"].get<std::string>(), std::string("dtrnet"));
  QCOMPARE(dtr["model"]["n_embd"].get<int>(), 64);  // a shared option keeps the preset's value

  const QString shots = qEnvironmentVariable("ROUTELAB_SCREENSHOT_DIR");
  if (!shots.isEmpty()) {
    designer.resize(560, 820);
    designer.setAlsoArchitecture(QStringLiteral("mod"), true);
    designer.setSeedsText(QStringLiteral("1-3"));
    designer.setFieldText(QStringLiteral("model.n_layer"), QStringLiteral("0"));
    QTest::qWait(100);
    QVERIFY(designer.grab().save(shots + QStringLiteral("/designer.png")));
  }
}

void TestGui::designerLaunchFeedsALiveDashboard_data() {
  QTest::addColumn<QString>("arch");
  QTest::addColumn<int>("routedRows");  // token-view rows of routed layers (p(next token) adds one)
  QTest::newRow("dtrnet") << "dtrnet" << 1;  // T-D-T
  QTest::newRow("mod") << "mod" << 1;        // T-M-T
  QTest::newRow("tsa") << "tsa" << 2;        // routers after blocks 0 and 1 gate blocks 1 and 2
}

void TestGui::designerLaunchFeedsALiveDashboard() {
  QFETCH(QString, arch);
  QFETCH(int, routedRows);
  auto window = makeWindow();
  QVERIFY(QTest::qWaitForWindowExposed(window.get()));
  routelab::ExperimentDesigner* designer = window->designer();
  QVERIFY(designer->loadPreset(QStringLiteral("tiny")));
  QVERIFY(designer->setArchitecture(arch));
  const QList<QPair<QString, QString>> fields{{"model.n_layer", "3"},      {"data.context", "32"},
                                              {"train.batch_size", "8"},   {"train.steps", "48"},
                                              {"train.warmup_steps", "2"}, {"train.eval_every", "24"},
                                              {"train.log_every", "2"}};
  for (const auto& [path, text] : fields) QVERIFY(designer->setFieldText(path, text));
  QVERIFY2(designer->isValid(), qPrintable(designer->formError()));

  // Watch the live dashboard while the run is going: the heat map grows from the trainer's own reports (redrawn
  // at most every kRoutingRedrawMs, so the run is long enough to see a redraw before it ends).
  int liveColumns = 0;
  connect(window->runController(), &routelab::RunController::progressReceived, window.get(),
          [&](const routelab::ProgressBatch&) {
            if (auto* d = window->workspace()->dashboard(window->runController()->currentRunId()); d && d->isLive())
              liveColumns = std::max(liveColumns, static_cast<int>(historyColumns(*d)));
          });
  auto* launch = designer->findChild<QPushButton*>(QStringLiteral("designerLaunch"));
  QVERIFY(launch && launch->isEnabled());
  QTest::mouseClick(launch, Qt::LeftButton);
  QVERIFY(window->runController()->isRunning());
  QVERIFY(launch->isEnabled());  // Launch queues further runs while one is in progress
  QTRY_VERIFY_WITH_TIMEOUT(!window->runController()->isRunning(), kRunTimeoutMs);
  const qint64 runId = window->runController()->currentRunId();
  QVERIFY(runId > 0);
  QCOMPARE(statusInStore(runId), QStringLiteral("finished"));
  QVERIFY2(liveColumns > 0, "the dashboard received no live routing");

  routelab::RunDashboard* dashboard = window->workspace()->dashboard(runId);
  QVERIFY(dashboard);
  QTRY_COMPARE_WITH_TIMEOUT(dashboard->probeCount(), 3, 10000);  // evaluations at steps 0, 24, 48
  // The cost panel follows the store to the last evaluation (it once said "no evaluation yet" after one).
  QTRY_VERIFY2_WITH_TIMEOUT(dashboard->costView()->caption().contains(QStringLiteral("eval step 48 ")),
                            qPrintable(dashboard->costView()->caption()), 10000);
  QCOMPARE(dashboard->tokenView()->rowCount(), routedRows + 1);   // the routed layers and p(next token)
  QCOMPARE(dashboard->panelFigure(routelab::RunDashboard::Panel::RoutedLayers).panels.at(0).bars.categories.size(),
           std::size_t{3});
  routelab::RunStore store(dbPath_.toStdString(), false);
  QCOMPARE(QString::fromStdString(store.run(runId)->arch), arch);
  const auto probe = nlohmann::json::parse(store.probes(runId).back().json);
  QCOMPARE(dashboard->tokenView()->tokenCount(), static_cast<int>(probe["tokens"].size()));
  QVERIFY(launch->isEnabled());
}

void TestGui::mainPlotDrawsTheRunItNames() {
  // The main view once drew the previous run's curve under the next run's title, and a deleted run's curve.
  auto window = makeWindow();
  routelab::LossPlotWidget* plot = window->lossPlot();
  const auto storedPoints = [this](qint64 runId, const char* key) {
    routelab::RunStore store(dbPath_.toStdString(), false);
    return static_cast<int>(store.metric(runId, key).size());
  };
  startTiny(*window, 6);
  QTRY_VERIFY_WITH_TIMEOUT(!window->runController()->isRunning(), kRunTimeoutMs);
  const qint64 first = window->runController()->currentRunId();
  QCOMPARE(plot->pointCount(Series::TrainRaw), storedPoints(first, "train/loss"));
  startTiny(*window, 8);
  QTRY_VERIFY_WITH_TIMEOUT(!window->runController()->isRunning(), kRunTimeoutMs);
  const qint64 second = window->runController()->currentRunId();
  QVERIFY(second != first);
  QVERIFY2(plot->title().startsWith(QStringLiteral("run %1").arg(second)), qPrintable(plot->title()));
  // Only the second run's points: none of the first run's left under them.
  QCOMPARE(plot->pointCount(Series::TrainRaw), storedPoints(second, "train/loss"));
  QCOMPARE(plot->pointCount(Series::Validation), storedPoints(second, "val/loss"));
  QCOMPARE(plot->lastStep(Series::TrainRaw), 8.0);
  // Deleting the run it shows empties the main view (once the table knows the run has ended).
  QTRY_COMPARE_WITH_TIMEOUT(statusInTable(*window, second), QStringLiteral("finished"), 10000);
  QVERIFY(window->runsPanel()->deleteRuns({second}).isEmpty());
  QTRY_COMPARE_WITH_TIMEOUT(plot->pointCount(Series::TrainRaw), 0, 10000);
  QCOMPARE(plot->title(), QStringLiteral("No run"));
}

void TestGui::guiThreadStallIsMeasured() {
  // Issue 7's responsiveness figure, reported and not asserted (timings depend on the machine): the longest gap
  // between ticks of a 1 ms timer on the GUI thread while a live run streams metrics into the main plot and its
  // dashboard (replots, store reads after evaluations, log lines).
  auto window = makeWindow();
  constexpr int kSteps = 80;
  startTiny(*window, kSteps);
  QElapsedTimer clock;
  qint64 last = -1, worst = 0;
  int ticks = 0;
  QTimer probe;
  probe.setInterval(1);
  probe.setTimerType(Qt::PreciseTimer);
  QObject::connect(&probe, &QTimer::timeout, [&] {
    const qint64 now = clock.nsecsElapsed();
    if (last >= 0) worst = std::max(worst, now - last);
    last = now;
    ++ticks;
  });
  clock.start();
  probe.start();
  QTRY_VERIFY_WITH_TIMEOUT(!window->runController()->isRunning(), kRunTimeoutMs);
  probe.stop();
  qInfo("GUI thread: longest gap between 1 ms timer ticks during a live %d-step run: %.1f ms over %d ticks in %.1f s",
        kSteps, static_cast<double>(worst) / 1e6, ticks, static_cast<double>(clock.nsecsElapsed()) / 1e9);
  QVERIFY(ticks > 10);  // the event loop kept turning
}

}  // namespace test_gui

ROUTELAB_TEST_SUITE(test_gui, TestGui)
#include "test_gui.moc"
