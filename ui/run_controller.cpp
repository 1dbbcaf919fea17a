// RunController: start/stop of the worker thread per the QThread docs (never terminate), timer-driven drain.
#include "ui/run_controller.h"

#include <QThread>
#include <QTimer>

#include "core/util/logging.h"

namespace routelab {

RunController::RunController(QObject* parent) : QObject(parent) {
  drainTimer_ = new QTimer(this);
  drainTimer_->setInterval(kDrainIntervalMs);
  connect(drainTimer_, &QTimer::timeout, this, &RunController::drain);
}

RunController::~RunController() {
  if (!thread_) return;
  // Last resort (the window normally waits without blocking before it closes): stop, then wait.
  worker_->requestStop();
  thread_->quit();
  thread_->wait();
  delete worker_;
  delete thread_;
}

bool RunController::isRunning() const { return thread_ != nullptr; }

bool RunController::isStopping() const { return worker_ && worker_->stopRequested(); }

qint64 RunController::currentRunId() const { return runId_; }

const RunRequest& RunController::currentRequest() const { return request_; }

const std::optional<StepSample>& RunController::lastStep() const { return lastStep_; }

bool RunController::start(const RunRequest& request) {
  if (thread_) return false;
  request_ = request;
  runId_ = 0;
  lastStep_.reset();
  live_ = RunCurves{};

  thread_ = new QThread;
  thread_->setObjectName(QStringLiteral("routelab-train"));
  worker_ = new RunWorker(request);
  worker_->moveToThread(thread_);
  connect(thread_, &QThread::started, worker_, &RunWorker::run);
  // `done` is emitted on the worker thread; the queued call lands on this (GUI) thread and dies with us.
  connect(worker_, &RunWorker::done, this, &RunController::onWorkerDone, Qt::QueuedConnection);
  thread_->start();
  drainTimer_->start();
  logger("ui")->info("starting preset '{}'{}", request.preset.toStdString(),
                     request.stepsOverride > 0 ? " for " + std::to_string(request.stepsOverride) + " steps" : "");
  Q_EMIT runningChanged(true);
  return true;
}

void RunController::stop() {
  if (!worker_ || worker_->stopRequested()) return;
  logger("ui")->info("stop requested{}", runId_ ? " for run " + std::to_string(runId_) : std::string());
  worker_->requestStop();
}

void RunController::drain() {
  if (!worker_) return;
  ProgressBatch batch = worker_->takeProgress();
  if (batch.isEmpty()) return;
  if (batch.started) {
    runId_ = batch.started->runId;
    Q_EMIT runStarted(*batch.started);
  }
  appendCurves(batch, live_);
  if (!batch.steps.isEmpty()) lastStep_ = batch.steps.back();
  Q_EMIT progressReceived(batch);
}

void RunController::onWorkerDone() {
  drainTimer_->stop();
  drain();  // what arrived after the last tick
  RunResult result = worker_->result();
  if (result.runId) runId_ = result.runId;
  // run() has returned, so the thread only has its (empty) event loop left to leave.
  thread_->quit();
  thread_->wait();
  delete worker_;
  delete thread_;
  worker_ = nullptr;
  thread_ = nullptr;
  logger("ui")->info("{} ended: {}{}",
                     result.runId ? "run " + std::to_string(result.runId) : "preset '" + request_.preset.toStdString() + "'",
                     result.status.toStdString(),
                     result.message.isEmpty() ? std::string() : " (" + result.message.toStdString() + ")");
  Q_EMIT runningChanged(false);
  Q_EMIT runFinished(result);
}

}  // namespace routelab
