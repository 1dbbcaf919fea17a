// FigureWorker: a thread, a store connection opened on it, and builds queued to its event loop.
#include "ui/figure_worker.h"

#include <QElapsedTimer>
#include <QThread>

#include "core/util/errors.h"
#include "core/util/interrupt.h"
#include "ui/worker_store.h"

namespace routelab {

FigureWorker::FigureWorker(const QString& dbPath, QObject* parent)
    : QObject(parent),
      connection_(std::make_shared<WorkerStore>(dbPath.toStdString())),
      latest_(std::make_shared<std::atomic<quint64>>(0)) {
  qRegisterMetaType<BuiltFigure>();
  thread_ = new QThread(this);
  thread_->setObjectName(QStringLiteral("routelab-figures"));
  context_ = new QObject;
  context_->moveToThread(thread_);
  connect(thread_, &QThread::finished, context_, &QObject::deleteLater);
  thread_->start();
}

FigureWorker::~FigureWorker() {
  latest_->store(0);  // a build in progress stops at its next interruption point; those queued return at once
  thread_->quit();
  thread_->wait();
}

quint64 FigureWorker::request(const FigureRequest& request) {
  const quint64 serial = ++serial_;
  latest_->store(serial);
  QMetaObject::invokeMethod(
      context_,
      [this, serial, request, connection = connection_, latest = latest_] {
        if (latest->load() != serial) return;  // a later request replaced it before it started
        BuiltFigure out;
        out.serial = serial;
        QElapsedTimer timer;
        timer.start();
        try {
          // A later request (or the worker's end) stops this build at its next interruption point.
          const InterruptScope unwanted([&latest, serial] { return latest->load() != serial; });
          out.figure = build_figure(connection->open(), request);
        } catch (const Interrupted&) {
          return;  // replaced: the newer one follows
        } catch (const StoreError& e) {
          connection->reset();
          out.error = QString::fromUtf8(e.what());
        } catch (const std::exception& e) {
          out.error = QString::fromStdString(foreign_error_text(e));
        }
        out.seconds = static_cast<double>(timer.nsecsElapsed()) * 1e-9;
        if (latest->load() != serial) return;  // replaced while it was built: the newer one follows
        QMetaObject::invokeMethod(
            this, [this, out] { Q_EMIT built(out); }, Qt::QueuedConnection);
      },
      Qt::QueuedConnection);
  return serial;
}

}  // namespace routelab
