// AlertBarWidget: one rich-text label on a coloured frame.
#include "widgets/alert_bar_widget.h"

#include <QHBoxLayout>
#include <QLabel>

namespace routelab {

AlertBarWidget::AlertBarWidget(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("alertBar"));
  label_ = new QLabel(this);
  label_->setWordWrap(true);
  label_->setTextFormat(Qt::RichText);
  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(8, 4, 8, 4);
  layout->addWidget(label_);
  setAttribute(Qt::WA_StyledBackground, true);
  setVisible(false);
}

void AlertBarWidget::setAlerts(const QStringList& errors, const QStringList& warnings) {
  if (errors == errors_ && warnings == warnings_) return;
  errors_ = errors;
  warnings_ = warnings;
  QStringList lines;
  for (const QString& e : errors) lines << QStringLiteral("<b>⛔ %1</b>").arg(e.toHtmlEscaped());
  for (const QString& w : warnings) lines << QStringLiteral("⚠ %1").arg(w.toHtmlEscaped());
  label_->setText(lines.join(QStringLiteral("<br>")));
  // Dark text on light fills: readable in light and dark palettes alike.
  setStyleSheet(errors.isEmpty() ? QStringLiteral("#alertBar{background:#fff3cd;border:1px solid #e0b000;} QLabel{color:#3d2e00;}")
                                 : QStringLiteral("#alertBar{background:#f8d7da;border:1px solid #c0392b;} QLabel{color:#58151c;}"));
  setVisible(!lines.isEmpty());
}

QString AlertBarWidget::text() const { return (errors_ + warnings_).join(QLatin1Char('\n')); }

}  // namespace routelab
