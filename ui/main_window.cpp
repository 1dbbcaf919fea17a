// MainWindow: layout, actions, settings, and the glue between panels, RunController and StoreService.
#include "ui/main_window.h"

#include <algorithm>

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDockWidget>
#include <QFileInfo>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QScreen>
#include <QSettings>
#include <QSpinBox>
#include <QStatusBar>
#include <QStyle>
#include <QTableView>
#include <QTimer>
#include <QToolBar>

#include <cmath>

#include "core/util/logging.h"
#include "core/util/paths.h"
#include "ui/app_resources.h"
#include "ui/compare_view.h"
#include "ui/experiment_designer.h"
#include "ui/log_bridge.h"
#include "ui/loss_smoothing.h"
#include "ui/presets_panel.h"
#include "ui/run_controller.h"
#include "ui/run_queue.h"
#include "ui/runs_overview.h"
#include "ui/runs_panel.h"
#include "ui/runs_table_model.h"
#include "ui/shortcuts_dialog.h"
#include "ui/store_service.h"
#include "ui/token_inspector.h"
#include "ui/zero_shot_view.h"
#include "ui/workspace_tabs.h"
#include "widgets/log_view_widget.h"
#include "widgets/loss_plot_widget.h"
#include "widgets/progress_status_widget.h"

