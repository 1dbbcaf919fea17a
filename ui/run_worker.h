// RunWorker: trains one run on its own QThread. The trainer's observer copies small values into a
// mutex-protected buffer that the GUI drains on a timer; Stop is a std::atomic<bool> the trainer polls.
#pragma once
#include <QObject>
#include <QString>
#include <QStringList>

#include <atomic>
#include <memory>
#include <mutex>

#include "ui/run_progress.h"

class QThread;

namespace routelab {

struct RunRequest {
  QString preset;
  qint64 stepsOverride = 0;  ///< 0 = the preset's train.steps
  QStringList sets;          ///< further "section.key=value" overrides
  QString dbPath;            ///< "" = the default run store
  QString name;              ///< "" = the trainer's default name
  /// Overrides as a JSON document ({model, data, train, run}); when set it replaces `preset`, which then only
  /// names the origin (the experiment designer builds these).
  QString configJson;
  /// When > 0, continues this stored run from its latest checkpoint (routelab::resume) and ignores the rest.
  qint64 resumeRunId = 0;
  /// With resumeRunId: Torch threads for the continued run (0 = every core); -1 keeps the stored run.threads.
  int resumeThreads = -1;
  /// > 1: a data-parallel run on this machine; the worker trains rank 0 (its progress is this run's) and starts
  /// the other ranks as routelab-cli processes beside this executable.
  int processes = 1;
};

/// The name the run of `request` gets: its own name, else the trainer's default (architecture, distinguishing
/// options, seed: "mod-c0.7-s2"); "" when the request does not resolve (its launch reports why).
QString runNameOf(const RunRequest& request);

class RunWorker : public QObject {
  Q_OBJECT

 public:
  explicit RunWorker(RunRequest request);
  ~RunWorker() override;

  /// Thread-safe: asks the trainer to stop after the current step (it checkpoints and records `stopped`).
  void requestStop();
  bool stopRequested() const;
  /// Thread-safe: moves out everything collected since the previous call.
  ProgressBatch takeProgress();
  /// Valid once `done` was emitted.
  RunResult result() const;

 public Q_SLOTS:
  /// Runs on the worker thread: resolves the preset, trains, catches every error. Before returning it hands
  /// the object back to the thread that created it, so that thread may delete it after `done`.
  void run();

 Q_SIGNALS:
  void done();

 private:
  class Observer;
  friend class Observer;

  RunRequest request_;
  QThread* home_ = nullptr;
  std::atomic<bool> cancel_{false};
  mutable std::mutex mutex_;  ///< guards pending_ and result_
  ProgressBatch pending_;
  RunResult result_;
};

}  // namespace routelab
