// GroupedBarsWidget: one QCPBars per series in a QCPBarsGroup, a text ticker for the groups, a dashed QCPGraph
// for the reference level.
#include "widgets/captioned_layout.h"
#include "widgets/grouped_bars_widget.h"

#include <QLabel>
#include <QToolTip>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

#include "widgets/plot_export.h"
#include "widgets/plot_theme.h"
#include "widgets/qcustomplot_include.h"

namespace routelab {

GroupedBarsWidget::GroupedBarsWidget(QWidget* parent) : QWidget(parent) {
  plot_ = new QCustomPlot(this);
  addExportMenu(plot_, this);
  followPalette(plot_);  // dark plots under a dark palette; exports stay black on white
  plot_->setMinimumSize(220, 150);
  putLegendAbove(plot_, this, 4);
  plot_->setMouseTracking(true);
  group_ = new QCPBarsGroup(plot_);
  group_->setSpacingType(QCPBarsGroup::stAbsolute);
  group_->setSpacing(1);
  caption_ = addCaptionAbove(this, plot_);
  connect(plot_, &QCustomPlot::mouseMove, this, [this](QMouseEvent* event) {
    const int group = static_cast<int>(std::lround(plot_->xAxis->pixelToCoord(event->position().x()))) - 1;
    const QString text = toolTipForGroup(group);
    if (text.isEmpty()) QToolTip::hideText();
    else QToolTip::showText(event->globalPosition().toPoint(), text, plot_);
  });
}

GroupedBarsWidget::~GroupedBarsWidget() = default;

void GroupedBarsWidget::setBars(const QStringList& groups, const QVector<Series>& series, const QString& yLabel) {
  groups_ = groups;
  series_ = series;
  yLabel_ = yLabel;
  rebuild();
}

void GroupedBarsWidget::setReference(double level, const QString& name) {
  hasReference_ = std::isfinite(level);
  reference_ = level;
  referenceName_ = name;
  rebuild();
}

void GroupedBarsWidget::setCaption(const QString& caption) {
  caption_->setText(caption);
  caption_->setVisible(!caption.isEmpty());
}

QString GroupedBarsWidget::caption() const { return caption_->text(); }

QString GroupedBarsWidget::toolTipForGroup(int index) const {
  if (index < 0 || index >= groups_.size()) return {};
  QStringList lines{groups_[index]};
  for (const Series& s : series_) {
    const double v = s.values.value(index, std::nan(""));
    if (std::isfinite(v)) lines << tr("%1: %2").arg(s.name).arg(v, 0, 'g', 4);
  }
  if (hasReference_) lines << tr("%1: %2").arg(referenceName_).arg(reference_, 0, 'g', 4);
  return lines.join(QLatin1Char('\n'));
}

void GroupedBarsWidget::rebuild() {
  plot_->clearPlottables();
  const int n = static_cast<int>(series_.size());
  const double width = n > 0 ? 0.8 / n : 0.8;
  double yMax = hasReference_ ? reference_ : 0;
  QVector<double> keys;
  for (int g = 0; g < groups_.size(); ++g) keys.push_back(g + 1);
  for (const Series& s : series_) {
    auto* bars = new QCPBars(plot_->xAxis, plot_->yAxis);
    bars->setName(s.name);
    bars->setWidth(width);
    bars->setPen(QPen(s.color.darker(130)));
    bars->setBrush(s.color);
    QVector<double> k, v;
    for (int g = 0; g < groups_.size(); ++g) {
      const double value = s.values.value(g, std::nan(""));
      if (!std::isfinite(value)) continue;
      k.push_back(g + 1);
      v.push_back(value);
      yMax = std::max(yMax, value);
    }
    bars->setData(k, v, true);
    bars->setBarsGroup(group_);
  }
  if (hasReference_ && !groups_.isEmpty()) {
    QCPGraph* line = plot_->addGraph();
    line->setName(referenceName_);
    line->setData({0.5, groups_.size() + 0.5}, {reference_, reference_});
    QPen pen(QColor(90, 90, 90), 1.5);
    pen.setStyle(Qt::DashLine);
    line->setPen(pen);
  }
  QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
  for (int g = 0; g < groups_.size(); ++g) ticker->addTick(g + 1, groups_[g]);
  plot_->xAxis->setTicker(ticker);
  plot_->xAxis->setRange(0.5, std::max<qsizetype>(1, groups_.size()) + 0.5);
  plot_->yAxis->setLabel(yLabel_);
  plot_->yAxis->setRange(0, yMax > 0 ? yMax * 1.12 : 1);
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace routelab
