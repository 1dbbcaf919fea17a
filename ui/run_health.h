// RunHealth: the alerts a researcher wants at once on a run's dashboard, computed from plain values fed in
// step order: a collapsed router (a routed layer at <= 1% or >= 99% of tokens for several evaluations in a
// row), a NaN/infinite loss, a diverging loss (the debiased EMA of the train loss well above its minimum) and
// a stalled live run (no step for far longer than usual). No widgets; the dashboard shows what it returns.
#pragma once
#include <QStringList>
#include <QVector>

#include "widgets/ema_smoother.h"

namespace routelab {

class RunHealth {
 public:
  struct Thresholds {
    double collapseLow = 0.01, collapseHigh = 0.99;  ///< routed share at or beyond these counts as collapsed
    int collapseEvals = 3;                           ///< ... for this many evaluations in a row
    double divergeRatio = 1.3;                       ///< smoothed loss above ratio x its minimum ...
    double divergeMargin = 0.3;                      ///< ... and above the minimum by this many nats
    int divergeMinPoints = 20;                       ///< train points before divergence is judged
    double stallSeconds = 60;                        ///< a live run without a step this long is stalled ...
    double stallIntervals = 20;                      ///< ... unless its typical step takes longer (x this)
  };

  RunHealth();
  explicit RunHealth(Thresholds thresholds);

  void reset();
  void addTrainLoss(double step, double loss);
  void addValidationLoss(double step, double loss);
  /// One evaluation's inference-mode routed share per layer, and which layers route.
  void addEvaluation(double step, const QVector<double>& routedShare, const QVector<bool>& routed);
  /// A live step arrived at monotonic time `seconds`.
  void noteProgress(double seconds);
  /// Live runs only: whether the stall check applies (a finished run never stalls).
  void setLive(bool live) { live_ = live; }

  QStringList errors() const;
  /// `nowSeconds` on the same clock as noteProgress.
  QStringList warnings(double nowSeconds) const;

 private:
  Thresholds t_;
  bool live_ = false;
  QString nonFinite_;
  EmaSmoother ema_{0.9};
  int trainPoints_ = 0;
  double emaMin_ = 0, emaMinStep_ = 0, emaNow_ = 0, lastTrainStep_ = 0;
  QVector<int> lowRun_, highRun_;  ///< per layer: consecutive evaluations at the low / high extreme
  double lastEvalStep_ = -1;
  double lastProgress_ = -1;
  QVector<double> intervals_;
};

}  // namespace routelab
