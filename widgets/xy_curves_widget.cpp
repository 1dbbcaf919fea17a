// XyCurvesWidget: QCPGraph per curve, log tickers on request, a nearest-point hover.
#include "widgets/captioned_layout.h"
#include "widgets/xy_curves_widget.h"

#include <QLabel>
#include <QToolTip>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <limits>

#include "widgets/plot_export.h"
#include "widgets/plot_theme.h"
#include "widgets/qcustomplot_include.h"

namespace routelab {

XyCurvesWidget::XyCurvesWidget(QWidget* parent) : QWidget(parent) {
  plot_ = new QCustomPlot(this);
  addExportMenu(plot_, this);
  followPalette(plot_);  // dark plots under a dark palette; exports stay black on white
  plot_->setMinimumSize(220, 150);
  putLegendAbove(plot_, this, 2);  // narrow plots: two entries per legend row
  plot_->setMouseTracking(true);
  formatY_ = [](double v) { return QString::number(v, 'g', 4); };
  caption_ = addCaptionAbove(this, plot_);
  connect(plot_, &QCustomPlot::mouseMove, this, [this](QMouseEvent* event) {
    const QString text = toolTipAtX(plot_->xAxis->pixelToCoord(event->position().x()));
    if (text.isEmpty()) QToolTip::hideText();
    else QToolTip::showText(event->globalPosition().toPoint(), text, plot_);
  });
}

XyCurvesWidget::~XyCurvesWidget() = default;

void XyCurvesWidget::setAxes(const QString& xLabel, const QString& yLabel, bool logX, bool logY) {
  logX_ = logX;
  logY_ = logY;
  plot_->xAxis->setLabel(xLabel);
  plot_->yAxis->setLabel(yLabel);
  for (auto [axis, log] : {std::pair{plot_->xAxis, logX}, std::pair{plot_->yAxis, logY}}) {
    axis->setScaleType(log ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
    if (log) {
      QSharedPointer<QCPAxisTickerLog> ticker(new QCPAxisTickerLog);
      axis->setTicker(ticker);
      axis->setNumberFormat(QStringLiteral("gb"));
    } else {
      axis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
    }
  }
  setCurves(curves_);
}

void XyCurvesWidget::setCaption(const QString& caption, const QString& toolTip) {
  caption_->setText(caption);
  caption_->setToolTip(toolTip);
  plot_->setToolTip(QString());
  caption_->setVisible(!caption.isEmpty());
}

QString XyCurvesWidget::caption() const { return caption_->text(); }

void XyCurvesWidget::setValueFormatter(std::function<QString(double)> formatY) { formatY_ = std::move(formatY); }

void XyCurvesWidget::setCurves(const QVector<Curve>& curves) {
  curves_ = curves;
  plot_->clearGraphs();
  double xMin = std::numeric_limits<double>::infinity(), xMax = -xMin, yMin = xMin, yMax = -xMin;
  for (const Curve& c : curves_) {
    QVector<double> xs, ys;
    for (qsizetype i = 0; i < std::min(c.x.size(), c.y.size()); ++i) {
      const double x = c.x[i], y = c.y[i];
      if (!std::isfinite(x) || !std::isfinite(y) || (logX_ && x <= 0) || (logY_ && y <= 0)) continue;
      xs.push_back(x);
      ys.push_back(y);
      xMin = std::min(xMin, x);
      xMax = std::max(xMax, x);
      yMin = std::min(yMin, y);
      yMax = std::max(yMax, y);
    }
    QCPGraph* graph = plot_->addGraph();
    graph->setName(c.name);
    graph->setData(xs, ys);
    QPen pen(c.color, c.dashed ? 1.5 : 2.2);
    if (c.dashed) pen.setStyle(Qt::DashLine);
    graph->setPen(pen);
    if (c.markers) {
      graph->setLineStyle(QCPGraph::lsNone);
      graph->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDiamond, c.color, c.color, 9));
    }
  }
  if (xMin <= xMax) {
    plot_->xAxis->setRange(logX_ ? xMin / 1.2 : xMin, logX_ ? xMax * 1.2 : xMax);
    plot_->yAxis->setRange(logY_ ? yMin / 1.5 : 0, logY_ ? yMax * 1.5 : yMax * 1.08);
  }
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

QString XyCurvesWidget::toolTipAtX(double x) const {
  QStringList lines;
  for (const Curve& c : curves_) {
    qsizetype best = -1;
    double bestDistance = std::numeric_limits<double>::infinity();
    for (qsizetype i = 0; i < std::min(c.x.size(), c.y.size()); ++i) {
      if (!std::isfinite(c.y[i])) continue;
      const double d = logX_ && c.x[i] > 0 && x > 0 ? std::abs(std::log(c.x[i] / x)) : std::abs(c.x[i] - x);
      if (d < bestDistance) {
        bestDistance = d;
        best = i;
      }
    }
    if (best >= 0) lines << tr("%1 at %2: %3").arg(c.name).arg(c.x[best]).arg(formatY_(c.y[best]));
  }
  return lines.join(QLatin1Char('\n'));
}

}  // namespace routelab
