// ProgressStatusWidget: labels plus a QProgressBar, formatted compactly for a status bar.
#include "widgets/progress_status_widget.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QProgressBar>

#include <cmath>

namespace routelab {

ProgressStatusWidget::ProgressStatusWidget(QWidget* parent) : QWidget(parent) {
  state_ = new QLabel(tr("idle"), this);
  state_->setObjectName(QStringLiteral("runState"));
  bar_ = new QProgressBar(this);
  bar_->setObjectName(QStringLiteral("stepProgress"));
  bar_->setFixedWidth(180);
  bar_->setMaximumHeight(16);
  bar_->setTextVisible(true);
  bar_->setFormat(tr("step %v / %m"));
  loss_ = new QLabel(this);
  loss_->setObjectName(QStringLiteral("runLoss"));
  rate_ = new QLabel(this);
  rate_->setObjectName(QStringLiteral("runRate"));
  eta_ = new QLabel(this);
  eta_->setObjectName(QStringLiteral("runEta"));
  for (QLabel* label : {loss_, rate_, eta_}) label->setMinimumWidth(label->fontMetrics().horizontalAdvance(QStringLiteral("ETA 00:00:00")));

  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(0, 0, 4, 0);
  layout->setSpacing(10);
  layout->addWidget(state_);
  layout->addWidget(bar_);
  layout->addWidget(loss_);
  layout->addWidget(rate_);
  layout->addWidget(eta_);
  clearProgress();
}

void ProgressStatusWidget::setState(const QString& text, const QColor& colour) {
  state_->setText(text);
  state_->setStyleSheet(colour.isValid() ? QStringLiteral("QLabel { color: %1; font-weight: bold; }").arg(colour.name())
                                         : QString());
}

void ProgressStatusWidget::setProgress(qint64 step, qint64 totalSteps, double loss, double tokensPerSecond,
                                       double etaSeconds) {
  // QProgressBar takes int; runs beyond 2^31 steps are not a concern of this bar.
  bar_->setRange(0, static_cast<int>(std::max<qint64>(totalSteps, step)));
  bar_->setValue(static_cast<int>(step));
  bar_->setVisible(true);
  loss_->setText(std::isfinite(loss) ? tr("loss %1").arg(loss, 0, 'f', 4) : tr("loss %1").arg(loss));
  rate_->setText(tr("%1 tok/s").arg(formatRate(tokensPerSecond)));
  eta_->setText(tr("ETA %1").arg(formatDuration(etaSeconds)));
  for (QLabel* label : {loss_, rate_, eta_}) label->setVisible(true);
}

void ProgressStatusWidget::clearProgress() {
  bar_->setVisible(false);
  for (QLabel* label : {loss_, rate_, eta_}) {
    label->clear();
    label->setVisible(false);
  }
}

QString ProgressStatusWidget::stateText() const { return state_->text(); }

QString ProgressStatusWidget::progressText() const {
  if (!bar_->isVisibleTo(this)) return QString();
  return QStringLiteral("step %1/%2, %3, %4, %5")
      .arg(bar_->value())
      .arg(bar_->maximum())
      .arg(loss_->text(), rate_->text(), eta_->text());
}

QString ProgressStatusWidget::formatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return QStringLiteral("–");
  const qint64 total = static_cast<qint64>(std::llround(seconds));
  const qint64 h = total / 3600, m = (total / 60) % 60, s = total % 60;
  return h > 0 ? QStringLiteral("%1:%2:%3").arg(h).arg(m, 2, 10, QLatin1Char('0')).arg(s, 2, 10, QLatin1Char('0'))
               : QStringLiteral("%1:%2").arg(m).arg(s, 2, 10, QLatin1Char('0'));
}

QString ProgressStatusWidget::formatRate(double tokensPerSecond) {
  if (!std::isfinite(tokensPerSecond) || tokensPerSecond <= 0) return QStringLiteral("–");
  if (tokensPerSecond >= 1e6) return QString::number(tokensPerSecond / 1e6, 'f', 2) + QLatin1Char('M');
  if (tokensPerSecond >= 1e4) return QString::number(tokensPerSecond / 1e3, 'f', 1) + QLatin1Char('k');
  return QString::number(tokensPerSecond, 'f', 0);
}

}  // namespace routelab