namespace routelab {
namespace {

const QString kQuickstartPreset = QStringLiteral("quickstart");
const QString kRoutedQuickstartPreset = QStringLiteral("quickstart-dtrnet");  ///< DTRNet at the quick-start shape
// Window geometry and dock layout are remembered per screen size ("mainWindow/1280x720/state").
const char* const kSettingsLayoutGroup = "mainWindow";
const char* const kSettingsPreset = "run/lastPreset";
const char* const kSettingsSmoothing = "plot/smoothing";
const char* const kSettingsSteps = "run/steps";
const char* const kSettingsDesignerForm = "designer/form";
const char* const kSettingsDesignerOrigin = "designer/origin";

QDockWidget* makeDock(const QString& title, const QString& objectName, QWidget* content, QWidget* parent) {
  auto* dock = new QDockWidget(title, parent);
  dock->setObjectName(objectName);  // saveState() keys docks by object name
  dock->setWidget(content);
  dock->setFeatures(QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable |
                    QDockWidget::DockWidgetClosable);
  return dock;
}

}  // namespace

MainWindow::MainWindow(MainWindowOptions options, QWidget* parent)
    : QMainWindow(parent),
      dbPath_(options.dbPath.isEmpty() ? QString::fromStdString(default_db_path()) : options.dbPath),
      options_(std::move(options)),
      confirmClose_(options_.confirmClose && qEnvironmentVariableIntValue("ROUTELAB_NO_CONFIRM") != 1) {
  setObjectName(QStringLiteral("mainWindow"));
  setWindowTitle(tr("RouteLab — %1").arg(QFileInfo(dbPath_).fileName()));
  setWindowIcon(appIcon());
  // A first start fits the screen (a laptop's 1280x720 too); later starts restore the size of this screen's layout.
  const QScreen* shown = screen();
  resize(shown ? QSize(1400, 900).boundedTo(shown->availableGeometry().size()) : QSize(1400, 900));

  logBridge_ = new LogBridge(this);
  store_ = new StoreService(dbPath_, this);
  queue_ = new RunQueue(store_, this);
  controller_ = queue_->controller(0);
  // Central: the overview plot, then Compare, the token inspector and the run dashboards as tabs; side docks
  // hold the browser, designer and presets (left) and the log and queue (below the tabs).
  workspace_ = new WorkspaceTabs(store_, queue_, this);
  plot_ = new LossPlotWidget(this);
  plot_->setObjectName(QStringLiteral("overviewPlot"));
  plot_->setToolTip(tr("The runs selected in the runs browser (Ctrl+click or Shift+click several to overlay them)"));
  useDebiasedEma(plot_);
  workspace_->setOverview(plot_, tr("Overview"));
  setCentralWidget(workspace_);
  progress_ = new ProgressStatusWidget(this);
  statusBar()->addPermanentWidget(progress_);

  buildActions();
  buildDocks();
  overview_ = new RunsOverview(plot_, store_, queue_, runs_->model(), this);
  buildMenus();
  connectParts();

  if (const QString error = presets_->reload(); !error.isEmpty()) showError(tr("Presets"), error);
  restoreSettings();
  selectInitialPreset(options_.preset);
  updateActions();

  refreshTimer_ = new QTimer(this);
  refreshTimer_->setInterval(kRunsRefreshMs);
  connect(refreshTimer_, &QTimer::timeout, this, &MainWindow::refreshRuns);
  refreshTimer_->start();
  refreshRuns();

  logger("ui")->info("RouteLab GUI on run store {}", dbPath_.toStdString());
  if (options_.autostart) QTimer::singleShot(0, this, &MainWindow::startRun);
}

MainWindow::~MainWindow() {
  delete queue_;  // before the store service: the queue's last writes go through it
}

void MainWindow::buildActions() {
  startAction_ = new QAction(style()->standardIcon(QStyle::SP_MediaPlay), tr("&Start"), this);
  startAction_->setObjectName(QStringLiteral("startAction"));
  startAction_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
  startAction_->setToolTip(tr("Train the selected preset (Ctrl+R)"));
  routingQuickstartAction_ = new QAction(tr("&Quick start with routing"), this);
  routingQuickstartAction_->setObjectName(QStringLiteral("routingQuickstartAction"));
  routingQuickstartAction_->setToolTip(tr("Queue DTRNet at the quick-start shape and its dense twin (side by side "
                                          "when the queue runs two at a time): routed tokens per layer, gates over "
                                          "text and FLOPs within minutes"));
  stopAction_ = new QAction(style()->standardIcon(QStyle::SP_MediaStop), tr("S&top"), this);
  stopAction_->setObjectName(QStringLiteral("stopAction"));
  stopAction_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Period));
  stopAction_->setToolTip(tr("Stop the run shown after its current step; it is checkpointed and kept, and the "
                             "queue goes on (Ctrl+.)"));
  stopAllAction_ = new QAction(tr("Stop &all"), this);
  stopAllAction_->setObjectName(QStringLiteral("stopAllAction"));
  stopAllAction_->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_Period));
  stopAllAction_->setToolTip(tr("Stop every running run and hold the queue (Ctrl+Shift+.)"));
  refreshAction_ = new QAction(style()->standardIcon(QStyle::SP_BrowserReload), tr("&Refresh runs"), this);
  refreshAction_->setShortcut(QKeySequence::Refresh);
  quitAction_ = new QAction(tr("&Quit"), this);
  quitAction_->setShortcut(QKeySequence::Quit);
  aboutAction_ = new QAction(tr("&About RouteLab"), this);
  shortcutsAction_ = new QAction(tr("&Keyboard shortcuts"), this);
  shortcutsAction_->setObjectName(QStringLiteral("shortcutsAction"));
  shortcutsAction_->setShortcut(QKeySequence::HelpContents);
  dashboardAction_ = new QAction(tr("Open &dashboard"), this);
  dashboardAction_->setObjectName(QStringLiteral("dashboardAction"));
  dashboardAction_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_D));
  dashboardAction_->setToolTip(tr("Open the dashboard of the selected run (Ctrl+D, or double-click the run)"));

  steps_ = new QSpinBox(this);
  steps_->setObjectName(QStringLiteral("stepsSpinBox"));
  steps_->setRange(0, 10'000'000);
  steps_->setSingleStep(100);
  steps_->setSpecialValueText(tr("preset"));
  steps_->setToolTip(tr("Number of training steps; \"preset\" keeps the preset's train.steps"));
  steps_->setMinimumWidth(90);

  auto* toolbar = addToolBar(tr("Run"));
  toolbar->setObjectName(QStringLiteral("runToolBar"));
  toolbar->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
  toolbar->addAction(startAction_);
  toolbar->addAction(stopAction_);
  toolbar->addSeparator();
  toolbar->addWidget(new QLabel(tr(" Steps "), this));
  toolbar->addWidget(steps_);
  toolbar->addSeparator();
  toolbar->addAction(refreshAction_);
  toolbar->addAction(dashboardAction_);

  connect(startAction_, &QAction::triggered, this, &MainWindow::startRun);
  connect(routingQuickstartAction_, &QAction::triggered, this, [this] {
    for (const QString& preset : {kRoutedQuickstartPreset, kQuickstartPreset}) {
      RunRequest request;
      request.preset = preset;
      request.stepsOverride = steps_->value();
      startRequest(request);
    }
  });
  connect(stopAction_, &QAction::triggered, this, &MainWindow::stopRun);
  connect(stopAllAction_, &QAction::triggered, this, &MainWindow::stopAllRuns);
  connect(refreshAction_, &QAction::triggered, this, &MainWindow::refreshRuns);
  connect(quitAction_, &QAction::triggered, this, &QWidget::close);
  connect(aboutAction_, &QAction::triggered, this, &MainWindow::showAbout);
  connect(shortcutsAction_, &QAction::triggered, this, [this] {
    auto* dialog = new ShortcutsDialog(this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    dialog->show();
  });
  connect(dashboardAction_, &QAction::triggered, this, &MainWindow::openDashboard);
}

