// LossPlotWidget: QCustomPlot set-up, incremental appends with a running EMA, and range following.
#include "widgets/loss_plot_widget.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QScopedValueRollback>
#include <QSlider>
#include <QVBoxLayout>

#include "widgets/captioned_layout.h"
#include "widgets/plot_export.h"
#include "widgets/plot_hover.h"
#include "widgets/plot_theme.h"
#include "widgets/qcustomplot_include.h"

namespace routelab {
namespace {

constexpr double kDefaultSmoothing = 0.9;
const QColor kTrainColor(31, 119, 180);
const QColor kValidationColor(230, 110, 20);
/// One colour per run while several are drawn (the main run first), the usual ten-colour cycle.
const QColor kRunColors[] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44},  {214, 39, 40},  {148, 103, 189},
                             {140, 86, 75},  {227, 119, 194}, {127, 127, 127}, {188, 189, 34}, {23, 190, 207}};
constexpr int kRunColorCount = static_cast<int>(std::size(kRunColors));

/// Steps are integers: never place ticks closer than one step apart (no "2.5" on the step axis).
class StepTicker : public QCPAxisTicker {
 protected:
  double getTickStep(const QCPRange& range) override { return std::max(1.0, QCPAxisTicker::getTickStep(range)); }
};

double lastKey(const QCPGraph* graph) {
  return graph->data()->isEmpty() ? -1.0 : (graph->data()->constEnd() - 1)->key;
}

}  // namespace

LossPlotWidget::LossPlotWidget(QWidget* parent)
    : QWidget(parent),
      weight_(kDefaultSmoothing),
      yMin_(std::numeric_limits<double>::infinity()),
      yMax_(-std::numeric_limits<double>::infinity()) {
  fullTitle_ = tr("No run");
  title_ = new QLabel(fullTitle_, this);
  title_->setObjectName(QStringLiteral("lossPlotTitle"));
  QFont titleFont = title_->font();
  titleFont.setBold(true);
  title_->setFont(titleFont);
  title_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  // A long title must not widen the window: it is elided to the space there is (full text in the tooltip).
  title_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  title_->setMinimumWidth(80);

  smoothingSlider_ = new QSlider(Qt::Horizontal, this);
  smoothingSlider_->setObjectName(QStringLiteral("smoothingSlider"));
  smoothingSlider_->setRange(0, 99);
  smoothingSlider_->setValue(static_cast<int>(std::lround(kDefaultSmoothing * 100)));
  smoothingSlider_->setMinimumWidth(50);  // narrower in a narrow panel, never wider than this
  smoothingSlider_->setMaximumWidth(120);
  smoothingSlider_->setToolTip(tr("EMA weight of the smoothed train line (0 = raw), debiased"));
  smoothingMode_ = new QComboBox(this);
  smoothingMode_->setObjectName(QStringLiteral("smoothingMode"));
  smoothingMode_->addItem(tr("EMA"), static_cast<int>(Smoothing::Ema));
  smoothingMode_->addItem(tr("Moving avg"), static_cast<int>(Smoothing::MovingAverage));
  smoothingMode_->setToolTip(tr("EMA (debiased, infinite memory) or trailing moving average (finite window)"));
  smoothingValue_ = new QLabel(this);
  smoothingValue_->setMinimumWidth(32);
  logY_ = new QCheckBox(tr("Log y"), this);
  logY_->setObjectName(QStringLiteral("logYCheck"));
  follow_ = new QCheckBox(tr("Follow"), this);
  follow_->setObjectName(QStringLiteral("followCheck"));
  follow_->setChecked(true);
  follow_->setToolTip(tr("Keep the whole run in view; dragging or zooming turns it off, double-click turns it on"));

  // The title on a line of its own and the controls under it: the plot's minimum width is the controls' row.
  auto* controls = new QHBoxLayout;
  controls->setContentsMargins(6, 0, 6, 0);
  controls->addStretch(1);
  controls->addWidget(new QLabel(tr("Smoothing"), this));
  controls->addWidget(smoothingMode_);
  controls->addWidget(smoothingSlider_);
  controls->addWidget(smoothingValue_);
  controls->addSpacing(8);
  controls->addWidget(logY_);
  controls->addWidget(follow_);

  plot_ = new QCustomPlot(this);
  addExportMenu(plot_, this);
  followPalette(plot_);  // dark plots under a dark palette; exports stay black on white
  plot_->setObjectName(QStringLiteral("lossPlot"));
  installPlotHoverReadout(plot_);
  plot_->setMinimumSize(240, 150);
  plot_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  plot_->xAxis->setLabel(tr("step"));
  plot_->xAxis->setTicker(QSharedPointer<QCPAxisTicker>(new StepTicker));
  plot_->yAxis->setLabel(tr("loss (nats/token)"));
  plot_->xAxis->grid()->setSubGridVisible(false);
  plot_->yAxis->grid()->setSubGridVisible(true);

  trainRaw_ = plot_->addGraph();
  trainSmoothed_ = plot_->addGraph();
  validation_ = plot_->addGraph();
  // Above the axes, three entries a row: an inset legend sat where every run starts, over its first points.
  putLegendAbove(plot_, this, 3);
  rebuildOverlays();  // none yet: sets their empty ranges
  styleSeries();

  emptyHint_ = new QCPItemText(plot_);
  emptyHint_->position->setType(QCPItemPosition::ptAxisRectRatio);
  emptyHint_->position->setCoords(0.5, 0.5);
  emptyHint_->setText(tr("No data yet: start a run, or select a stored one"));
  emptyHint_->setColor(Qt::gray);
  emptyHint_->setClipToAxisRect(true);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(2);
  title_->setContentsMargins(6, 4, 6, 0);
  layout->addWidget(title_);
  layout->addLayout(controls);
  layout->addWidget(plot_, 1);

  connect(smoothingSlider_, &QSlider::valueChanged, this, [this](int value) { setSmoothing(value / 100.0); });
  connect(smoothingMode_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this](int index) {
    setSmoothingMode(static_cast<Smoothing>(smoothingMode_->itemData(index).toInt()));
  });
  connect(logY_, &QCheckBox::toggled, this, &LossPlotWidget::setLogScaleY);
  connect(follow_, &QCheckBox::toggled, this, &LossPlotWidget::setAutoFollow);
  // A user who drags or zooms wants to look at a part: stop following until a double-click. Ranges this
  // widget sets itself are applied under applyingRange_, so only the user's changes count.
  for (QCPAxis* axis : {plot_->xAxis, plot_->yAxis}) {
    connect(axis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this](const QCPRange&) {
      if (!applyingRange_ && autoFollow()) setAutoFollow(false);
    });
  }
  connect(plot_, &QCustomPlot::mouseDoubleClick, this, [this](QMouseEvent*) { setAutoFollow(true); });

  updateRanges();
}

