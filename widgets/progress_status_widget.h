// ProgressStatusWidget: the status-bar strip of a run: state, step/total bar, loss, tokens/s and ETA.
#pragma once
#include <QColor>
#include <QWidget>

class QLabel;
class QProgressBar;

namespace routelab {

class ProgressStatusWidget : public QWidget {
  Q_OBJECT

 public:
  explicit ProgressStatusWidget(QWidget* parent = nullptr);

  /// e.g. "running run 12" in blue; an invalid colour uses the palette's text colour.
  void setState(const QString& text, const QColor& colour = QColor());
  void setProgress(qint64 step, qint64 totalSteps, double loss, double tokensPerSecond, double etaSeconds);
  /// Hides the numbers (no run, or before the first step).
  void clearProgress();

  QString stateText() const;
  QString progressText() const;  ///< the numbers as one line, for tests and accessibility

  static QString formatDuration(double seconds);
  static QString formatRate(double tokensPerSecond);

 private:
  QLabel* state_ = nullptr;
  QProgressBar* bar_ = nullptr;
  QLabel* loss_ = nullptr;
  QLabel* rate_ = nullptr;
  QLabel* eta_ = nullptr;
};

}  // namespace routelab