void MainWindow::buildDocks() {
  presets_ = new PresetsPanel(this);
  runs_ = new RunsPanel(this);
  runs_->setServices(store_, queue_);
  designer_ = new ExperimentDesigner(this);
  log_ = new LogViewWidget(this);
  queuePanel_ = new RunQueuePanel(queue_, this);
  runsDock_ = makeDock(tr("Runs"), QStringLiteral("runsDock"), runs_, this);
  designerDock_ = makeDock(tr("Designer"), QStringLiteral("designerDock"), designer_, this);
  presetsDock_ = makeDock(tr("Presets"), QStringLiteral("presetsDock"), presets_, this);
  logDock_ = makeDock(tr("Log"), QStringLiteral("logDock"), log_, this);
  queueDock_ = makeDock(tr("Queue"), QStringLiteral("queueDock"), queuePanel_, this);

  // The left column takes the window's whole height, its docks tabbed so that each gets all of it (the runs
  // table's rows, the designer's form); the log and the queue are a strip under the workspace.
  setCorner(Qt::TopLeftCorner, Qt::LeftDockWidgetArea);
  setCorner(Qt::BottomLeftCorner, Qt::LeftDockWidgetArea);
  setTabPosition(Qt::LeftDockWidgetArea, QTabWidget::North);
  setTabPosition(Qt::BottomDockWidgetArea, QTabWidget::North);
  addDockWidget(Qt::LeftDockWidgetArea, runsDock_);
  tabifyDockWidget(runsDock_, designerDock_);
  tabifyDockWidget(designerDock_, presetsDock_);
  runsDock_->raise();
  addDockWidget(Qt::BottomDockWidgetArea, logDock_);
  tabifyDockWidget(logDock_, queueDock_);
  logDock_->raise();

  inspector_ = new TokenInspector(store_, this);
  inspectorAction_ = workspace_->addPage(inspector_, tr("Token inspector"));
  compare_ = new CompareView(store_, this);
  compare_->restoreChoices();
  compareAction_ = workspace_->addPage(compare_, tr("Compare"));
  tasks_ = new ZeroShotView(store_, this);
  tasksAction_ = workspace_->addPage(tasks_, tr("Zero-shot tasks"));
  defaultLayout_ = saveState();  // View > Reset layout returns to it
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(quitAction_);
  QMenu* run = menuBar()->addMenu(tr("&Run"));
  run->addAction(startAction_);
  run->addAction(routingQuickstartAction_);
  run->addAction(stopAction_);
  run->addAction(stopAllAction_);
  run->addSeparator();
  run->addAction(refreshAction_);
  run->addAction(dashboardAction_);
  QMenu* view = menuBar()->addMenu(tr("&View"));
  for (QDockWidget* dock : {presetsDock_, designerDock_, runsDock_, logDock_, queueDock_}) view->addAction(dock->toggleViewAction());
  view->addSeparator();
  inspectorAction_->setObjectName(QStringLiteral("inspectorAction"));
  inspectorAction_->setText(tr("&Token inspector"));
  inspectorAction_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_I));
  inspectorAction_->setToolTip(tr("Trace any text through one or two stored runs (Ctrl+I)"));
  view->addAction(inspectorAction_);
  compareAction_->setObjectName(QStringLiteral("compareAction"));
  compareAction_->setText(tr("&Compare runs"));
  compareAction_->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_C));
  compareAction_->setToolTip(tr("Seed bands, matched-budget tables and the config diff (Ctrl+Shift+C)"));
  view->addAction(compareAction_);
  tasksAction_->setObjectName(QStringLiteral("tasksAction"));
  tasksAction_->setText(tr("&Zero-shot tasks"));
  tasksAction_->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_T));
  tasksAction_->setToolTip(tr("Score stored runs on PIQA, ARC, HellaSwag, LAMBADA, WikiText… files (Ctrl+Shift+T)"));
  view->addAction(tasksAction_);
  QAction* closeTab = view->addAction(tr("Close &tab"), workspace_, &WorkspaceTabs::closeCurrentTab);
  closeTab->setObjectName(QStringLiteral("closeTabAction"));
  closeTab->setShortcut(QKeySequence::Close);
  closeTab->setToolTip(tr("Close the workspace's current tab: a dashboard, Compare or the inspector (Ctrl+W)"));
  view->addSeparator();
  QAction* reset = view->addAction(tr("&Reset layout"), this, &MainWindow::resetLayout);
  reset->setObjectName(QStringLiteral("resetLayoutAction"));
  reset->setToolTip(tr("Every panel back in its place: docks unfloated, the left column and the log at their "
                       "default sizes"));
  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(shortcutsAction_);
  help->addAction(aboutAction_);
  help->addAction(tr("About &Qt"), qApp, &QApplication::aboutQt);
}

