// MainWindow: a view that composes the panels (presets, runs, loss plot, log, status strip) and wires them
// to the run controller and the store service. Logic lives in those; this file only connects and shows.
#pragma once
#include <QByteArray>
#include <QMainWindow>
#include <QMessageBox>
#include <QPointer>
#include <QString>

#include "ui/run_progress.h"
#include "ui/run_worker.h"

class QAction;
class QCloseEvent;
class QDockWidget;
class QSpinBox;
class QTimer;

namespace routelab {

class CompareView;
class RunsOverview;
class WorkspaceTabs;
class ExperimentDesigner;
class LogBridge;
class LogViewWidget;
class LossPlotWidget;
class PresetsPanel;
class ProgressStatusWidget;
class RunController;
class RunQueue;
class RunQueuePanel;
class RunsPanel;
class StoreService;
class TokenInspector;
class ZeroShotView;

struct MainWindowOptions {
  QString dbPath;             ///< "" = routelab::default_db_path()
  QString preset;             ///< preset to select at start-up ("" = last used, else "quickstart")
  bool autostart = false;     ///< start the selected preset once the window is shown
  bool confirmClose = true;   ///< ask before stopping a run on close; ROUTELAB_NO_CONFIRM=1 also turns it off
};

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  static constexpr int kRunsRefreshMs = 1500;

  explicit MainWindow(MainWindowOptions options = {}, QWidget* parent = nullptr);
  ~MainWindow() override;

  QString dbPath() const { return dbPath_; }
  void setConfirmOnClose(bool confirm) { confirmClose_ = confirm; }

  // Parts, for tests and scripted screenshots.
  LossPlotWidget* lossPlot() const { return plot_; }
  RunsPanel* runsPanel() const { return runs_; }
  PresetsPanel* presetsPanel() const { return presets_; }
  /// The queue's first slot: the only one while runs go one at a time.
  RunController* runController() const { return controller_; }
  RunQueue* runQueue() const { return queue_; }
  RunQueuePanel* queuePanel() const { return queuePanel_; }
  QDockWidget* queueDock() const { return queueDock_; }
  ProgressStatusWidget* progressStatus() const { return progress_; }
  LogViewWidget* logView() const { return log_; }
  QAction* startAction() const { return startAction_; }
  /// Run > Quick start with routing: DTRNet at the quick-start shape and the dense quick-start, queued together.
  QAction* routingQuickstartAction() const { return routingQuickstartAction_; }
  QAction* stopAction() const { return stopAction_; }
  QAction* stopAllAction() const { return stopAllAction_; }
  QAction* dashboardAction() const { return dashboardAction_; }
  QAction* shortcutsAction() const { return shortcutsAction_; }
  /// The central tabs: the overview plot, Compare, the token inspector and the run dashboards.
  WorkspaceTabs* workspace() const { return workspace_; }
  ExperimentDesigner* designer() const { return designer_; }
  TokenInspector* inspector() const { return inspector_; }
  /// View > Token inspector: checked while its tab is open.
  QAction* inspectorAction() const { return inspectorAction_; }
  CompareView* compareView() const { return compare_; }
  /// View > Compare runs: checked while its tab is open.
  QAction* compareAction() const { return compareAction_; }
  ZeroShotView* zeroShotView() const { return tasks_; }
  /// View > Zero-shot tasks: checked while its tab is open.
  QAction* tasksAction() const { return tasksAction_; }
  QSpinBox* stepsSpinBox() const { return steps_; }
  /// The run whose curves the plot shows (0 = none).
  qint64 displayedRunId() const;

 public Q_SLOTS:
  void startRun();
  /// Queues `request` (from the toolbar's preset or the designer); it starts at once when a slot is free.
  /// False while the window is closing.
  bool startRequest(const routelab::RunRequest& request);
  void stopRun();
  void stopAllRuns();
  /// Opens the dashboard of the run selected in the runs table.
  void openDashboard();
  void refreshRuns();
  void showAbout();

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  void buildActions();
  void buildDocks();
  void buildMenus();
  void connectParts();
  void selectInitialPreset(const QString& requested);
  void restoreSettings();
  void saveSettings() const;
  void updateActions();
  /// The settings group of this screen size's layout ("mainWindow/1280x720/").
  QString layoutKey() const;
  void resetLayout();
  void applyDefaultDockSizes();

  void onRunsLoaded(const QList<RunSummary>& runs);
  void onRunStarted(const RunStartInfo& info);
  void onProgress(qint64 runId, const ProgressBatch& batch);
  void onRunFinished(const RunResult& result);
  void showError(const QString& title, const QString& message);

  QString dbPath_;
  MainWindowOptions options_;
  bool confirmClose_ = true;
  bool closeAfterRun_ = false;
  bool firstRunsLoad_ = true;

  StoreService* store_ = nullptr;
  RunController* controller_ = nullptr;
  RunQueue* queue_ = nullptr;
  RunQueuePanel* queuePanel_ = nullptr;
  QDockWidget* queueDock_ = nullptr;
  LogBridge* logBridge_ = nullptr;
  QTimer* refreshTimer_ = nullptr;
  WorkspaceTabs* workspace_ = nullptr;
  RunsOverview* overview_ = nullptr;  ///< what the overview plot draws
  ExperimentDesigner* designer_ = nullptr;
  QDockWidget* designerDock_ = nullptr;
  TokenInspector* inspector_ = nullptr;
  QAction* inspectorAction_ = nullptr;
  CompareView* compare_ = nullptr;
  QAction* compareAction_ = nullptr;
  ZeroShotView* tasks_ = nullptr;
  QAction* tasksAction_ = nullptr;
  QByteArray defaultLayout_;  ///< the docks as built, for View > Reset layout

  LossPlotWidget* plot_ = nullptr;
  PresetsPanel* presets_ = nullptr;
  RunsPanel* runs_ = nullptr;
  LogViewWidget* log_ = nullptr;
  ProgressStatusWidget* progress_ = nullptr;
  QDockWidget* presetsDock_ = nullptr;
  QDockWidget* runsDock_ = nullptr;
  QDockWidget* logDock_ = nullptr;

  QAction* startAction_ = nullptr;
  QAction* routingQuickstartAction_ = nullptr;
  QAction* stopAction_ = nullptr;
  QAction* stopAllAction_ = nullptr;
  QAction* refreshAction_ = nullptr;
  QAction* dashboardAction_ = nullptr;
  QAction* quitAction_ = nullptr;
  QAction* aboutAction_ = nullptr;
  QAction* shortcutsAction_ = nullptr;
  QSpinBox* steps_ = nullptr;
  QPointer<QMessageBox> errorBox_;  ///< the open error box, which later messages join
  int errorCount_ = 0;
};

}  // namespace routelab
