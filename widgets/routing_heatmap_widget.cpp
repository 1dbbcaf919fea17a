// RoutingHeatmapWidget: QCPColorMap over (step, layer) with a viridis gradient and a colour scale.
#include "widgets/captioned_layout.h"
#include "widgets/routing_heatmap_widget.h"

#include <QLabel>
#include <QTimer>
#include <QToolTip>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

#include "widgets/color_gradients.h"
#include "widgets/color_maps.h"
#include "widgets/plot_export.h"
#include "widgets/plot_theme.h"
#include "widgets/qcustomplot_include.h"

namespace routelab {

RoutingHeatmapWidget::RoutingHeatmapWidget(QWidget* parent) : QWidget(parent) {
  plot_ = new QCustomPlot(this);
  addExportMenu(plot_, this);
  followPalette(plot_);  // dark plots under a dark palette; exports stay black on white
  plot_->setObjectName(QStringLiteral("routingHeatmap"));
  plot_->setMinimumSize(220, 160);
  plot_->xAxis->setLabel(tr("step"));
  plot_->yAxis->setLabel(tr("layer"));
  plot_->axisRect()->setupFullAxesBox(true);
  plot_->xAxis->grid()->setVisible(false);
  plot_->yAxis->grid()->setVisible(false);
  map_ = new QCPColorMap(plot_->xAxis, plot_->yAxis);
  map_->setInterpolate(false);
  map_->setTightBoundary(false);
  map_->setGradient(viridisGradient());
  map_->setDataRange(QCPRange(0, 1));
  auto* scale = new QCPColorScale(plot_);
  scale->setType(QCPAxis::atRight);
  scale->setGradient(viridisGradient());
  scale->setDataRange(QCPRange(0, 1));
  scale->axis()->setLabel(tr("routed share"));
  plot_->plotLayout()->addElement(0, 1, scale);
  map_->setColorScale(scale);
  auto* margins = new QCPMarginGroup(plot_);
  plot_->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
  scale->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
  plot_->setMouseTracking(true);
  // Step labels (up to 6 digits) need ~60 px each: a narrow dock gets fewer ticks instead of overlapping labels.
  connect(plot_, &QCustomPlot::afterLayout, this, [this] {
    plot_->xAxis->ticker()->setTickCount(std::clamp(plot_->axisRect()->width() / 60, 2, 6));
  });

  caption_ = addCaptionAbove(this, plot_, tr("routed-token % per layer over training"));

  connect(plot_, &QCustomPlot::mouseMove, this, [this](QMouseEvent* event) {
    const double step = plot_->xAxis->pixelToCoord(event->position().x());
    const int layer = static_cast<int>(std::lround(plot_->yAxis->pixelToCoord(event->position().y())));
    const double value = valueAt(step, layer);
    if (layer < 0 || layer >= layers_ || steps_.isEmpty()) {
      QToolTip::hideText();
      return;
    }
    const auto it = std::upper_bound(steps_.begin(), steps_.end(), step);
    const double shownStep = it == steps_.begin() ? steps_.front() : *(it - 1);
    QToolTip::showText(event->globalPosition().toPoint(),
                       std::isfinite(value) ? tr("step %1, layer %2: %3% routed").arg(shownStep).arg(layer).arg(value * 100, 0, 'f', 1)
                                            : tr("step %1, layer %2: dense").arg(shownStep).arg(layer),
                       plot_);
  });
  rebuild();
}

RoutingHeatmapWidget::~RoutingHeatmapWidget() = default;

void RoutingHeatmapWidget::setCaption(const QString& caption) { caption_->setText(caption); }

void RoutingHeatmapWidget::setHistory(const QVector<double>& steps, const QVector<QVector<double>>& columns) {
  steps_.clear();
  columns_.clear();
  layers_ = 0;
  const qsizetype n = std::min(steps.size(), columns.size());
  for (qsizetype i = 0; i < n; ++i) {
    if (!steps_.isEmpty() && steps[i] <= steps_.back()) continue;
    steps_.push_back(steps[i]);
    columns_.push_back(columns[i]);
    layers_ = std::max(layers_, static_cast<int>(columns[i].size()));
  }
  scheduleRebuild();
}

void RoutingHeatmapWidget::appendColumn(double step, const QVector<double>& values) {
  if (!steps_.isEmpty() && step <= steps_.back()) return;
  steps_.push_back(step);
  columns_.push_back(values);
  layers_ = std::max(layers_, static_cast<int>(values.size()));
  scheduleRebuild();
}

void RoutingHeatmapWidget::clear() { setHistory({}, {}); }

double RoutingHeatmapWidget::valueAt(double step, int layer) const {
  if (steps_.isEmpty() || layer < 0) return std::nan("");
  const auto it = std::upper_bound(steps_.begin(), steps_.end(), step);
  if (it == steps_.begin()) return std::nan("");
  const auto& column = columns_[static_cast<qsizetype>(it - steps_.begin()) - 1];
  return layer < column.size() ? column[layer] : std::nan("");
}

void RoutingHeatmapWidget::scheduleRebuild() {
  // Many appends in one event-loop pass cost one rebuild and one replot.
  if (rebuildPending_) return;
  rebuildPending_ = true;
  QTimer::singleShot(0, this, [this] { rebuild(); });
}

void RoutingHeatmapWidget::rebuild() {
  rebuildPending_ = false;
  if (steps_.isEmpty() || layers_ == 0) {
    map_->data()->setSize(1, 1);
    map_->data()->setRange(QCPRange(0, 1), QCPRange(0, 0));
    map_->data()->setCell(0, 0, std::nan(""));
    plot_->xAxis->setRange(0, 1);
    plot_->yAxis->setRange(-0.5, 0.5);
    plot_->replot(QCustomPlot::rpQueuedReplot);
    return;
  }
  const double first = steps_.front(), last = steps_.back();
  // One cell per logged step when they fit, step-held onto kMaxColumns cells otherwise.
  const int nx = std::clamp(static_cast<int>(steps_.size()), 1, kMaxColumns);
  map_->data()->setSize(nx, layers_);
  // Cell centres span the range; a single row (or column) has no extent of its own, so it gets the whole band.
  map_->data()->setRange(QCPRange(first, nx > 1 ? last : first + 1),
                         layers_ > 1 ? QCPRange(0, layers_ - 1) : QCPRange(-0.5, 0.5));
  for (int ix = 0; ix < nx; ++ix) {
    double key = 0, ignored = 0;
    map_->data()->cellToCoord(ix, 0, &key, &ignored);
    for (int layer = 0; layer < layers_; ++layer) map_->data()->setCell(ix, layer, valueAt(key + 1e-9, layer));
  }
  const double halfCell = nx > 1 ? (last - first) / (nx - 1) / 2 : 0.5;
  plot_->xAxis->setRange(first - halfCell, (nx > 1 ? last : first + 1) + halfCell);
  plot_->yAxis->setRange(-0.5, layers_ - 0.5);
  QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
  const int every = std::max(1, layers_ / 12);
  for (int l = 0; l < layers_; l += every) ticker->addTick(l, QString::number(l));
  plot_->yAxis->setTicker(ticker);
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace routelab