LossPlotWidget::~LossPlotWidget() = default;

void LossPlotWidget::setTitle(const QString& title, const QString& toolTip) {
  fullTitle_ = title;
  title_->setToolTip(toolTip.isEmpty() ? title : toolTip);
  elideTitle();
}

QString LossPlotWidget::title() const { return fullTitle_; }

void LossPlotWidget::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  elideTitle();
  fitLegend();
  scheduleReplot();
}

void LossPlotWidget::fitLegend() {
  // As many entries a row as the plot's width holds (three at most): a row wider than the plot would be cut.
  for (int columns = 3; columns >= 1; --columns) {
    plot_->legend->setWrap(columns);
    plot_->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst, /*rearrange=*/true);
    if (plot_->legend->minimumOuterSizeHint().width() <= plot_->width() - 8) break;
  }
  plot_->plotLayout()->simplify();
}

void LossPlotWidget::elideTitle() {
  title_->setText(title_->fontMetrics().elidedText(fullTitle_, Qt::ElideRight, std::max(40, title_->width())));
}

void LossPlotWidget::setExpectedSteps(double steps) {
  expectedSteps_ = std::max(0.0, steps);
  updateRanges();
  scheduleReplot();
}

void LossPlotWidget::appendTrain(const QVector<double>& steps, const QVector<double>& losses) {
  const qsizetype n = std::min(steps.size(), losses.size());
  double last = lastKey(trainRaw_);
  QVector<double> keys, raw, smoothed;
  keys.reserve(n);
  raw.reserve(n);
  smoothed.reserve(n);
  for (qsizetype i = 0; i < n; ++i) {
    if (steps[i] <= last) continue;
    last = steps[i];
    const double value = std::isfinite(losses[i]) ? losses[i] : std::numeric_limits<double>::quiet_NaN();
    keys.push_back(steps[i]);
    raw.push_back(value);
    smoothed.push_back(smoothAdd(value));
    if (std::isfinite(value)) {
      yMin_ = std::min(yMin_, value);
      yMax_ = std::max(yMax_, value);
      if (value > 0 && (yMinPositive_ <= 0 || value < yMinPositive_)) yMinPositive_ = value;
    }
  }
  if (keys.isEmpty()) return;
  trainRaw_->addData(keys, raw, true);
  trainSmoothed_->addData(keys, smoothed, true);
  updateRanges();
  scheduleReplot();
}

