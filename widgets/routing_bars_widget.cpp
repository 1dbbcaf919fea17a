// RoutingBarsWidget: two grouped QCPBars series (evaluation, training) plus a grey stub for dense layers.
#include "widgets/captioned_layout.h"
#include "widgets/routing_bars_widget.h"

#include <QLabel>
#include <QToolTip>
#include <QVBoxLayout>

#include <cmath>

#include "widgets/color_maps.h"
#include "widgets/plot_export.h"
#include "widgets/plot_theme.h"
#include "widgets/qcustomplot_include.h"

namespace routelab {
namespace {

QString percent(double share) { return std::isfinite(share) ? QStringLiteral("%1%").arg(share * 100, 0, 'f', 1) : QStringLiteral("–"); }

double at(const QVector<double>& v, int i) { return i < v.size() ? v[i] : std::nan(""); }

}  // namespace

RoutingBarsWidget::RoutingBarsWidget(QWidget* parent) : QWidget(parent) {
  plot_ = new QCustomPlot(this);
  addExportMenu(plot_, this);
  followPalette(plot_);  // dark plots under a dark palette; exports stay black on white
  plot_->setObjectName(QStringLiteral("routingBars"));
  plot_->setMinimumSize(220, 160);
  plot_->yAxis->setRange(0, 105);
  plot_->yAxis->setLabel(tr("routed tokens (%)"));
  plot_->xAxis->setLabel(tr("layer"));
  plot_->xAxis->grid()->setVisible(false);
  plot_->setMouseTracking(true);

  auto* group = new QCPBarsGroup(plot_);
  group->setSpacingType(QCPBarsGroup::stAbsolute);
  group->setSpacing(1);
  evalBars_ = new QCPBars(plot_->xAxis, plot_->yAxis);
  evalBars_->setName(tr("inference (last eval)"));
  evalBars_->setPen(Qt::NoPen);
  evalBars_->setBrush(viridis(0.30));
  evalBars_->setWidth(0.38);
  evalBars_->setBarsGroup(group);
  trainBars_ = new QCPBars(plot_->xAxis, plot_->yAxis);
  trainBars_->setName(tr("training (last log step)"));
  trainBars_->setPen(Qt::NoPen);
  trainBars_->setBrush(viridis(0.75));
  trainBars_->setWidth(0.38);
  trainBars_->setBarsGroup(group);
  denseBars_ = new QCPBars(plot_->xAxis, plot_->yAxis);
  denseBars_->setName(tr("dense layer"));
  denseBars_->setPen(Qt::NoPen);
  denseBars_->setBrush(QBrush(QColor(190, 190, 190), Qt::BDiagPattern));
  denseBars_->setWidth(0.8);
  putLegendAbove(plot_, this);  // bars reach 100%: an inset legend would hide them

  caption_ = addCaptionAbove(this, plot_, tr("routed-token % per layer"));
  caption_->setObjectName(QStringLiteral("routingBarsCaption"));

  connect(plot_, &QCustomPlot::mouseMove, this, [this](QMouseEvent* event) {
    const int layer = static_cast<int>(std::lround(plot_->xAxis->pixelToCoord(event->position().x())));
    const QString text = toolTipForLayer(layer);
    if (text.isEmpty()) QToolTip::hideText();
    else QToolTip::showText(event->globalPosition().toPoint(), text, plot_);
  });
  clear();
}

RoutingBarsWidget::~RoutingBarsWidget() = default;

void RoutingBarsWidget::setShares(const QVector<double>& evalShare, const QVector<double>& trainShare,
                                  const QVector<bool>& routed, const QString& caption) {
  eval_ = evalShare;
  train_ = trainShare;
  layers_ = static_cast<int>(std::max(evalShare.size(), trainShare.size()));
  routed_ = routed;
  routed_.resize(layers_, routed.isEmpty());
  if (routed.isEmpty()) routed_.fill(true);
  QVector<double> keys, evalValues, trainValues, denseKeys, denseValues;
  for (int l = 0; l < layers_; ++l) {
    const double e = at(eval_, l), t = at(train_, l);
    if (!routed_[l] || (!std::isfinite(e) && !std::isfinite(t))) {
      denseKeys.push_back(l);
      denseValues.push_back(100);
      continue;
    }
    keys.push_back(l);
    evalValues.push_back(std::isfinite(e) ? e * 100 : 0);
    trainValues.push_back(std::isfinite(t) ? t * 100 : 0);
  }
  evalBars_->setData(keys, evalValues, true);
  trainBars_->setData(keys, trainValues, true);
  denseBars_->setData(denseKeys, denseValues, true);
  QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
  for (int l = 0; l < layers_; ++l) ticker->addTick(l, QString::number(l));
  plot_->xAxis->setTicker(ticker);
  plot_->xAxis->setRange(-0.7, std::max(1, layers_) - 0.3);
  caption_->setText(caption);
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

void RoutingBarsWidget::clear() { setShares({}, {}, {}, tr("routed-token % per layer: no routing data yet")); }

QString RoutingBarsWidget::toolTipForLayer(int layer) const {
  if (layer < 0 || layer >= layers_) return {};
  if (!routed_.value(layer, true)) return tr("layer %1: dense (no routing decisions)").arg(layer);
  return tr("layer %1\ninference (last eval): %2 routed\ntraining (last log step): %3 routed")
      .arg(layer)
      .arg(percent(at(eval_, layer)), percent(at(train_, layer)));
}

}  // namespace routelab
