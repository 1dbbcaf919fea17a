// The seeds' figures as named catalogue entries (seed 000 Figures 1, 3-6; seed 001 overhead; seed 002 Figures
// 3-4; seed 003 Figures 2-4; seed 004 Figures 5-7, 9-10), built from stored runs. figure_catalog() lists them
// after the generic figures. No Qt.
#pragma once
#include <vector>

#include "core/report/figures.h"

namespace routelab {

/// The seeds' named figures, sorted by name.
std::vector<FigureInfo> paper_figures();

}  // namespace routelab