void LossPlotWidget::appendValidation(const QVector<double>& steps, const QVector<double>& losses) {
  const qsizetype n = std::min(steps.size(), losses.size());
  double last = lastKey(validation_);
  QVector<double> keys, values;
  for (qsizetype i = 0; i < n; ++i) {
    if (steps[i] <= last) continue;
    last = steps[i];
    const double value = std::isfinite(losses[i]) ? losses[i] : std::numeric_limits<double>::quiet_NaN();
    keys.push_back(steps[i]);
    values.push_back(value);
    if (std::isfinite(value)) {
      yMin_ = std::min(yMin_, value);
      yMax_ = std::max(yMax_, value);
      if (value > 0 && (yMinPositive_ <= 0 || value < yMinPositive_)) yMinPositive_ = value;
    }
  }
  if (keys.isEmpty()) return;
  validation_->addData(keys, values, true);
  updateRanges();
  scheduleReplot();
}

void LossPlotWidget::setCurves(const QVector<double>& trainSteps, const QVector<double>& trainLosses,
                               const QVector<double>& valSteps, const QVector<double>& valLosses) {
  clear();
  appendTrain(trainSteps, trainLosses);
  appendValidation(valSteps, valLosses);
}

void LossPlotWidget::clear() {
  trainRaw_->data()->clear();
  trainSmoothed_->data()->clear();
  validation_->data()->clear();
  resetSmoother();
  yMin_ = std::numeric_limits<double>::infinity();
  yMax_ = -std::numeric_limits<double>::infinity();
  yMinPositive_ = 0;
  expectedSteps_ = 0;
  updateRanges();
  scheduleReplot();
}

void LossPlotWidget::setSmoothing(double weight) {
  weight = std::isfinite(weight) ? std::clamp(weight, 0.0, 0.999) : 0.0;
  if (std::abs(weight - weight_) < 1e-9) return;
  weight_ = weight;
  movingAverage_.setWindow(movingAverageWindow());
  const QSignalBlocker blocker(smoothingSlider_);
  smoothingSlider_->setValue(static_cast<int>(std::lround(weight_ * 100)));
  rebuildSmoothed();
  rebuildOverlays();
  styleSeries();
  scheduleReplot();
}

double LossPlotWidget::smoothing() const { return weight_; }

int LossPlotWidget::movingAverageWindow() const {
  return std::max(1, static_cast<int>(std::lround(1.0 / (1.0 - weight_))));
}

void LossPlotWidget::setSmoothingMode(Smoothing mode) {
  if (smoothingMode_->currentIndex() != static_cast<int>(mode)) {
    const QSignalBlocker blocker(smoothingMode_);
    smoothingMode_->setCurrentIndex(static_cast<int>(mode));
  }
  if (mode == mode_) return;
  mode_ = mode;
  rebuildSmoothed();
  rebuildOverlays();
  styleSeries();
  scheduleReplot();
}

void LossPlotWidget::setEmaSmoother(std::function<RunningSmoother(double weight)> factory) {
  emaFactory_ = std::move(factory);
  rebuildSmoothed();
  rebuildOverlays();
  styleSeries();
  scheduleReplot();
}

double LossPlotWidget::smoothAdd(double value) {
  if (mode_ == Smoothing::MovingAverage) return movingAverage_.add(value);
  return ema_ ? ema_(value) : value;
}

void LossPlotWidget::resetSmoother() {
  ema_ = emaFactory_ ? emaFactory_(weight_) : RunningSmoother();
  movingAverage_.reset();
}

void LossPlotWidget::setXAxisLabel(const QString& label, bool integerTicks) {
  plot_->xAxis->setLabel(label);
  if (integerTicks) plot_->xAxis->setTicker(QSharedPointer<QCPAxisTicker>(new StepTicker));
  else plot_->xAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
  scheduleReplot();
}

void LossPlotWidget::setAutoFollow(bool follow) {
  if (follow_->isChecked() != follow) {
    const QSignalBlocker blocker(follow_);
    follow_->setChecked(follow);
  }
  if (follow) {
    updateRanges();
    scheduleReplot();
  }
  Q_EMIT autoFollowChanged(follow);
}

