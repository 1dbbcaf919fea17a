// StoreService: reads and writes the run store on a long-lived thread of its own (one SQLite connection per
// thread) and answers with plain value types: the runs table, the loss curves of one run, a dashboard, edits of
// runs (rename, tags, notes, archive, delete with files) and the persisted run queue. GUI-thread facade.
#pragma once
#include <QList>
#include <QObject>
#include <QString>

#include <QSet>

#include "ui/dashboard_data.h"
#include "ui/run_progress.h"

#include <optional>

class QThread;

namespace routelab {

class StoreReader;

/// Fields to change on one or more runs; unset fields are left alone.
struct RunEdit {
  std::optional<QString> name, tags, notes;
  std::optional<bool> archived;
};

/// One item of the persisted run queue. `key` identifies it for the whole session: the store id for items read
/// from the store, a negative number for items added in this session (the store thread maps it to the id).
struct QueueEntry {
  qint64 key = 0;
  qint64 id = 0;         ///< store id; 0 until the store thread has written the item
  QString requestJson;   ///< see RunQueue for its keys
  QString state;         ///< pending, running, done, failed, cancelled
  qint64 runId = 0;
  double createdAt = 0;  ///< unix seconds
  QString message;
};

class StoreService : public QObject {
  Q_OBJECT

 public:
  explicit StoreService(const QString& dbPath, QObject* parent = nullptr);
  ~StoreService() override;

  QString dbPath() const { return dbPath_; }

  /// Asks for the runs table; a request while one is in flight is folded into one more read afterwards.
  void requestRuns();
  /// Asks for the curves of each of `runIds` (curvesLoaded once per run); a newer request supersedes the runs of
  /// one not yet answered.
  void requestCurves(const QList<qint64>& runIds);
  /// Asks for everything a dashboard shows of `runId`; requests for a run already being read are folded into
  /// one more read after it. Several runs may be asked for at once; answers carry the run id.
  void requestDashboard(qint64 runId);

  // Writes; each ends in runsEdited (and a fresh runsLoaded).
  void requestEdit(const QList<qint64>& runIds, const routelab::RunEdit& edit);
  /// Deletes the runs' rows and their checkpoint folders.
  void requestDelete(const QList<qint64>& runIds);
  /// Asks for the resolved config of `runId` (answered by runConfigLoaded).
  void requestRunConfig(qint64 runId);

  // The run queue: writes are fire-and-forget and run in the order they were asked for.
  /// Marks items a finished process left `running` as failed with `message`, then reads the queue (queueLoaded).
  void requestQueueLoad(const QString& interruptedMessage);
  void requestQueueAdd(qint64 key, const QString& requestJson, const QString& state);
  /// Sets state and message; `runId` > 0 sets the run; a non-empty `requestJson` replaces the request.
  void requestQueueUpdate(qint64 key, const QString& state, qint64 runId, const QString& message,
                          const QString& requestJson = {});
  void requestQueueReorder(const QList<qint64>& keys);
  void requestQueueRemove(const QList<qint64>& keys);

 Q_SIGNALS:
  void runsLoaded(const QList<routelab::RunSummary>& runs);
  void curvesLoaded(const routelab::RunCurves& curves);
  void dashboardLoaded(const routelab::RunDashboardData& data);
  void storeFailed(const QString& message);
  /// A write of requestEdit/requestDelete ended; `error` is empty on success.
  void runsEdited(const QList<qint64>& runIds, const QString& error);
  void runConfigLoaded(qint64 runId, const QString& configJson, const QString& origin);
  void queueLoaded(const QList<routelab::QueueEntry>& entries);
  /// A queue item was written for the first time (`key` now has store id `id`).
  void queueItemStored(qint64 key, qint64 id);

 private:
  void onRunsLoaded(const QList<RunSummary>& runs);

  QString dbPath_;
  QThread* thread_ = nullptr;
  StoreReader* reader_ = nullptr;
  bool runsInFlight_ = false;
  bool runsAgain_ = false;
  QSet<qint64> wantedCurves_;
  QSet<qint64> dashboardsInFlight_, dashboardsAgain_;
};

/// Lives on StoreService's thread; owns the RunStore connection, opened on first use.
class StoreReader : public QObject {
  Q_OBJECT

 public:
  explicit StoreReader(const QString& dbPath);
  ~StoreReader() override;

 public Q_SLOTS:
  void readRuns();
  void readCurves(qint64 runId);
  void readDashboard(qint64 runId);
  void editRuns(const QList<qint64>& runIds, const routelab::RunEdit& edit);
  void deleteRuns(const QList<qint64>& runIds);
  void readRunConfig(qint64 runId);
  void loadQueue(const QString& interruptedMessage);
  void addQueueItem(qint64 key, const QString& requestJson, const QString& state);
  void updateQueueItem(qint64 key, const QString& state, qint64 runId, const QString& message,
                       const QString& requestJson);
  void reorderQueue(const QList<qint64>& keys);
  void removeQueueItems(const QList<qint64>& keys);

 Q_SIGNALS:
  void runsRead(const QList<routelab::RunSummary>& runs);
  void curvesRead(const routelab::RunCurves& curves);
  void dashboardRead(const routelab::RunDashboardData& data);
  void failed(const QString& message);
  void runsEdited(const QList<qint64>& runIds, const QString& error);
  void runConfigRead(qint64 runId, const QString& configJson, const QString& origin);
  void queueRead(const QList<routelab::QueueEntry>& entries);
  void queueItemStored(qint64 key, qint64 id);

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace routelab

Q_DECLARE_METATYPE(routelab::RunEdit)
Q_DECLARE_METATYPE(routelab::QueueEntry)
