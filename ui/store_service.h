// StoreService: reads the run store on a long-lived thread of its own (one SQLite connection per thread) and
// answers with plain value types: the runs table, and the loss curves of one run. GUI-thread facade.
#pragma once
#include <QList>
#include <QObject>
#include <QString>

#include <QSet>

#include "ui/dashboard_data.h"
#include "ui/run_progress.h"

class QThread;

namespace routelab {

class StoreReader;

class StoreService : public QObject {
  Q_OBJECT

 public:
  explicit StoreService(const QString& dbPath, QObject* parent = nullptr);
  ~StoreService() override;

  QString dbPath() const { return dbPath_; }

  /// Asks for the runs table; a request while one is in flight is folded into one more read afterwards.
  void requestRuns();
  /// Asks for the curves of `runId`; a newer request supersedes one not yet answered.
  void requestCurves(qint64 runId);
  /// Asks for everything a dashboard shows of `runId`; requests for a run already being read are folded into
  /// one more read after it. Several runs may be asked for at once; answers carry the run id.
  void requestDashboard(qint64 runId);

 Q_SIGNALS:
  void runsLoaded(const QList<routelab::RunSummary>& runs);
  void curvesLoaded(const routelab::RunCurves& curves);
  void dashboardLoaded(const routelab::RunDashboardData& data);
  void storeFailed(const QString& message);

 private:
  void onRunsLoaded(const QList<RunSummary>& runs);

  QString dbPath_;
  QThread* thread_ = nullptr;
  StoreReader* reader_ = nullptr;
  bool runsInFlight_ = false;
  bool runsAgain_ = false;
  qint64 wantedCurves_ = 0;
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

 Q_SIGNALS:
  void runsRead(const QList<routelab::RunSummary>& runs);
  void curvesRead(const routelab::RunCurves& curves);
  void dashboardRead(const routelab::RunDashboardData& data);
  void failed(const QString& message);

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace routelab
