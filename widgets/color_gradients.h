// QCustomPlot colour gradients built from widgets/color_maps.h, shared by the heat-map widget and the figure
// renderer so that screen and exported figures use the same colour map.
#pragma once
#include "widgets/color_maps.h"
#include "widgets/qcustomplot_include.h"

namespace routelab {

/// Viridis as a 256-level QCustomPlot gradient; NaN cells are transparent.
inline QCPColorGradient viridisGradient() {
  QCPColorGradient gradient;
  gradient.clearColorStops();
  for (int i = 0; i <= 8; ++i) gradient.setColorStopAt(i / 8.0, viridis(i / 8.0));
  gradient.setNanHandling(QCPColorGradient::nhTransparent);
  gradient.setLevelCount(256);
  return gradient;
}

}  // namespace routelab
