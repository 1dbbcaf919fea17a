// LossPlotWidget: training and validation loss against step (or tokens, or wall time) on a QCustomPlot, with the
// raw train series drawn faint under a smoothed line (debiased EMA or trailing moving average), validation points,
// a legend above the axes, auto-follow and a log-y switch; further runs can be drawn over the main one.
#pragma once
#include <functional>

#include <QVector>
#include <QWidget>

#include "widgets/moving_average.h"

class QCustomPlot;
class QCPGraph;
class QCPItemText;
class QCheckBox;
class QComboBox;
class QLabel;
class QSlider;

namespace routelab {

class LossPlotWidget : public QWidget {
  Q_OBJECT

 public:
  enum class Series { TrainRaw, TrainSmoothed, Validation };
  Q_ENUM(Series)
  enum class Smoothing { Ema, MovingAverage };
  Q_ENUM(Smoothing)

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

  /// A further run drawn over the main one (several runs selected in the browser).
  struct OverlayRun {
    QString label;  ///< its legend entry, e.g. "run 9 · mod-c0.7-s2"
    QVector<double> trainSteps, trainLoss, valSteps, valLoss;
  };
  /// Replaces the runs drawn over the main run; `mainLabel` names the main run in the legend while there are
  /// any. With overlays every run has one colour: its smoothed training line solid, its validation points on a
  /// dashed line; without, the main run is drawn as before (raw, smoothed and validation in their own colours).
  void setOverlays(const QString& mainLabel, const QList<OverlayRun>& runs);
  int overlayCount() const { return static_cast<int>(overlays_.size()); }

  /// Smoothing strength in [0, 1): 0 = no smoothing. The EMA uses it as its weight; the moving average as a
  /// window of round(1 / (1 - weight)) points (0.9 -> 10).
  void setSmoothing(double weight);
  /// A running smoother: fed the raw values in order, it returns each smoothed value (NaN for a gap).
  using RunningSmoother = std::function<double(double)>;
  /// Makes the EMA mode's smoother for a weight. The ui passes core's debiased EMA (core/run/smoothing.h), the one
  /// the exported figures and the divergence alert use, so the live line is the paper's line; without one, the
  /// EMA mode draws the raw values. Redraws the smoothed line.
  void setEmaSmoother(std::function<RunningSmoother(double weight)> factory);
  double smoothing() const;
  void setSmoothingMode(Smoothing mode);
  Smoothing smoothingMode() const { return mode_; }
  int movingAverageWindow() const;
  /// The x axis' label; `integerTicks` keeps ticks at whole numbers (steps). The caller passes matching x values.
  void setXAxisLabel(const QString& label, bool integerTicks);
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
  /// Wraps the legend row to the plot's width.
  void fitLegend();
  void rebuildSmoothed();
  void updateRanges();
  void updateLegendNames();
  /// Colours and legend entries of every series, for the single-run or the overlay style.
  void styleSeries();
  /// Rebuilds the overlay graphs from overlays_ (after they change, or the smoothing does).
  void rebuildOverlays();
  /// `raw` smoothed from its start by a fresh smoother of the current mode and strength.
  QVector<double> smoothedCopy(const QVector<double>& raw) const;
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
  QComboBox* smoothingMode_ = nullptr;
  QCheckBox* logY_ = nullptr;
  QCheckBox* follow_ = nullptr;
  QList<OverlayRun> overlays_;
  QString mainLabel_;
  QList<QCPGraph*> overlayGraphs_;  ///< two per overlay: smoothed training, validation

  double smoothAdd(double value);
  void resetSmoother();

  double weight_;  ///< the smoothing strength in [0, 0.999]
  std::function<RunningSmoother(double)> emaFactory_;
  RunningSmoother ema_;  ///< emaFactory_(weight_), fresh at each reset
  MovingAverage movingAverage_;
  Smoothing mode_ = Smoothing::Ema;
  double expectedSteps_ = 0;
  double yMin_ = 0, yMax_ = 0;  ///< over the finite values of every series; yMin_ > yMax_ when none
  double yMinPositive_ = 0;     ///< smallest positive value, for the log axis
  double overlayYMin_ = 0, overlayYMax_ = 0, overlayYMinPositive_ = 0, overlayLastX_ = -1;  ///< the same, of overlays
  bool applyingRange_ = false;  ///< true while this widget itself sets axis ranges
};

}  // namespace routelab