bool LossPlotWidget::autoFollow() const { return follow_->isChecked(); }

void LossPlotWidget::setLogScaleY(bool logScale) {
  if (logY_->isChecked() != logScale) {
    const QSignalBlocker blocker(logY_);
    logY_->setChecked(logScale);
  }
  const QScopedValueRollback<bool> applying(applyingRange_, true);
  if (logScale) {
    plot_->yAxis->setScaleType(QCPAxis::stLogarithmic);
    plot_->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
  } else {
    plot_->yAxis->setScaleType(QCPAxis::stLinear);
    plot_->yAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
  }
  updateRanges();
  scheduleReplot();
}

bool LossPlotWidget::logScaleY() const { return logY_->isChecked(); }

int LossPlotWidget::pointCount(Series series) const { return graph(series)->data()->size(); }

double LossPlotWidget::lastStep(Series series) const { return lastKey(graph(series)); }

QCustomPlot* LossPlotWidget::plot() const { return plot_; }

void LossPlotWidget::rebuildSmoothed() {
  resetSmoother();
  QVector<double> keys, smoothed;
  keys.reserve(trainRaw_->data()->size());
  smoothed.reserve(trainRaw_->data()->size());
  for (auto it = trainRaw_->data()->constBegin(); it != trainRaw_->data()->constEnd(); ++it) {
    keys.push_back(it->key);
    smoothed.push_back(smoothAdd(it->value));
  }
  trainSmoothed_->setData(keys, smoothed, true);
}

QVector<double> LossPlotWidget::smoothedCopy(const QVector<double>& raw) const {
  QVector<double> out;
  out.reserve(raw.size());
  if (mode_ == Smoothing::MovingAverage) {
    MovingAverage average(movingAverageWindow());
    for (double v : raw) out.push_back(average.add(v));
    return out;
  }
  RunningSmoother ema = emaFactory_ ? emaFactory_(weight_) : RunningSmoother();
  for (double v : raw) out.push_back(!std::isfinite(v) ? std::numeric_limits<double>::quiet_NaN() : ema ? ema(v) : v);
  return out;
}

void LossPlotWidget::setOverlays(const QString& mainLabel, const QList<OverlayRun>& runs) {
  mainLabel_ = mainLabel;
  overlays_ = runs;
  rebuildOverlays();
  styleSeries();
  updateRanges();
  scheduleReplot();
}

void LossPlotWidget::rebuildOverlays() {
  for (QCPGraph* g : overlayGraphs_) plot_->removeGraph(g);
  overlayGraphs_.clear();
  overlayYMin_ = std::numeric_limits<double>::infinity();
  overlayYMax_ = -std::numeric_limits<double>::infinity();
  overlayYMinPositive_ = 0;
  overlayLastX_ = -1;
  const auto finite = [](QVector<double> values) {
    for (double& v : values)
      if (!std::isfinite(v)) v = std::numeric_limits<double>::quiet_NaN();  // a gap, as in the main run
    return values;
  };
  for (const OverlayRun& run : overlays_) {
    QCPGraph* train = plot_->addGraph();
    train->setData(run.trainSteps, smoothedCopy(finite(run.trainLoss)), true);
    QCPGraph* validation = plot_->addGraph();
    validation->setData(run.valSteps, finite(run.valLoss), true);
    overlayGraphs_ << train << validation;
    for (const QVector<double>* values : {&run.trainLoss, &run.valLoss})
      for (double v : *values) {
        if (!std::isfinite(v)) continue;
        overlayYMin_ = std::min(overlayYMin_, v);
        overlayYMax_ = std::max(overlayYMax_, v);
        if (v > 0 && (overlayYMinPositive_ <= 0 || v < overlayYMinPositive_)) overlayYMinPositive_ = v;
      }
    for (const QVector<double>* steps : {&run.trainSteps, &run.valSteps})
      if (!steps->isEmpty()) overlayLastX_ = std::max(overlayLastX_, steps->back());
  }
}

