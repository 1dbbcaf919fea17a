// LossPlotWidget: training and validation loss against step on a QCustomPlot, with the raw train series drawn
// faint under a debiased EMA line, validation points, a legend, auto-follow and a log-y switch.
#pragma once
#include <QVector>
#include <QWidget>

#include "widgets/ema_smoother.h"

class QCustomPlot;
class QCPGraph;
class QCPItemText;
class QCheckBox;
class QLabel;
class QSlider;

namespace routelab {

class LossPlotWidget : public QWidget {
  Q_OBJECT

 public:
  enum class Series { TrainRaw, TrainSmoothed, Validation };
  Q_ENUM(Series)

  explicit LossPlotWidget(QWidget* parent = nullptr);
  ~LossPlotWidget() override;

  /// One line above the plot, e.g. "run 12 · dense · quickstart", elided to fit; the tooltip defaults to it.
  void setTitle(const QString& title, const QString& toolTip = QString());
  QString title() const;
  /// While following, the x axis fits the data; before the first point it spans [0, expected steps].
  void setExpectedSteps(double steps);

  /// Appends points in step order; points at or before the last step of the series are ignored, so a live
  /// feed may overlap curves loaded from the store. Non-finite losses are kept as gaps.
  void appendTrain(const QVector<double>& steps, const QVector<double>& losses);
  void appendValidation(const QVector<double>& steps, const QVector<double>& losses);
  /// Replaces every series (a stored run).
  void setCurves(const QVector<double>& trainSteps, const QVector<double>& trainLosses,
                 const QVector<double>& valSteps, const QVector<double>& valLosses);
  void clear();

  /// EMA weight in [0, 1): 0 = no smoothing.
  void setSmoothing(double weight);
  double smoothing() const;
  void setAutoFollow(bool follow);
  bool autoFollow() const;
  void setLogScaleY(bool logScale);
  bool logScaleY() const;

  int pointCount(Series series) const;
  /// Last step of a series, or -1 when it is empty.
  double lastStep(Series series) const;
  /// The plot itself, for export and tests.
  QCustomPlot* plot() const;

 Q_SIGNALS:
  void autoFollowChanged(bool follow);

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  void elideTitle();
  void rebuildSmoothed();
  void updateRanges();
  void updateLegendNames();
  void scheduleReplot();
  QCPGraph* graph(Series series) const;

  QCustomPlot* plot_ = nullptr;
  QCPGraph* trainRaw_ = nullptr;
  QCPGraph* trainSmoothed_ = nullptr;
  QCPGraph* validation_ = nullptr;
  QCPItemText* emptyHint_ = nullptr;
  QLabel* title_ = nullptr;
  QString fullTitle_;
  QSlider* smoothingSlider_ = nullptr;
  QLabel* smoothingValue_ = nullptr;
  QCheckBox* logY_ = nullptr;
  QCheckBox* follow_ = nullptr;

  EmaSmoother ema_;
  double expectedSteps_ = 0;
  double yMin_ = 0, yMax_ = 0;  ///< over the finite values of every series; yMin_ > yMax_ when none
  double yMinPositive_ = 0;     ///< smallest positive value, for the log axis
  bool applyingRange_ = false;  ///< true while this widget itself sets axis ranges
};

}  // namespace routelab
