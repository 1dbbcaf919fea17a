// FigureWorker: builds catalogue figures (core/report/builders/catalog.h) on a thread of its own with its own store
// connection, for panels whose figures take seconds (a routing breakdown runs a checkpoint's forward): the latest
// request wins: one still waiting when a later one arrives is dropped unbuilt, and one in progress stops at its next
// interruption point (core/util/interrupt.h: between a breakdown's batches, before each checkpoint of a history).
#pragma once
#include <QMetaType>
#include <QObject>
#include <QString>

#include <atomic>
#include <memory>

#include "core/report/builders/catalog.h"
#include "core/report/figure/figure.h"

class QThread;

namespace routelab {

class WorkerStore;

struct BuiltFigure {
  quint64 serial = 0;  ///< FigureWorker::request's return value
  Figure figure;
  QString error;       ///< why there is no figure; "" when built
  double seconds = 0;  ///< the build's time on the worker's thread
};

class FigureWorker : public QObject {
  Q_OBJECT

 public:
  explicit FigureWorker(const QString& dbPath, QObject* parent = nullptr);
  /// Stops a build in progress at its next interruption point and waits for it (requests still waiting are dropped).
  ~FigureWorker() override;

  /// Queues a build of `request`; returns its serial, which `built` carries.
  quint64 request(const FigureRequest& request);
  /// The serial of the last request.
  quint64 lastSerial() const { return serial_; }

 Q_SIGNALS:
  /// A request was built (or failed); only the latest request's build arrives.
  void built(const routelab::BuiltFigure& result);

 private:
  QThread* thread_ = nullptr;
  QObject* context_ = nullptr;  ///< lives on thread_: the builds run in its event loop
  std::shared_ptr<WorkerStore> connection_;  ///< used on thread_ only
  std::shared_ptr<std::atomic<quint64>> latest_;
  quint64 serial_ = 0;
};

}  // namespace routelab

Q_DECLARE_METATYPE(routelab::BuiltFigure)
