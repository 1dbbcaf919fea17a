#include "widgets/plot_theme.h"

#include <QEvent>
#include <QObject>

#include "widgets/qcustomplot_include.h"

namespace routelab {
namespace {

constexpr const char* kFollowsPalette = "routelabFollowsPalette";

QColor mix(const QColor& a, const QColor& b, double t) {
  return QColor::fromRgbF(static_cast<float>(a.redF() * (1 - t) + b.redF() * t),
                          static_cast<float>(a.greenF() * (1 - t) + b.greenF() * t),
                          static_cast<float>(a.blueF() * (1 - t) + b.blueF() * t));
}

/// Re-applies the theme on every palette change of the plot it is installed on.
class PaletteFollower : public QObject {
 public:
  explicit PaletteFollower(QCustomPlot* plot) : QObject(plot), plot_(plot) {}

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override {
    if (watched == plot_ && event->type() == QEvent::PaletteChange) {
      applyPlotTheme(plot_, plot_->palette());
      plot_->replot(QCustomPlot::rpQueuedReplot);
    }
    return false;
  }

 private:
  QCustomPlot* plot_;
};

}  // namespace

void applyPlotTheme(QCustomPlot* plot, const QPalette& palette) {
  if (plot == nullptr) return;
  const QColor base = palette.color(QPalette::Base), text = palette.color(QPalette::Text);
  const QColor grid = mix(base, text, 0.18), subGrid = mix(base, text, 0.08);
  plot->setBackground(base);
  for (QCPAxisRect* rect : plot->axisRects()) {
    for (QCPAxis* axis : rect->axes()) {
      const auto recolor = [](QPen pen, const QColor& color) {
        pen.setColor(color);
        return pen;
      };
      axis->setBasePen(recolor(axis->basePen(), text));
      axis->setTickPen(recolor(axis->tickPen(), text));
      axis->setSubTickPen(recolor(axis->subTickPen(), text));
      axis->setTickLabelColor(text);
      axis->setLabelColor(text);
      axis->grid()->setPen(recolor(axis->grid()->pen(), grid));
      axis->grid()->setSubGridPen(recolor(axis->grid()->subGridPen(), subGrid));
      if (axis->grid()->zeroLinePen().style() != Qt::NoPen)
        axis->grid()->setZeroLinePen(recolor(axis->grid()->zeroLinePen(), grid));
    }
  }
  if (plot->legend != nullptr) {
    QColor fill = base;
    fill.setAlpha(220);
    plot->legend->setBrush(fill);
    plot->legend->setTextColor(text);
    plot->legend->setSelectedTextColor(text);
  }
  for (int i = 0; i < plot->plotLayout()->elementCount(); ++i)
    if (auto* element = qobject_cast<QCPTextElement*>(plot->plotLayout()->elementAt(i))) element->setTextColor(text);
}

void followPalette(QCustomPlot* plot) {
  if (plot == nullptr) return;
  applyPlotTheme(plot, plot->palette());
  plot->installEventFilter(new PaletteFollower(plot));
  plot->setProperty(kFollowsPalette, true);
}

bool followsPalette(const QCustomPlot* plot) { return plot != nullptr && plot->property(kFollowsPalette).toBool(); }

QPalette lightPlotPalette() {
  QPalette palette;
  palette.setColor(QPalette::Base, Qt::white);
  palette.setColor(QPalette::Text, Qt::black);
  return palette;
}

bool isDarkPalette(const QPalette& palette) {
  return palette.color(QPalette::Base).lightnessF() < palette.color(QPalette::Text).lightnessF();
}

}  // namespace routelab
