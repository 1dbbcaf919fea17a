// The seeds' named figures as one list: each seed's entries come from its own file (dtrnet_figures.cpp ..
// radial_figures.cpp, built on the helpers of paper_figure_detail.h), merged and sorted by name.
#include "core/report/builders/papers/paper_figures.h"

#include <algorithm>
#include <utility>

#include "core/report/builders/papers/paper_detail.h"

namespace routelab {

std::vector<FigureInfo> paper_figures() {
  std::vector<FigureInfo> out;
  for (auto* family : {figure_detail::dtrnet_figures, figure_detail::drr_figures, figure_detail::tagat_figures,
                       figure_detail::tsa_figures, figure_detail::radial_figures})
    for (auto& f : family()) out.push_back(std::move(f));
  std::sort(out.begin(), out.end(), [](const FigureInfo& a, const FigureInfo& b) { return a.name < b.name; });
  return out;
}

}  // namespace routelab