void LossPlotWidget::styleSeries() {
  const bool several = !overlays_.isEmpty();
  const QColor train = several ? kRunColors[0] : kTrainColor;
  const QColor validation = several ? kRunColors[0] : kValidationColor;
  QColor faint = train;
  faint.setAlpha(several ? 40 : 70);
  trainRaw_->setPen(QPen(faint, 1));
  trainSmoothed_->setPen(QPen(train, 2));
  validation_->setPen(several ? QPen(validation, 1.5, Qt::DashLine) : QPen(validation, 2));
  validation_->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, validation, Qt::white, 6));
  for (qsizetype k = 0; k < overlays_.size(); ++k) {
    const QColor colour = kRunColors[(k + 1) % kRunColorCount];
    overlayGraphs_[2 * k]->setPen(QPen(colour, 2));
    overlayGraphs_[2 * k + 1]->setPen(QPen(colour, 1.5, Qt::DashLine));
    overlayGraphs_[2 * k + 1]->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, colour, Qt::white, 6));
  }
  updateLegendNames();
  fitLegend();
}

void LossPlotWidget::updateLegendNames() {
  QString smoothed = tr("train");
  if (weight_ > 0 && mode_ == Smoothing::Ema) smoothed = tr("train (EMA %1, debiased)").arg(weight_, 0, 'f', 2);
  else if (weight_ > 0) smoothed = tr("train (moving average of %1)").arg(movingAverageWindow());
  if (overlays_.isEmpty()) {
    trainRaw_->setName(tr("train (raw)"));
    trainSmoothed_->setName(smoothed);
    validation_->setName(tr("validation"));
    trainRaw_->addToLegend();
    validation_->addToLegend();
  } else {
    // One entry per run, its colour; the caller's title says which line is training and which validation. The
    // series off the legend are named too, for the hover readout.
    trainRaw_->setName(tr("%1 · train (raw)").arg(mainLabel_));
    validation_->setName(tr("%1 · validation").arg(mainLabel_));
    trainRaw_->removeFromLegend();
    validation_->removeFromLegend();
    trainSmoothed_->setName(mainLabel_);
    for (qsizetype k = 0; k < overlays_.size(); ++k) {
      overlayGraphs_[2 * k]->setName(overlays_[k].label);
      overlayGraphs_[2 * k + 1]->setName(tr("%1 · validation").arg(overlays_[k].label));
      overlayGraphs_[2 * k + 1]->removeFromLegend();
    }
  }
  smoothingValue_->setText(mode_ == Smoothing::Ema ? QString::number(weight_, 'f', 2)
                                                  : QStringLiteral("n=%1").arg(movingAverageWindow()));
}

void LossPlotWidget::updateRanges() {
  const bool empty = trainRaw_->data()->isEmpty() && validation_->data()->isEmpty() && overlays_.isEmpty();
  emptyHint_->setVisible(empty);
  if (!follow_->isChecked()) return;
  const QScopedValueRollback<bool> applying(applyingRange_, true);
  // Fit the data (a live curve uses the whole width); the planned length only frames an empty plot. A margin
  // on both sides keeps the markers at step 0 and at the last step whole.
  const double lastX = std::max({lastKey(trainRaw_), lastKey(validation_), overlayLastX_});
  const double xMax = lastX > 0 ? lastX : std::max(expectedSteps_, 1.0);
  plot_->xAxis->setRange(-xMax * 0.02, xMax * 1.03);

  const double yMin = std::min(yMin_, overlayYMin_), yMax = std::max(yMax_, overlayYMax_);
  double yMinPositive = yMinPositive_;
  if (overlayYMinPositive_ > 0 && (yMinPositive <= 0 || overlayYMinPositive_ < yMinPositive))
    yMinPositive = overlayYMinPositive_;
  const bool haveY = yMin <= yMax;
  if (logScaleY()) {
    const double low = yMinPositive > 0 ? yMinPositive : 0.1;
    const double high = haveY && yMax > low ? yMax : low * 10;
    plot_->yAxis->setRange(low / 1.15, high * 1.15);
  } else if (haveY) {
    const double pad = std::max((yMax - yMin) * 0.06, 1e-3);
    const double low = yMin >= 0 ? std::max(0.0, yMin - pad) : yMin - pad;
    plot_->yAxis->setRange(low, yMax + pad);
  } else {
    plot_->yAxis->setRange(0, 5);
  }
}

void LossPlotWidget::scheduleReplot() {
  // Queued: any number of appends in one event-loop pass cost one replot.
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

QCPGraph* LossPlotWidget::graph(Series series) const {
  switch (series) {
    case Series::TrainRaw: return trainRaw_;
    case Series::TrainSmoothed: return trainSmoothed_;
    case Series::Validation: return validation_;
  }
  return trainRaw_;
}

}  // namespace routelab
