// RunsOverview: what the workspace's overview plot draws. The main run (the browser's current run, or the run
// the queue just started) from its live curve or the store, and the other selected runs over it, each in its own
// colour; its title always names the run whose curves are drawn (a deleted run leaves the view).
#pragma once
#include <QHash>
#include <QList>
#include <QObject>
#include <QString>

#include "ui/run_progress.h"

class QTimer;

namespace routelab {

class LossPlotWidget;
class RunQueue;
class RunsTableModel;
class StoreService;

class RunsOverview : public QObject {
  Q_OBJECT

 public:
  /// At most this many runs are drawn over the main one.
  static constexpr int kMaxOverlays = 9;

  /// `runs` names the runs (the browser's model); `plot` is drawn into.
  RunsOverview(LossPlotWidget* plot, StoreService* store, RunQueue* queue, const RunsTableModel* runs,
               QObject* parent = nullptr);

  /// The main run (0 = none).
  qint64 runId() const { return runId_; }
  /// Draws `runId` as the main run: its live curve when a queue slot has one, else the store's.
  void showRun(qint64 runId);
  /// A run about to start from `preset`: an empty plot that follows, until the run reports its id.
  void showStarting(const QString& preset);
  /// The queue started a run: its own curve from its first point, titled by the trainer's description.
  void showStarted(const RunStartInfo& info);
  /// The browser's selection: the runs other than the main one are drawn over it.
  void setSelection(const QList<qint64>& runIds);
  /// After a refresh of the runs table: a main run no longer stored (deleted) leaves, unless it is live.
  void runsRefreshed(const QList<RunSummary>& runs);
  void onCurvesLoaded(const RunCurves& curves);
  void onProgress(qint64 runId, const ProgressBatch& batch);

 private:
  void setTitle(const QString& title, const QString& toolTip = QString());
  void updateOverlays();
  /// Asks the store, in one request, for the curves still missing: the main run's and the overlays'.
  void requestStoredCurves();
  void drawOverlays();
  QString runLabel(qint64 runId) const;

  LossPlotWidget* plot_;
  StoreService* store_;
  RunQueue* queue_;
  const RunsTableModel* runs_;
  qint64 runId_ = 0;
  bool mainPending_ = false;  ///< the main run's curves are asked of the store
  QString title_, toolTip_;
  QList<qint64> selection_;
  QList<qint64> overlayIds_;                ///< runs drawn over the main one, in table order
  QHash<qint64, RunCurves> overlayCurves_;  ///< those of them read (or live)
  QTimer* overlayTimer_ = nullptr;          ///< redraws live overlays at most once a second
};

}  // namespace routelab
