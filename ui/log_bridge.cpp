// LogBridge: spdlog base_sink → mutex-protected queue → queued delivery on the bridge's thread.
#include "ui/log_bridge.h"

#include <spdlog/sinks/base_sink.h>

#include "core/util/logging.h"

namespace routelab {
namespace {

constexpr int kMaxPendingLines = 10000;  ///< a flood while the GUI is busy drops the oldest lines

LogViewWidget::Level toLevel(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace: return LogViewWidget::Level::Trace;
    case spdlog::level::debug: return LogViewWidget::Level::Debug;
    case spdlog::level::info: return LogViewWidget::Level::Info;
    case spdlog::level::warn: return LogViewWidget::Level::Warning;
    case spdlog::level::err: return LogViewWidget::Level::Error;
    case spdlog::level::critical: return LogViewWidget::Level::Critical;
    default: return LogViewWidget::Level::Info;
  }
}

}  // namespace

class LogBridge::Sink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit Sink(LogBridge* bridge) : bridge_(bridge) {}

  /// After this returns no call reaches the bridge (sink_it_ runs under the same mutex).
  void detach() {
    std::lock_guard lock(mutex_);
    bridge_ = nullptr;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (!bridge_) return;
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    QString text = QString::fromUtf8(formatted.data(), static_cast<qsizetype>(formatted.size()));
    while (text.endsWith(QLatin1Char('\n')) || text.endsWith(QLatin1Char('\r'))) text.chop(1);
    bridge_->enqueue(toLevel(msg.level), std::move(text));
  }
  void flush_() override {}

 private:
  LogBridge* bridge_;
};

LogBridge::LogBridge(QObject* parent) : QObject(parent), sink_(std::make_shared<Sink>(this)) {
  qRegisterMetaType<QList<LogViewWidget::Line>>();
  sink_->set_pattern("%H:%M:%S.%e [%n] %l: %v");
  add_log_sink(sink_);
}

LogBridge::~LogBridge() {
  remove_log_sink(sink_);
  sink_->detach();
}

void LogBridge::enqueue(LogViewWidget::Level level, QString text) {
  std::lock_guard lock(mutex_);
  pending_.push_back(LogViewWidget::Line{level, std::move(text)});
  if (pending_.size() > kMaxPendingLines) pending_.pop_front();
  if (deliveryPosted_) return;
  deliveryPosted_ = true;
  // One queued call per batch; it is dropped if the bridge is destroyed first.
  QMetaObject::invokeMethod(this, &LogBridge::deliver, Qt::QueuedConnection);
}

void LogBridge::deliver() {
  QList<LogViewWidget::Line> lines;
  {
    std::lock_guard lock(mutex_);
    lines.swap(pending_);
    deliveryPosted_ = false;
  }
  if (!lines.isEmpty()) Q_EMIT linesLogged(lines);
}

}  // namespace routelab