void MainWindow::connectParts() {
  connect(logBridge_, &LogBridge::linesLogged, log_, &LogViewWidget::appendLines);
  connect(store_, &StoreService::runsLoaded, this, &MainWindow::onRunsLoaded);
  connect(store_, &StoreService::storeFailed, this, [this](const QString& message) {
    statusBar()->showMessage(tr("Run store: %1").arg(message), 10000);
    logger("ui")->warn("run store: {}", message.toStdString());
  });
  connect(queue_, &RunQueue::runStarted, this, &MainWindow::onRunStarted);
  connect(queue_, &RunQueue::progressReceived, this, &MainWindow::onProgress);
  connect(queue_, &RunQueue::runFinished, this, &MainWindow::onRunFinished);
  connect(queue_, &RunQueue::runningChanged, this, &MainWindow::updateActions);
  connect(queue_, &RunQueue::queueChanged, this, &MainWindow::updateActions);
  connect(queue_, &RunQueue::loaded, this, [this] {
    // Work left from the previous session: show it rather than let it start behind the log.
    for (const QueueEntry& e : queue_->entries())
      if (e.state == QLatin1String("pending")) {
        queueDock_->show();
        queueDock_->raise();
        statusBar()->showMessage(tr("Queue restored from the last session"), 8000);
        return;
      }
  });
  connect(runs_, &RunsPanel::dashboardRequested, this, [this](qint64 runId) {
    workspace_->open(runId, queue_->controllerOf(runId) != nullptr);
  });
  connect(runs_, &RunsPanel::cloneRequested, this, [this](const QString& configJson, const QString& origin) {
    if (designer_->loadConfig(configJson, origin)) {
      designerDock_->show();
      designerDock_->raise();
    }
  });
  connect(runs_, &RunsPanel::compareRequested, this, [this](const QList<qint64>& runIds, const QString& figure) {
    if (!figure.isEmpty()) compare_->setFigureName(figure);
    compare_->showRuns(runIds);
    workspace_->showPage(compare_);
  });
  connect(runs_, &RunsPanel::tasksRequested, this, [this](const QList<qint64>& runIds) {
    tasks_->checkRuns(runIds);
    workspace_->showPage(tasks_);
  });
  connect(runs_, &RunsPanel::runSelected, overview_, &RunsOverview::showRun);
  connect(runs_, &RunsPanel::runsSelected, overview_, &RunsOverview::setSelection);
  connect(runs_, &RunsPanel::runSelected, this, &MainWindow::updateActions);
  connect(presets_, &PresetsPanel::presetSelected, this, &MainWindow::updateActions);
  connect(runs_->view(), &QTableView::doubleClicked, this, [this](const QModelIndex&) { openDashboard(); });
  connect(designer_, &ExperimentDesigner::launchRequested, this, &MainWindow::startRequest);
}

