// The seeds' figures as named catalogue entries (DTRNet Figures 1, 3-6; DRR overhead; TAGAT Figures
// 3-4; TSA Figures 2-4; Radial Networks Figures 5-7, 9-10), built from stored runs. figure_catalog() lists them
// after the generic figures. No Qt.
#pragma once
#include <vector>

#include "core/report/builders/catalog.h"

namespace routelab {

/// The seeds' named figures, sorted by name.
std::vector<FigureInfo> paper_figures();

}  // namespace routelab
