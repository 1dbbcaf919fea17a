// StoreService/StoreReader: RunStore reads off the GUI thread; queued signals carry copies back.
#include "ui/store_service.h"

#include <QDateTime>
#include <QElapsedTimer>
#include <QHash>
#include <QStringList>
#include <QThread>

#include <memory>

#include <nlohmann/json.hpp>

#include "core/report/builders/catalog.h"
#include "core/run/probe_record.h"
#include "core/run/routing_history.h"
#include "core/store/metric_cache.h"
#include "core/store/run_store.h"
#include "core/util/errors.h"
#include "core/util/logging.h"
#include "ui/dashboard_loader.h"
#include "ui/run_editor.h"

namespace routelab {
namespace {

/// Crashed-run detection writes; once every few reads is plenty (the stale threshold is 30 s).
constexpr int kMarkCrashedEveryNthRead = 5;

/// The run's stored config by "section.key"; an unreadable one gives none (the store's own checks report it).
QHash<QString, QVariant> flatConfig(const std::string& configJson) {
  QHash<QString, QVariant> out;
  const auto doc = nlohmann::json::parse(configJson, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return out;
  for (const auto& [section, values] : doc.items()) {
    if (!values.is_object()) continue;
    for (const auto& [key, value] : values.items()) {
      const QString path = QString::fromStdString(section + "." + key);
      if (value.is_number()) out.insert(path, value.get<double>());
      else if (value.is_boolean()) out.insert(path, value.get<bool>());
      else if (value.is_string()) out.insert(path, QString::fromStdString(value.get<std::string>()));
      else out.insert(path, QString::fromStdString(value.dump()));
    }
  }
  return out;
}

RunSummary toSummary(const RunRecord& r) {
  RunSummary s;
  s.id = r.id;
  s.name = QString::fromStdString(r.name);
  s.arch = QString::fromStdString(r.arch);
  s.preset = QString::fromStdString(r.preset);
  s.status = QString::fromStdString(to_string(r.status));
  s.message = QString::fromStdString(r.message);
  s.lastStep = r.last_step;
  s.seed = r.seed;
  s.totalSteps = r.total_steps;
  s.lastTrainLoss = r.last_train_loss.value_or(kNoValue);
  s.lastValLoss = r.last_val_loss.value_or(kNoValue);
  s.bestValLoss = r.best_val_loss.value_or(kNoValue);
  s.createdAt = r.created_at;
  s.endedAt = r.ended_at;
  s.resumedFromStep = r.resumed_from_step;
  s.tags = QString::fromStdString(r.tags);
  s.notes = QString::fromStdString(r.notes);
  s.config = flatConfig(r.config_json);
  s.device = QString::fromStdString(r.device);
  if (r.world_size > 1 || !r.backend.empty())  // data parallel: "cpu, 2 ranks (gloo)"
    s.device += QString(", %1 rank%2%3").arg(r.world_size).arg(r.world_size == 1 ? "" : "s")
                    .arg(r.backend.empty() ? QString() : " (" + QString::fromStdString(r.backend) + ")");
  s.archived = r.archived;
  s.heartbeatAt = r.heartbeat_at;
  s.checkpointStep = r.checkpoint_step.value_or(-1);
  return s;
}

QueueEntry toEntry(const QueueItem& item) {
  QueueEntry e;
  e.key = item.id;
  e.id = item.id;
  e.requestJson = QString::fromStdString(item.request_json);
  e.state = QString::fromStdString(to_string(item.state));
  e.runId = item.run_id.value_or(0);
  e.createdAt = item.created_at;
  e.message = QString::fromStdString(item.message);
  return e;
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
  /// The dashboards' metric series and routing histories, brought up to date with the rows stored since the last read
  /// of each, and their probe documents, parsed once each.
  MetricSeriesCache metrics;
  RoutingHistoryCache routing;
  ProbeRecordCache probes;
  int reads = 0;
  QHash<qint64, qint64> queueIds;  ///< session keys (negative) -> store ids

  /// The store id of a queue key; 0 when the item was never written (its add failed).
  qint64 queueId(qint64 key) const { return key > 0 ? key : queueIds.value(key, 0); }

  RunStore& open() {
    // The first open also marks runs whose heartbeat went stale as crashed.
    if (!store) store = std::make_unique<RunStore>(path, /*mark_crashed=*/true);
    return *store;
  }
};

StoreReader::StoreReader(const QString& dbPath) : impl_(new Impl{dbPath.toStdString(), nullptr, {}, {}, {}, 0, {}}) {}

StoreReader::~StoreReader() { delete impl_; }

void StoreReader::readRuns() {
  try {
    RunStore& store = impl_->open();
    if (++impl_->reads % kMarkCrashedEveryNthRead == 0) store.mark_stale_runs_crashed();
    QList<RunSummary> runs;
    for (const RunRecord& r : store.list_runs(/*include_archived=*/true)) runs.push_back(toSummary(r));
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
    const CachedMetricReads cached_metrics(impl_->metrics);
    const CachedRoutingReads cached_routing(impl_->routing);
    const CachedProbeReads cached_probes(impl_->probes);
    QElapsedTimer clock;
    clock.start();
    RunDashboardData data = loadDashboardData(impl_->open(), runId);
    data.readMs = clock.elapsed();
    Q_EMIT dashboardRead(data);
  } catch (const std::exception& e) {
    impl_->store.reset();
    RunDashboardData empty;
    empty.runId = runId;
    empty.message = QString::fromUtf8(e.what());
    Q_EMIT dashboardRead(empty);  // the dashboard shows why, and its request is no longer in flight
    Q_EMIT failed(QString::fromUtf8(e.what()));
  }
}

void StoreReader::editRuns(const QList<qint64>& runIds, const RunEdit& edit) {
  try {
    RunStore& store = impl_->open();
    RunPatch patch;
    if (edit.name) patch.name = edit.name->toStdString();
    if (edit.tags) patch.tags = edit.tags->toStdString();
    if (edit.notes) patch.notes = edit.notes->toStdString();
    patch.archived = edit.archived;
    store.transaction([&] {
      for (qint64 id : runIds) store.patch_run(id, patch);
    });
    Q_EMIT runsEdited(runIds, {});
  } catch (const std::exception& e) {
    impl_->store.reset();
    Q_EMIT runsEdited(runIds, QString::fromUtf8(e.what()));
  }
}

void StoreReader::deleteRuns(const QList<qint64>& runIds) {
  QStringList errors;
  for (qint64 id : runIds) {
    try {
      RunStore& store = impl_->open();
      const auto record = store.run(id);
      if (!record) throw StoreError(impl_->path + ": no run " + std::to_string(id));
      // A live writer would recreate rows of a deleted run: refuse while its heartbeat is fresh.
      if (record->status == RunStatus::Running)
        throw StoreError("run " + std::to_string(id) + " is running; stop it before deleting it");
      QStringList files;
      for (const CheckpointRow& c : store.checkpoints(id)) files << QString::fromStdString(c.path);
      store.delete_run(id);
      if (const QString error = removeRunFiles(QString::fromStdString(impl_->path), id, files); !error.isEmpty())
        errors << error;
    } catch (const std::exception& e) {
      impl_->store.reset();
      errors << QString::fromUtf8(e.what());
    }
  }
  Q_EMIT runsEdited(runIds, errors.join(QLatin1Char('\n')));
}

void StoreReader::readRunConfig(qint64 runId) {
  try {
    const auto record = impl_->open().run(runId);
    if (!record) throw StoreError(impl_->path + ": no run " + std::to_string(runId));
    Q_EMIT runConfigRead(runId, QString::fromStdString(record->config_json), QString::fromStdString(record->preset));
  } catch (const std::exception& e) {
    impl_->store.reset();
    Q_EMIT failed(QString::fromUtf8(e.what()));
  }
}

void StoreReader::loadQueue(const QString& interruptedMessage) {
  try {
    RunStore& store = impl_->open();
    const int interrupted = store.fail_interrupted_queue_items(interruptedMessage.toStdString());
    if (interrupted > 0) logger("ui")->warn("run queue: {} item(s) were running when RouteLab ended; marked failed", interrupted);
    QList<QueueEntry> entries;
    for (const QueueItem& item : store.queue_items()) entries.push_back(toEntry(item));
    Q_EMIT queueRead(entries);
  } catch (const std::exception& e) {
    impl_->store.reset();
    Q_EMIT queueRead({});
    Q_EMIT failed(QString::fromUtf8(e.what()));
  }
}

void StoreReader::addQueueItem(qint64 key, const QString& requestJson, const QString& state) {
  try {
    const qint64 id = impl_->open().enqueue(requestJson.toStdString(), parse_queue_state(state.toStdString()));
    impl_->queueIds.insert(key, id);
    Q_EMIT queueItemStored(key, id);
  } catch (const std::exception& e) {
    impl_->store.reset();
    Q_EMIT failed(QStringLiteral("run queue: %1").arg(QString::fromUtf8(e.what())));
  }
}

void StoreReader::updateQueueItem(qint64 key, const QString& state, qint64 runId, const QString& message,
                                  const QString& requestJson) {
  const qint64 id = impl_->queueId(key);
  if (id == 0) return;  // its add failed and was reported
  try {
    impl_->open().update_queue_item(id, parse_queue_state(state.toStdString()),
                                    runId > 0 ? std::optional<std::int64_t>(runId) : std::nullopt,
                                    message.toStdString(),
                                    requestJson.isEmpty() ? std::nullopt
                                                          : std::optional<std::string>(requestJson.toStdString()));
  } catch (const std::exception& e) {
    impl_->store.reset();
    Q_EMIT failed(QStringLiteral("run queue: %1").arg(QString::fromUtf8(e.what())));
  }
}

void StoreReader::reorderQueue(const QList<qint64>& keys) {
  std::vector<std::int64_t> ids;
  for (qint64 key : keys)
    if (const qint64 id = impl_->queueId(key)) ids.push_back(id);
  try {
    impl_->open().reorder_queue(ids);
  } catch (const std::exception& e) {
    impl_->store.reset();
    Q_EMIT failed(QStringLiteral("run queue: %1").arg(QString::fromUtf8(e.what())));
  }
}

void StoreReader::removeQueueItems(const QList<qint64>& keys) {
  try {
    RunStore& store = impl_->open();
    store.transaction([&] {
      for (qint64 key : keys)
        if (const qint64 id = impl_->queueId(key)) store.remove_queue_item(id);
    });
  } catch (const std::exception& e) {
    impl_->store.reset();
    Q_EMIT failed(QStringLiteral("run queue: %1").arg(QString::fromUtf8(e.what())));
  }
}

StoreService::StoreService(const QString& dbPath, QObject* parent) : QObject(parent), dbPath_(dbPath) {
  qRegisterMetaType<RunEdit>();
  qRegisterMetaType<QueueEntry>();
  qRegisterMetaType<QList<QueueEntry>>();
  qRegisterMetaType<QList<qint64>>();
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
            if (wantedCurves_.contains(curves.runId)) Q_EMIT curvesLoaded(curves);
          },
          Qt::QueuedConnection);
  connect(reader_, &StoreReader::dashboardRead, this,
          [this](const RunDashboardData& data) {
            dashboardsInFlight_.remove(data.runId);
            Q_EMIT dashboardLoaded(data);
            if (dashboardsAgain_.remove(data.runId)) requestDashboard(data.runId);
          },
          Qt::QueuedConnection);
  connect(reader_, &StoreReader::runsEdited, this,
          [this](const QList<qint64>& ids, const QString& error) {
            Q_EMIT runsEdited(ids, error);
            requestRuns();
          },
          Qt::QueuedConnection);
  connect(reader_, &StoreReader::runConfigRead, this, &StoreService::runConfigLoaded, Qt::QueuedConnection);
  connect(reader_, &StoreReader::queueRead, this, &StoreService::queueLoaded, Qt::QueuedConnection);
  connect(reader_, &StoreReader::queueItemStored, this, &StoreService::queueItemStored, Qt::QueuedConnection);
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
  // Writes still queued (a queue item's last state, say) run before the thread ends: events run in order.
  QMetaObject::invokeMethod(reader_, [] {}, Qt::BlockingQueuedConnection);
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

void StoreService::requestCurves(const QList<qint64>& runIds) {
  wantedCurves_ = QSet<qint64>(runIds.begin(), runIds.end());
  for (const qint64 runId : runIds)
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

void StoreService::requestEdit(const QList<qint64>& runIds, const RunEdit& edit) {
  QMetaObject::invokeMethod(reader_, [reader = reader_, runIds, edit] { reader->editRuns(runIds, edit); },
                            Qt::QueuedConnection);
}

void StoreService::requestDelete(const QList<qint64>& runIds) {
  QMetaObject::invokeMethod(reader_, [reader = reader_, runIds] { reader->deleteRuns(runIds); },
                            Qt::QueuedConnection);
}

void StoreService::requestRunConfig(qint64 runId) {
  QMetaObject::invokeMethod(reader_, [reader = reader_, runId] { reader->readRunConfig(runId); },
                            Qt::QueuedConnection);
}

void StoreService::requestQueueLoad(const QString& interruptedMessage) {
  QMetaObject::invokeMethod(reader_, [reader = reader_, interruptedMessage] { reader->loadQueue(interruptedMessage); },
                            Qt::QueuedConnection);
}

void StoreService::requestQueueAdd(qint64 key, const QString& requestJson, const QString& state) {
  QMetaObject::invokeMethod(
      reader_, [reader = reader_, key, requestJson, state] { reader->addQueueItem(key, requestJson, state); },
      Qt::QueuedConnection);
}

void StoreService::requestQueueUpdate(qint64 key, const QString& state, qint64 runId, const QString& message,
                                      const QString& requestJson) {
  QMetaObject::invokeMethod(
      reader_,
      [reader = reader_, key, state, runId, message, requestJson] {
        reader->updateQueueItem(key, state, runId, message, requestJson);
      },
      Qt::QueuedConnection);
}

void StoreService::requestQueueReorder(const QList<qint64>& keys) {
  QMetaObject::invokeMethod(reader_, [reader = reader_, keys] { reader->reorderQueue(keys); }, Qt::QueuedConnection);
}

void StoreService::requestQueueRemove(const QList<qint64>& keys) {
  QMetaObject::invokeMethod(reader_, [reader = reader_, keys] { reader->removeQueueItems(keys); },
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
