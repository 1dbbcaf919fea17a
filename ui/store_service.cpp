// StoreService/StoreReader: RunStore reads off the GUI thread; queued signals carry copies back.
#include "ui/store_service.h"

#include <QDateTime>
#include <QThread>

#include <memory>

#include "core/store/run_store.h"
#include "core/util/errors.h"
#include "core/util/logging.h"
#include "ui/dashboard_loader.h"

namespace routelab {
namespace {

/// Crashed-run detection writes; once every few reads is plenty (the stale threshold is 30 s).
constexpr int kMarkCrashedEveryNthRead = 5;

RunSummary toSummary(const RunRecord& r) {
  RunSummary s;
  s.id = r.id;
  s.name = QString::fromStdString(r.name);
  s.arch = QString::fromStdString(r.arch);
  s.preset = QString::fromStdString(r.preset);
  s.status = QString::fromStdString(to_string(r.status));
  s.message = QString::fromStdString(r.message);
  s.lastStep = r.last_step;
  s.totalSteps = r.total_steps;
  s.lastTrainLoss = r.last_train_loss.value_or(kNoValue);
  s.lastValLoss = r.last_val_loss.value_or(kNoValue);
  s.bestValLoss = r.best_val_loss.value_or(kNoValue);
  s.createdAt = r.created_at;
  s.endedAt = r.ended_at;
  s.resumedFromStep = r.resumed_from_step;
  return s;
}

void splitPoints(const std::vector<MetricPoint>& points, QVector<double>& steps, QVector<double>& values) {
  steps.reserve(static_cast<qsizetype>(points.size()));
  values.reserve(static_cast<qsizetype>(points.size()));
  for (const MetricPoint& p : points) {
    steps.push_back(static_cast<double>(p.step));
    values.push_back(p.value);
  }
}

}  // namespace

struct StoreReader::Impl {
  std::string path;
  std::unique_ptr<RunStore> store;
  int reads = 0;

  RunStore& open() {
    // The first open also marks runs whose heartbeat went stale as crashed.
    if (!store) store = std::make_unique<RunStore>(path, /*mark_crashed=*/true);
    return *store;
  }
};

StoreReader::StoreReader(const QString& dbPath) : impl_(new Impl{dbPath.toStdString(), nullptr, 0}) {}

StoreReader::~StoreReader() { delete impl_; }

void StoreReader::readRuns() {
  try {
    RunStore& store = impl_->open();
    if (++impl_->reads % kMarkCrashedEveryNthRead == 0) store.mark_stale_runs_crashed();
    QList<RunSummary> runs;
    for (const RunRecord& r : store.list_runs(/*include_archived=*/false)) runs.push_back(toSummary(r));
    Q_EMIT runsRead(runs);
  } catch (const std::exception& e) {
    impl_->store.reset();  // reopen next time: the file may be replaced or unlocked by then
    Q_EMIT failed(QString::fromUtf8(e.what()));
  }
}

void StoreReader::readCurves(qint64 runId) {
  try {
    RunStore& store = impl_->open();
    RunCurves curves;
    curves.runId = runId;
    if (auto record = store.run(runId)) {
      curves.totalSteps = record->total_steps;
      curves.title = QStringLiteral("run %1 · %2 · %3 · %4")
                         .arg(runId)
                         .arg(QString::fromStdString(record->name), QString::fromStdString(record->arch),
                              QString::fromStdString(to_string(record->status)));
    }
    splitPoints(store.metric(runId, "train/loss"), curves.trainSteps, curves.trainLoss);
    splitPoints(store.metric(runId, "val/loss"), curves.valSteps, curves.valLoss);
    Q_EMIT curvesRead(curves);
  } catch (const std::exception& e) {
    impl_->store.reset();
    Q_EMIT failed(QString::fromUtf8(e.what()));
  }
}

void StoreReader::readDashboard(qint64 runId) {
  try {
    Q_EMIT dashboardRead(loadDashboardData(impl_->open(), runId));
  } catch (const std::exception& e) {
    impl_->store.reset();
    RunDashboardData empty;
    empty.runId = runId;
    empty.message = QString::fromUtf8(e.what());
    Q_EMIT dashboardRead(empty);  // the dashboard shows why, and its request is no longer in flight
    Q_EMIT failed(QString::fromUtf8(e.what()));
  }
}

StoreService::StoreService(const QString& dbPath, QObject* parent) : QObject(parent), dbPath_(dbPath) {
  qRegisterMetaType<RunSummary>();
  qRegisterMetaType<QList<RunSummary>>();
  qRegisterMetaType<RunCurves>();
  qRegisterMetaType<RunDashboardData>();

  thread_ = new QThread(this);
  thread_->setObjectName(QStringLiteral("routelab-store"));
  reader_ = new StoreReader(dbPath);
  reader_->moveToThread(thread_);
  connect(thread_, &QThread::finished, reader_, &QObject::deleteLater);
  connect(reader_, &StoreReader::runsRead, this, &StoreService::onRunsLoaded, Qt::QueuedConnection);
  connect(reader_, &StoreReader::curvesRead, this,
          [this](const RunCurves& curves) {
            if (curves.runId == wantedCurves_) Q_EMIT curvesLoaded(curves);
          },
          Qt::QueuedConnection);
  connect(reader_, &StoreReader::dashboardRead, this,
          [this](const RunDashboardData& data) {
            dashboardsInFlight_.remove(data.runId);
            Q_EMIT dashboardLoaded(data);
            if (dashboardsAgain_.remove(data.runId)) requestDashboard(data.runId);
          },
          Qt::QueuedConnection);
  connect(reader_, &StoreReader::failed, this,
          [this](const QString& message) {
            runsInFlight_ = false;  // the table keeps its rows; the next refresh tries again
            runsAgain_ = false;
            Q_EMIT storeFailed(message);
          },
          Qt::QueuedConnection);
  thread_->start();
}

StoreService::~StoreService() {
  thread_->quit();
  thread_->wait();  // reads are short; the reader is deleted on its thread as it finishes
}

void StoreService::requestRuns() {
  if (runsInFlight_) {
    runsAgain_ = true;
    return;
  }
  runsInFlight_ = true;
  QMetaObject::invokeMethod(reader_, &StoreReader::readRuns, Qt::QueuedConnection);
}

void StoreService::requestCurves(qint64 runId) {
  wantedCurves_ = runId;
  QMetaObject::invokeMethod(reader_, [reader = reader_, runId] { reader->readCurves(runId); },
                            Qt::QueuedConnection);
}

void StoreService::requestDashboard(qint64 runId) {
  if (dashboardsInFlight_.contains(runId)) {
    dashboardsAgain_.insert(runId);
    return;
  }
  dashboardsInFlight_.insert(runId);
  QMetaObject::invokeMethod(reader_, [reader = reader_, runId] { reader->readDashboard(runId); },
                            Qt::QueuedConnection);
}

void StoreService::onRunsLoaded(const QList<RunSummary>& runs) {
  runsInFlight_ = false;
  Q_EMIT runsLoaded(runs);
  if (runsAgain_) {
    runsAgain_ = false;
    requestRuns();
  }
}

}  // namespace routelab
