// The seeds' named figures as one list: each seed's entries come from its own file (seed000_figures.cpp ..
// seed004_figures.cpp, built on the helpers of seed_figure_detail.h), merged and sorted by name.
#include "core/report/seed_figures.h"

#include <algorithm>
#include <utility>

#include "core/report/seed_figure_detail.h"

namespace routelab {

std::vector<FigureInfo> seed_figures() {
  std::vector<FigureInfo> out;
  for (auto* family : {figure_detail::seed000_figures, figure_detail::seed001_figures, figure_detail::seed002_figures,
                       figure_detail::seed003_figures, figure_detail::seed004_figures})
    for (auto& f : family()) out.push_back(std::move(f));
  std::sort(out.begin(), out.end(), [](const FigureInfo& a, const FigureInfo& b) { return a.name < b.name; });
  return out;
}

}  // namespace routelab
