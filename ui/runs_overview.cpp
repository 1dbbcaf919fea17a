// RunsOverview: the main run's curve, the overlays, and the requests and titles that keep them true.
#include "ui/runs_overview.h"

#include <QStringList>
#include <QTimer>

#include <algorithm>
#include <iterator>

#include "ui/run_queue.h"
#include "ui/runs_table_model.h"
#include "ui/store_service.h"
#include "widgets/loss_plot_widget.h"

namespace routelab {

RunsOverview::RunsOverview(LossPlotWidget* plot, StoreService* store, RunQueue* queue, const RunsTableModel* runs,
                           QObject* parent)
    : QObject(parent), plot_(plot), store_(store), queue_(queue), runs_(runs) {
  overlayTimer_ = new QTimer(this);
  overlayTimer_->setSingleShot(true);
  overlayTimer_->setInterval(1000);
  connect(overlayTimer_, &QTimer::timeout, this, &RunsOverview::drawOverlays);
  connect(store_, &StoreService::curvesLoaded, this, &RunsOverview::onCurvesLoaded);
}

void RunsOverview::showRun(qint64 runId) {
  if (runId == runId_) return;
  runId_ = runId;
  mainPending_ = false;
  if (const RunCurves* liveCurves = queue_->liveCurves(runId)) {
    // A live (or the last) run of a queue slot: its curve is already here, complete and fresher than the store.
    const RunCurves& live = *liveCurves;
    plot_->setCurves(live.trainSteps, live.trainLoss, live.valSteps, live.valLoss);
    if (const RunSummary* run = runs_->run(runId)) {
      setTitle(tr("run %1 · %2 · %3").arg(runId).arg(run->name, run->arch));
      plot_->setExpectedSteps(static_cast<double>(run->totalSteps));
    }
  } else {
    plot_->clear();
    setTitle(runId ? tr("run %1 (loading…)").arg(runId) : tr("No run"));
    mainPending_ = runId > 0;
  }
  overlayIds_.clear();  // the main run may have been one of them
  updateOverlays();
  requestStoredCurves();
}

void RunsOverview::showStarting(const QString& preset) {
  runId_ = 0;  // the live run takes the plot as soon as the trainer reports its id
  mainPending_ = false;
  plot_->clear();
  plot_->setAutoFollow(true);
  setTitle(tr("starting %1 …").arg(preset));
}

void RunsOverview::showStarted(const RunStartInfo& info) {
  // The starting run's own curve from its first point, never the previous run's with the new run's appended.
  runId_ = 0;
  showRun(info.runId);
  // The description reads "model; data; device": the model part is the title, all of it the tooltip.
  setTitle(tr("run %1 · %2").arg(info.runId).arg(info.description.section(QLatin1Char(';'), 0, 0)), info.description);
  plot_->setExpectedSteps(static_cast<double>(info.totalSteps));
}

void RunsOverview::setSelection(const QList<qint64>& runIds) {
  selection_ = runIds;
  updateOverlays();
}

void RunsOverview::runsRefreshed(const QList<RunSummary>& runs) {
  const bool stored = std::any_of(runs.begin(), runs.end(), [this](const RunSummary& r) { return r.id == runId_; });
  if (runId_ != 0 && !stored && !queue_->controllerOf(runId_)) showRun(0);
}

void RunsOverview::setTitle(const QString& title, const QString& toolTip) {
  title_ = title;
  toolTip_ = toolTip;
  if (plot_->overlayCount() == 0) {
    plot_->setTitle(title, toolTip);
    return;
  }
  QStringList names{runLabel(runId_)};
  for (const qint64 id : overlayIds_) names << runLabel(id);
  plot_->setTitle(tr("%1 + %n more · solid: training, smoothed · dashed: validation", nullptr, plot_->overlayCount())
                      .arg(title),
                  names.join(QLatin1Char('\n')));
}

QString RunsOverview::runLabel(qint64 runId) const {
  const RunSummary* run = runs_->run(runId);
  return run ? tr("run %1 · %2").arg(runId).arg(run->name) : tr("run %1").arg(runId);
}

void RunsOverview::updateOverlays() {
  // Several runs selected: the others over the main (current) one, as W&B overlays the runs ticked in a table.
  QList<qint64> ids;
  for (const qint64 id : selection_)
    if (id != runId_ && runId_ > 0 && ids.size() < kMaxOverlays) ids << id;
  if (ids == overlayIds_ && plot_->overlayCount() == overlayCurves_.size()) return;
  overlayIds_ = ids;
  for (auto it = overlayCurves_.begin(); it != overlayCurves_.end();)
    it = ids.contains(it.key()) ? std::next(it) : overlayCurves_.erase(it);
  drawOverlays();
  requestStoredCurves();
}

void RunsOverview::requestStoredCurves() {
  QList<qint64> wanted;  // one request: a newer one supersedes the runs of the last
  if (mainPending_) wanted << runId_;
  for (const qint64 id : overlayIds_) {
    if (overlayCurves_.contains(id)) continue;
    if (const RunCurves* live = queue_->liveCurves(id)) overlayCurves_.insert(id, *live);
    else wanted << id;
  }
  if (!wanted.isEmpty()) store_->requestCurves(wanted);
  drawOverlays();
}

void RunsOverview::drawOverlays() {
  QList<LossPlotWidget::OverlayRun> runs;
  for (const qint64 id : overlayIds_)
    if (const auto it = overlayCurves_.constFind(id); it != overlayCurves_.constEnd())
      runs.append({runLabel(id), it->trainSteps, it->trainLoss, it->valSteps, it->valLoss});
  plot_->setOverlays(runLabel(runId_), runs);
  setTitle(title_, toolTip_);
}

void RunsOverview::onCurvesLoaded(const RunCurves& curves) {
  if (overlayIds_.contains(curves.runId)) {
    overlayCurves_.insert(curves.runId, curves);
    drawOverlays();
    return;
  }
  if (curves.runId != runId_ || !mainPending_) return;
  mainPending_ = false;
  plot_->setCurves(curves.trainSteps, curves.trainLoss, curves.valSteps, curves.valLoss);
  plot_->setExpectedSteps(static_cast<double>(curves.totalSteps));
  setTitle(curves.title);
}

void RunsOverview::onProgress(qint64 runId, const ProgressBatch& batch) {
  if (runId_ != 0 && runId_ == runId) {
    RunCurves increment;
    appendCurves(batch, increment);
    plot_->appendTrain(increment.trainSteps, increment.trainLoss);  // both append calls end in one queued replot
    plot_->appendValidation(increment.valSteps, increment.valLoss);
  }
  if (overlayIds_.contains(runId))
    if (const RunCurves* live = queue_->liveCurves(runId)) {
      overlayCurves_.insert(runId, *live);
      if (!overlayTimer_->isActive()) overlayTimer_->start();  // redrawn at most once a second
    }
}

}  // namespace routelab
