// RunQueue: runs the launcher's requests one after another, or N side by side (N = the "parallel runs" setting,
// at most the machine's cores; side-by-side runs split the cores through run.threads). Each run is its own
// RunController and worker thread. The queue is persisted in the run store (schema v2), so pending items survive
// a restart. Items a crash left `running` come back `failed` with a message (their run is marked crashed by
// the store and can be resumed from the runs browser); items stopped by closing RouteLab come back `pending`
// as a resume of their run, so the next start continues them. RunQueuePanel is its dock.
//
// An item's request is a JSON document: {"preset", "configJson", "sets": [..], "steps", "name", "tags"} or
// {"resume": run id}.
#pragma once
#include <QHash>
#include <QList>
#include <QObject>
#include <QSet>
#include <QString>
#include <QWidget>

#include "ui/run_progress.h"
#include "ui/run_worker.h"
#include "ui/store_service.h"

class QLabel;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace routelab {

class RunController;

class RunQueue : public QObject {
  Q_OBJECT

 public:
  /// Loads the stored queue (asynchronously) and starts its pending items once loaded.
  RunQueue(StoreService* store, QObject* parent = nullptr);
  ~RunQueue() override;

  /// The machine's cores: the most runs side by side.
  static int maxParallel();
  int parallel() const { return parallel_; }
  /// Clamped to [1, maxParallel()]; more slots start pending items at once.
  void setParallel(int n);
  /// Torch threads each run gets when runs go side by side (0 = the config's own setting, for one at a time).
  int threadsPerRun() const;

  /// Slot 0 always exists (the window's "current run" controller); more appear with setParallel.
  RunController* controller(int slot) const { return controllers_.value(slot); }
  int slotCount() const { return static_cast<int>(controllers_.size()); }
  /// The controller running `runId`, or nullptr.
  RunController* controllerOf(qint64 runId) const;
  /// The live curves of `runId` while (or after) a controller ran it; nullptr when none holds it.
  const RunCurves* liveCurves(qint64 runId) const;
  bool isRunning() const;
  int runningCount() const;
  /// True when some run is in progress and not already asked to stop.
  bool canStop() const;
  bool isLoaded() const { return loaded_; }
  /// Held queues start nothing new (after Stop, or while closing); a submit releases the hold.
  bool isHeld() const { return held_; }

  const QList<QueueEntry>& entries() const { return entries_; }
  const QueueEntry* entry(qint64 key) const;

  /// Appends `request` (and `tags` for its run) and starts it at once when a slot is free and nothing waits
  /// before it. Returns the item's key.
  qint64 submit(const RunRequest& request, const QString& tags = {});
  /// Queues the continuation of a stopped, failed or crashed run from its latest checkpoint.
  qint64 submitResume(qint64 runId);
  /// Expands sweep file `path` (core/config/sweep.h) and queues every point, tagged "sweep:<name>". Returns the
  /// number of points, or -1 with `error` set.
  int submitSweep(const QString& path, QString* error = nullptr);

  /// Moves a pending item `delta` places among the items (negative = earlier).
  void move(qint64 key, int delta);
  /// Removes items that are not running.
  void remove(const QList<qint64>& keys);
  /// A pending item becomes cancelled; a running one is stopped and ends cancelled.
  void cancel(qint64 key);
  /// Removes every done, failed and cancelled item.
  void clearFinished();
  /// Stops run `runId` (checkpointed, its item ends stopped) without holding the queue: the next pending item
  /// takes its slot. When runId is not running and one run is, that one stops. False when nothing stopped.
  bool stopRun(qint64 runId);
  /// Stops every running run and holds the queue (pending items wait for release()).
  void stopAll();
  /// Releases a hold and starts pending items.
  void release();
  /// For closing: stops every run; their items return to pending as resumes of their runs.
  void shutdown();

  static QString requestToJson(const RunRequest& request, const QString& tags = {});
  /// The request of an item (core/run/queued_request.h); `tags` receives its tags. A malformed document is a
  /// DataError naming `where` and the key.
  static RunRequest requestFromJson(const QString& json, QString* tags = nullptr,
                                    const QString& where = QStringLiteral("queued request"));
  /// A one-line description of an item's request ("tiny · 30 steps", "resume run 4").
  static QString describe(const QString& requestJson);

 Q_SIGNALS:
  void runStarted(const routelab::RunStartInfo& info);
  void progressReceived(qint64 runId, const routelab::ProgressBatch& batch);
  void runFinished(const routelab::RunResult& result);
  void runningChanged(bool running);
  void queueChanged();
  /// The stored queue was read (pending items from a previous session are in entries()).
  void loaded();

 private:
  RunController* addController();
  qint64 add(const QString& requestJson, const QString& state = QStringLiteral("pending"));
  int indexOf(qint64 key) const;
  void setState(qint64 key, const QString& state, qint64 runId, const QString& message,
                const QString& requestJson = {});
  void schedule();
  bool startEntry(QueueEntry& entry, RunController* controller);
  void onLoaded(const QList<QueueEntry>& stored);
  void onStarted(RunController* controller, const RunStartInfo& info);
  void onFinished(RunController* controller, const RunResult& result);
  void persistOrder();

  StoreService* store_;
  QList<RunController*> controllers_;
  QHash<RunController*, qint64> active_;  ///< controller -> key of the item it runs
  QList<QueueEntry> entries_;
  QSet<qint64> cancelling_;
  qint64 nextKey_ = -1;
  int parallel_ = 1;
  bool loaded_ = false;
  bool held_ = false;
  bool shuttingDown_ = false;
  bool scheduling_ = false;
};

/// The queue dock: items with their state, Move up/down, Remove, Cancel, Clear finished, Add sweep…, the
/// parallel-runs setting and, while the queue is held, Start queue.
class RunQueuePanel : public QWidget {
  Q_OBJECT

 public:
  explicit RunQueuePanel(RunQueue* queue, QWidget* parent = nullptr);

  QTableWidget* table() const { return table_; }
  QSpinBox* parallelSpinBox() const { return parallel_; }
  /// Keys of the selected items.
  QList<qint64> selectedKeys() const;

 private:
  void rebuild();
  void addSweep();
  void updateButtons();

  RunQueue* queue_;
  QTableWidget* table_ = nullptr;
  QSpinBox* parallel_ = nullptr;
  QLabel* summary_ = nullptr;
  QPushButton *up_ = nullptr, *down_ = nullptr, *remove_ = nullptr, *cancel_ = nullptr, *clear_ = nullptr,
              *sweep_ = nullptr, *release_ = nullptr;
};

}  // namespace routelab
