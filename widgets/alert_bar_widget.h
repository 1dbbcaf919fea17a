// AlertBarWidget: a strip of alerts shown at once above a dashboard (router collapse, NaN loss, divergence,
// stalled run); hidden when there is nothing to say. Errors in red, warnings in amber. Plain data in.
#pragma once
#include <QStringList>
#include <QWidget>

class QLabel;

namespace routelab {

class AlertBarWidget : public QWidget {
  Q_OBJECT

 public:
  explicit AlertBarWidget(QWidget* parent = nullptr);
  void setAlerts(const QStringList& errors, const QStringList& warnings);
  QStringList errors() const { return errors_; }
  QStringList warnings() const { return warnings_; }
  QString text() const;

 private:
  QLabel* label_ = nullptr;
  QStringList errors_, warnings_;
};

}  // namespace routelab
