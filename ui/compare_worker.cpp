// CompareWorker: builds the Compare view's figure, table and config diff on its own thread and store connection
// (core/report/builders/catalog.h, run_tables.h, config_diff.h); the view sends requests and shows results.
#include <QElapsedTimer>

#include <memory>
#include <set>
#include <string>

#include "core/report/builders/catalog.h"
#include "core/report/tables/config_diff.h"
#include "core/report/tables/run_tables.h"
#include "core/util/errors.h"
#include "core/util/interrupt.h"
#include "core/util/logging.h"
#include "ui/compare_view.h"
#include "ui/worker_store.h"

namespace routelab {

CompareWorker::CompareWorker(const QString& dbPath) : store_(std::make_unique<WorkerStore>(dbPath.toStdString())) {}

CompareWorker::~CompareWorker() = default;

void CompareWorker::build(const CompareRequest& request) {
  CompareResult result;
  result.serial = request.serial;
  QElapsedTimer timer;
  timer.start();
  bool storeFailed = false, interrupted = false;
  const InterruptScope unwanted([this, serial = request.serial] { return wanted_.load() != serial; });
  // Each part fails on its own: a figure that needs data these runs lack still leaves the diff and the table.
  auto attempt = [&](QString& error, auto&& fn) {
    if (interrupted) return;  // the view wants a later request: answer at once (it drops this one)
    try {
      fn();
    } catch (const Interrupted&) {
      interrupted = true;
    } catch (const StoreError& e) {
      storeFailed = true;
      error = QString::fromUtf8(e.what());
    } catch (const std::exception& e) {
      error = QString::fromStdString(foreign_error_text(e));
    }
  };
  const std::vector<std::int64_t>& ids = request.figure.run_ids;
  attempt(result.diffError, [&] { result.diff = config_diff(store_->open(), ids); });
  if (!request.figure.name.empty())
    attempt(result.figureError, [&] {
      FigureRequest figure = request.figure;
      if (!request.figureMetric.empty()) figure.metric = request.figureMetric;
      result.figure = build_figure(store_->open(), figure);
    });
  attempt(result.tableError, [&] {
    result.table = !request.figureTable.empty()
                       ? figure_table(request.figureTable).build(store_->open(), request.figure)
                       : build_run_table(store_->open(), table_spec(request.tableName), ids, request.figure.by_seed);
  });
  if (storeFailed) store_->reset();  // reopen next time: the file may be replaced or unlocked by then
  result.seconds = static_cast<double>(timer.nsecsElapsed()) * 1e-9;
  Q_EMIT built(result);
}

void CompareWorker::readMetricKeys(quint64 serial, const QList<qint64>& runIds) {
  std::set<std::string> keys;
  try {
    RunStore& store = store_->open();
    for (const qint64 id : runIds)
      for (auto& key : store.metric_keys(id)) keys.insert(std::move(key));
  } catch (const std::exception& e) {
    store_->reset();
    logger("ui")->warn("compare view: metric keys: {}", e.what());
  }
  QStringList out;
  for (const auto& key : keys) out << QString::fromStdString(key);
  Q_EMIT metricKeysRead(serial, out);
}

// ------------------------------------------------------------------------------------------------ CompareView

}  // namespace routelab
