#include "widgets/captioned_layout.h"

#include <QLabel>
#include <QVBoxLayout>

#include <algorithm>

#include "widgets/qcustomplot_include.h"

namespace routelab {

QLabel* addCaptionAbove(QWidget* owner, QWidget* body, const QString& text) {
  auto* caption = new QLabel(text, owner);
  caption->setWordWrap(true);
  caption->setVisible(!text.isEmpty());
  auto* layout = new QVBoxLayout(owner);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(2);
  layout->addWidget(caption);
  layout->addWidget(body, 1);
  return caption;
}

void putLegendAbove(QCustomPlot* plot, const QWidget* owner, int wrap) {
  plot->legend->setVisible(true);
  plot->legend->setFont(QFont(owner->font().family(), std::max(7, owner->font().pointSize() - 1)));
  plot->legend->setFillOrder(QCPLegend::foColumnsFirst);
  if (wrap > 0) plot->legend->setWrap(wrap);
  plot->legend->setBorderPen(Qt::NoPen);
  plot->plotLayout()->insertRow(0);
  plot->plotLayout()->addElement(0, 0, plot->legend);
  plot->plotLayout()->setRowStretchFactor(0, 0.001);
}

}  // namespace routelab
