// Nearest-point readouts over QCustomPlot graphs.
#include "widgets/plot_hover.h"

#include <QMouseEvent>
#include <QToolTip>

#include <cmath>
#include <limits>

#include "widgets/qcustomplot_include.h"

namespace routelab {
namespace {

/// 12345 -> "12345", 0.123456 -> "0.1235", 1.5e-7 -> "1.5e-07": enough digits to read a curve.
QString number(double v) {
  if (std::isfinite(v) && v == std::round(v) && std::abs(v) < 1e12) return QString::number(static_cast<qint64>(v));
  return QString::number(v, 'g', 4);
}

}  // namespace

QString plotReadoutAt(const QCustomPlot* plot, const QPointF& pixel, double radius) {
  double best = radius * radius;
  QString readout;
  for (int g = 0; g < plot->graphCount(); ++g) {
    const QCPGraph* graph = plot->graph(g);
    if (!graph->visible() || graph->data()->isEmpty()) continue;
    const QCPAxis* x = graph->keyAxis();
    const QCPAxis* y = graph->valueAxis();
    if (!graph->keyAxis()->axisRect()->rect().contains(pixel.toPoint())) continue;
    // Points are sorted by key: look near the key under the cursor, widening to the radius in pixels.
    const double k0 = x->pixelToCoord(pixel.x() - radius), k1 = x->pixelToCoord(pixel.x() + radius);
    auto it = graph->data()->findBegin(std::min(k0, k1), true);
    const auto end = graph->data()->findEnd(std::max(k0, k1), true);
    for (; it != end; ++it) {
      if (!std::isfinite(it->value)) continue;
      const double dx = x->coordToPixel(it->key) - pixel.x(), dy = y->coordToPixel(it->value) - pixel.y();
      const double d2 = dx * dx + dy * dy;
      if (d2 > best) continue;
      best = d2;
      // A legend may show a shortened name; the readout says the whole one ("fullName", where the renderer kept it).
      const QString full = graph->property("fullName").toString();
      const QString series = !full.isEmpty()         ? full
                             : graph->name().isEmpty() ? QObject::tr("series %1").arg(g + 1)
                                                       : graph->name();
      const QString xl = x->label().isEmpty() ? QStringLiteral("x") : x->label();
      const QString yl = y->label().isEmpty() ? QStringLiteral("y") : y->label();
      readout = QStringLiteral("%1\n%2 %3 · %4 %5").arg(series, xl, number(it->key), yl, number(it->value));
    }
  }
  return readout;
}

void installPlotHoverReadout(QCustomPlot* plot) {
  plot->setMouseTracking(true);
  QObject::connect(plot, &QCustomPlot::mouseMove, plot, [plot](QMouseEvent* event) {
    const QString text = plotReadoutAt(plot, event->position());
    if (text.isEmpty()) QToolTip::hideText();
    else QToolTip::showText(event->globalPosition().toPoint(), text, plot);
  });
}

}  // namespace routelab