void MainWindow::selectInitialPreset(const QString& requested) {
  if (!requested.isEmpty()) {
    if (presets_->selectPreset(requested)) return;
    showError(tr("Unknown preset"), tr("There is no preset named '%1'.").arg(requested));
  }
  const QString last = QSettings().value(kSettingsPreset).toString();
  if (!last.isEmpty() && presets_->selectPreset(last)) return;
  if (presets_->selectPreset(kQuickstartPreset)) return;
  if (!presets_->presetNames().isEmpty()) presets_->selectPreset(presets_->presetNames().first());
}

void MainWindow::restoreSettings() {
  QSettings settings;
  const QString layout = layoutKey();
  if (settings.contains(layout + QStringLiteral("geometry")))
    restoreGeometry(settings.value(layout + QStringLiteral("geometry")).toByteArray());
  if (!settings.contains(layout + QStringLiteral("state")) ||
      !restoreState(settings.value(layout + QStringLiteral("state")).toByteArray()))
    QTimer::singleShot(0, this, &MainWindow::applyDefaultDockSizes);  // docks are sized once the window is shown
  plot_->setSmoothing(settings.value(kSettingsSmoothing, plot_->smoothing()).toDouble());
  steps_->setValue(settings.value(kSettingsSteps, steps_->value()).toInt());
  // The designer's last form (an invalid one comes back with its errors under the fields, as it was left).
  if (const QString form = settings.value(kSettingsDesignerForm).toString(); !form.isEmpty())
    designer_->loadConfig(form, settings.value(kSettingsDesignerOrigin).toString());
}

void MainWindow::saveSettings() const {
  QSettings settings;
  const QString layout = layoutKey();
  settings.setValue(layout + QStringLiteral("geometry"), saveGeometry());
  settings.setValue(layout + QStringLiteral("state"), saveState());
  settings.setValue(kSettingsPreset, presets_->currentPreset());
  settings.setValue(kSettingsSmoothing, plot_->smoothing());
  settings.setValue(kSettingsSteps, steps_->value());
  settings.setValue(kSettingsDesignerForm, designer_->overridesJson());
  settings.setValue(kSettingsDesignerOrigin, designer_->request().preset);
}

QString MainWindow::layoutKey() const {
  const QScreen* shown = screen();
  const QSize size = shown ? shown->availableGeometry().size() : QSize();
  return QStringLiteral("%1/%2x%3/").arg(QLatin1String(kSettingsLayoutGroup)).arg(size.width()).arg(size.height());
}

void MainWindow::resetLayout() {
  restoreState(defaultLayout_);
  for (QDockWidget* dock : findChildren<QDockWidget*>()) dock->setFloating(false);
  applyDefaultDockSizes();
}

