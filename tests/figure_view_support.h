// For GUI tests of figure panels: whether a QCustomPlot drawn by the figure renderer (ui/figure_render.h) holds a
// figure's numbers.
#pragma once
#include <cmath>

#include "core/report/figure/figure.h"
#include "tests/store_test_support.h"
#include "widgets/qcustomplot_include.h"

namespace test {

/// Whether the plot on screen holds the figure's numbers: each bar member's finite values as a QCPBars, each heat
/// map's colour values cell by cell, a graph per line series (the figure renderer, ui/figure_render.h).
inline bool screenShowsFigure(QCustomPlot* plot, const routelab::Figure& figure) {
  QList<QCPBars*> bars;
  QList<QCPColorMap*> maps;
  for (int i = 0; i < plot->plottableCount(); ++i) {
    if (auto* b = qobject_cast<QCPBars*>(plot->plottable(i))) bars << b;
    if (auto* m = qobject_cast<QCPColorMap*>(plot->plottable(i))) maps << m;
  }
  qsizetype nextBars = 0, nextMap = 0;
  std::size_t lines = 0;
  for (const auto& panel : figure.panels) {
    lines += panel.series.size();
    for (const auto& member : panel.bars.members) {
      if (nextBars >= bars.size()) return false;
      const auto* data = bars[nextBars++]->data().data();
      int k = 0;
      for (double v : member.values)
        if (std::isfinite(v) && (k >= data->size() || data->at(k++)->value != v)) return false;
      if (k != data->size()) return false;
    }
    const auto& h = panel.heatmap;
    if (h.values.empty()) continue;
    if (nextMap >= maps.size()) return false;
    QCPColorMapData* cells = maps[nextMap++]->data();
    for (std::size_t r = 0; r < h.rows; ++r)
      for (std::size_t c = 0; c < h.cols; ++c)
        if (!routelab::test::same(cells->cell(static_cast<int>(c), static_cast<int>(r)), h.colour_value(r, c))) return false;
  }
  return nextBars == bars.size() && nextMap == maps.size() && static_cast<std::size_t>(plot->graphCount()) >= lines;
}

}  // namespace test
