// RunController: owns the worker thread of the current run, drains its progress at ~15 Hz on the GUI
// thread, keeps the live curve for re-display, and reports start, progress and end as signals.
#pragma once
#include <QObject>
#include <QPointer>
#include <QVector>

#include "ui/run_progress.h"
#include "ui/run_worker.h"

class QThread;
class QTimer;

namespace routelab {

class RunController : public QObject {
  Q_OBJECT

 public:
  static constexpr int kDrainIntervalMs = 66;  ///< ~15 Hz: smooth enough, and at most one replot per tick

  explicit RunController(QObject* parent = nullptr);
  /// Stops a run still in progress and waits for its thread (the trainer finishes the step first).
  ~RunController() override;

  bool isRunning() const;
  bool isStopping() const;
  /// The stored id of the current (or last) run; 0 until the trainer has created it.
  qint64 currentRunId() const;
  const RunRequest& currentRequest() const;
  /// The last step sample of the current run, if any.
  const std::optional<StepSample>& lastStep() const;

  /// Everything the current (or last) run reported, for redrawing it after another run was shown.
  /// Everything the current (or last) run has reported so far.
  const RunCurves& liveCurves() const { return live_; }

  /// Returns false (and does nothing) when a run is already in progress.
  bool start(const RunRequest& request);
  /// Sets the cancel flag; the run ends `stopped` shortly after.
  void stop();

 Q_SIGNALS:
  void runningChanged(bool running);
  void runStarted(const routelab::RunStartInfo& info);
  void progressReceived(const routelab::ProgressBatch& batch);
  void runFinished(const routelab::RunResult& result);

 private:
  void drain();
  void onWorkerDone();

  QThread* thread_ = nullptr;
  RunWorker* worker_ = nullptr;
  QTimer* drainTimer_ = nullptr;
  RunRequest request_;
  qint64 runId_ = 0;
  std::optional<StepSample> lastStep_;
  RunCurves live_;
};

}  // namespace routelab