void MainWindow::applyDefaultDockSizes() {
  // The left column wide enough for the runs table's key columns and the designer's labels, the rest to the
  // workspace; the log a strip of a few lines.
  resizeDocks({runsDock_}, {std::clamp(width() * 21 / 50, 360, 640)}, Qt::Horizontal);
  resizeDocks({logDock_}, {std::clamp(height() / 6, 90, 220)}, Qt::Vertical);
}

void MainWindow::updateActions() {
  // Start and Launch queue while runs are in progress; Stop stops the run shown, Stop all every run (and holds
  // the queue).
  startAction_->setEnabled(!closeAfterRun_ && !presets_->currentPreset().isEmpty());
  stopAction_->setEnabled(queue_->canStop());
  stopAllAction_->setEnabled(queue_->canStop());
  designer_->setLaunchEnabled(!closeAfterRun_);
  dashboardAction_->setEnabled(runs_->selectedRunId() > 0);
}

void MainWindow::startRun() {
  const QString preset = presets_->currentPreset();
  if (preset.isEmpty()) {
    showError(tr("Start"), tr("Select a preset first."));
    return;
  }
  RunRequest request;
  request.preset = preset;
  request.stepsOverride = steps_->value();
  startRequest(request);
}

bool MainWindow::startRequest(const RunRequest& given) {
  RunRequest request = given;
  request.dbPath = dbPath_;
  const QString preset = request.preset;
  if (closeAfterRun_) return false;
  const qint64 key = queue_->submit(request);
  const QueueEntry* entry = queue_->entry(key);
  if (!entry || entry->state != QLatin1String("running")) {
    statusBar()->showMessage(tr("%1 queued: it starts when a slot is free").arg(preset), 8000);
    updateActions();
    return true;
  }
  overview_->showStarting(preset);
  progress_->setState(tr("starting"), RunsTableModel::statusColor(QStringLiteral("running")));
  progress_->clearProgress();
  updateActions();
  return true;
}

void MainWindow::stopRun() {
  if (!queue_->canStop()) return;
  // The run the main plot follows (or the only one); the queue goes on. Several runs and none shown: all stop.
  if (!queue_->stopRun(overview_->runId())) queue_->stopAll();
  progress_->setState(tr("stopping after this step"), RunsTableModel::statusColor(QStringLiteral("stopped")));
  updateActions();
}

void MainWindow::stopAllRuns() {
  if (!queue_->canStop()) return;
  queue_->stopAll();
  progress_->setState(tr("stopping after this step"), RunsTableModel::statusColor(QStringLiteral("stopped")));
  updateActions();
}

void MainWindow::refreshRuns() { store_->requestRuns(); }

qint64 MainWindow::displayedRunId() const { return overview_->runId(); }

void MainWindow::openDashboard() {
  const qint64 runId = runs_->selectedRunId();
  if (runId <= 0) return;
  workspace_->open(runId, queue_->controllerOf(runId) != nullptr);
}

void MainWindow::showAbout() {
  QStringList inUse;  // the device of every run in progress, from the runs table
  for (const QueueEntry& e : queue_->entries())
    if (e.state == QLatin1String("running") && e.runId > 0)
      if (const RunSummary* run = runs_->model()->run(e.runId))
        inUse << tr("run %1 on %2").arg(e.runId).arg(run->device.isEmpty() ? QStringLiteral("cpu") : run->device);
  showAboutDialog(this, inUse.join(QStringLiteral(", ")));
}

void MainWindow::onRunsLoaded(const QList<RunSummary>& runs) {
  runs_->setRuns(runs);
  overview_->runsRefreshed(runs);  // a deleted run leaves the overview
  updateActions();  // a selection restored with the rows enables "Open dashboard"
  if (firstRunsLoad_) {
    firstRunsLoad_ = false;
    // A fresh store: point newcomers at the ready quick-start experiment, and at routing beside it.
    if (runs.isEmpty() && options_.preset.isEmpty()) {
      presets_->selectPreset(kQuickstartPreset);
      statusBar()->showMessage(tr("New here? Run > Quick start with routing trains DTRNet beside its dense twin"),
                               30000);
    }
  }
}

