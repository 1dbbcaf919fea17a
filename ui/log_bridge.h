// LogBridge: a spdlog sink (added with routelab::add_log_sink) that hands formatted lines from any thread to
// this long-lived QObject; it delivers them in batches on its own thread via one queued call per batch.
#pragma once
#include <QList>
#include <QObject>

#include <memory>
#include <mutex>

#include "widgets/log_view_widget.h"

namespace routelab {

class LogBridge : public QObject {
  Q_OBJECT

 public:
  /// Installs the sink into every present and future RouteLab logger.
  explicit LogBridge(QObject* parent = nullptr);
  /// Removes the sink; lines logged afterwards are dropped.
  ~LogBridge() override;

  /// Thread-safe; called by the sink.
  void enqueue(LogViewWidget::Level level, QString text);

 Q_SIGNALS:
  void linesLogged(const QList<routelab::LogViewWidget::Line>& lines);

 private:
  void deliver();

  class Sink;
  std::shared_ptr<Sink> sink_;
  std::mutex mutex_;
  QList<LogViewWidget::Line> pending_;
  bool deliveryPosted_ = false;
};

}  // namespace routelab
