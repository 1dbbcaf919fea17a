// RunHealth: running counters per alert; messages name the layer, step and numbers.
#include "ui/run_health.h"

#include <QObject>

#include <algorithm>
#include <cmath>

namespace routelab {
namespace {

QString layerList(const QVector<int>& layers) {
  QStringList names;
  for (int l : layers) names << QString::number(l);
  return (layers.size() == 1 ? QObject::tr("layer %1") : QObject::tr("layers %1")).arg(names.join(QStringLiteral(", ")));
}

}  // namespace

RunHealth::RunHealth() : RunHealth(Thresholds{}) {}

RunHealth::RunHealth(Thresholds thresholds) : t_(thresholds) {}

void RunHealth::reset() {
  nonFinite_.clear();
  ema_.reset();
  trainPoints_ = 0;
  emaMin_ = emaMinStep_ = emaNow_ = lastTrainStep_ = 0;
  lowRun_.clear();
  highRun_.clear();
  lastEvalStep_ = -1;
  lastProgress_ = -1;
  intervals_.clear();
}

void RunHealth::addTrainLoss(double step, double loss) {
  if (step <= lastTrainStep_ && trainPoints_ > 0) return;
  lastTrainStep_ = step;
  if (!std::isfinite(loss)) {
    if (nonFinite_.isEmpty())
      nonFinite_ = QObject::tr("train loss is %1 at step %2").arg(std::isnan(loss) ? "NaN" : "infinite").arg(step);
    return;
  }
  emaNow_ = ema_.add(loss);
  if (++trainPoints_ == 1 || emaNow_ < emaMin_) {
    emaMin_ = emaNow_;
    emaMinStep_ = step;
  }
}

void RunHealth::addValidationLoss(double step, double loss) {
  if (!std::isfinite(loss) && nonFinite_.isEmpty())
    nonFinite_ = QObject::tr("validation loss is %1 at step %2").arg(std::isnan(loss) ? "NaN" : "infinite").arg(step);
}

void RunHealth::addEvaluation(double step, const QVector<double>& routedShare, const QVector<bool>& routed) {
  if (step <= lastEvalStep_) return;
  lastEvalStep_ = step;
  const auto layers = routedShare.size();
  lowRun_.resize(layers, 0);
  highRun_.resize(layers, 0);
  for (qsizetype l = 0; l < layers; ++l) {
    const bool routes = routed.value(l, false);
    const double share = routedShare[l];
    lowRun_[l] = routes && share <= t_.collapseLow ? lowRun_[l] + 1 : 0;
    highRun_[l] = routes && share >= t_.collapseHigh ? highRun_[l] + 1 : 0;
  }
}

void RunHealth::noteProgress(double seconds) {
  if (lastProgress_ >= 0 && seconds > lastProgress_) {
    intervals_.push_back(seconds - lastProgress_);
    if (intervals_.size() > 64) intervals_.removeFirst();
  }
  lastProgress_ = seconds;
}

QStringList RunHealth::errors() const {
  QStringList out;
  if (!nonFinite_.isEmpty()) out << nonFinite_;
  return out;
}

QStringList RunHealth::warnings(double nowSeconds) const {
  QStringList out;
  QVector<int> low, high;
  for (qsizetype l = 0; l < lowRun_.size(); ++l) {
    if (lowRun_[l] >= t_.collapseEvals) low.push_back(static_cast<int>(l));
    if (highRun_[l] >= t_.collapseEvals) high.push_back(static_cast<int>(l));
  }
  if (!low.isEmpty())
    out << QObject::tr("router collapse: %1 routed ≤%2% of tokens for the last %3+ evaluations")
               .arg(layerList(low)).arg(t_.collapseLow * 100).arg(t_.collapseEvals);
  if (!high.isEmpty())
    out << QObject::tr("router collapse: %1 routed ≥%2% of tokens for the last %3+ evaluations")
               .arg(layerList(high)).arg(t_.collapseHigh * 100).arg(t_.collapseEvals);
  if (trainPoints_ >= t_.divergeMinPoints && emaNow_ > emaMin_ * t_.divergeRatio &&
      emaNow_ - emaMin_ > t_.divergeMargin)
    out << QObject::tr("loss diverging: smoothed train loss %1 at step %2, minimum %3 at step %4")
               .arg(emaNow_, 0, 'f', 3).arg(lastTrainStep_).arg(emaMin_, 0, 'f', 3).arg(emaMinStep_);
  if (live_ && lastProgress_ >= 0) {
    QVector<double> sorted = intervals_;
    std::sort(sorted.begin(), sorted.end());
    const double typical = sorted.isEmpty() ? 0 : sorted[sorted.size() / 2];
    const double limit = std::max(t_.stallSeconds, t_.stallIntervals * typical);
    const double quiet = nowSeconds - lastProgress_;
    if (quiet > limit)
      out << QObject::tr("stalled: no training step for %1 s (a step usually takes %2 s)")
                 .arg(quiet, 0, 'f', 0).arg(typical, 0, 'f', 2);
  }
  return out;
}

}  // namespace routelab