void MainWindow::onRunStarted(const RunStartInfo& info) {
  overview_->showStarted(info);
  progress_->setState(tr("running run %1").arg(info.runId), RunsTableModel::statusColor(QStringLiteral("running")));
  runs_->selectRun(info.runId);
  workspace_->open(info.runId, /*live=*/true);
  refreshRuns();
}

void MainWindow::onProgress(qint64 runId, const ProgressBatch& batch) {
  overview_->onProgress(runId, batch);
  if (!batch.steps.isEmpty() && (overview_->runId() == runId || queue_->runningCount() == 1)) {
    const StepSample& s = batch.steps.back();
    progress_->setProgress(s.step, s.totalSteps, s.loss, s.tokensPerSecond, s.etaSeconds);
  }
}

void MainWindow::onRunFinished(const RunResult& result) {
  const QString who = result.runId ? tr("run %1").arg(result.runId) : tr("run");
  progress_->setState(tr("%1 %2").arg(who, result.status), RunsTableModel::statusColor(result.status));
  if (result.failed()) {
    statusBar()->showMessage(tr("%1 failed: %2").arg(who, result.message));
    if (!closeAfterRun_) showError(tr("%1 failed").arg(who), result.message);
  } else {
    QString text = tr("%1 %2 at step %3").arg(who, result.status).arg(result.lastStep);
    if (!std::isnan(result.lastValLoss)) text += tr(", val loss %1").arg(result.lastValLoss, 0, 'f', 4);
    statusBar()->showMessage(text, 15000);
  }
  refreshRuns();
  updateActions();
  if (closeAfterRun_ && !queue_->isRunning()) QTimer::singleShot(0, this, &QWidget::close);
}

void MainWindow::showError(const QString& title, const QString& message) {
  statusBar()->showMessage(message, 15000);
  // One box at a time: a message that arrives while it is open (each failed run of a launch) is added to it
  // instead of stacking another box on top.
  if (errorBox_ && errorBox_->isVisible()) {
    ++errorCount_;
    errorBox_->setWindowTitle(tr("%1 messages").arg(errorCount_));
    errorBox_->setText(errorBox_->text() + QStringLiteral("\n\n") + title + QStringLiteral(": ") + message);
    return;
  }
  errorCount_ = 1;
  // Non-blocking: training and tests carry on while the box is open.
  errorBox_ = new QMessageBox(QMessageBox::Warning, title, message, QMessageBox::Close, this);
  errorBox_->setObjectName(QStringLiteral("errorBox"));
  errorBox_->setAttribute(Qt::WA_DeleteOnClose);
  errorBox_->open();
}

void MainWindow::closeEvent(QCloseEvent* event) {
  if (!queue_->isRunning()) {
    saveSettings();
    event->accept();
    return;
  }
  event->ignore();
  if (closeAfterRun_) return;  // already stopping; the window closes when the run has ended
  if (confirmClose_ &&
      QMessageBox::question(this, tr("Run in progress"),
                            queue_->runningCount() > 1 ? tr("Stop the %1 runs and quit?").arg(queue_->runningCount())
                                                       : tr("Stop the run and quit?"),
                            QMessageBox::Yes | QMessageBox::No, QMessageBox::No) != QMessageBox::Yes)
    return;
  if (!queue_->isRunning()) {  // they ended while the question was open
    QTimer::singleShot(0, this, &QWidget::close);
    return;
  }
  // Do not block here: the trainer finishes its step and checkpoints while the window keeps painting;
  // onRunFinished closes the window once the worker thread has ended.
  // Their queue items return to pending (as resumes) and continue at the next start.
  closeAfterRun_ = true;
  queue_->shutdown();
  updateActions();
  statusBar()->showMessage(tr("Stopping the run, then closing…"));
}

}  // namespace routelab
