#include "core/report/report_ids.h"

namespace routelab {

const std::vector<std::pair<std::string, std::string>>& renamed_ids() {
  static const std::vector<std::pair<std::string, std::string>> ids = {
      // figures
      {"seed000-fig1", "dtrnet-fig1"},
      {"seed000-fig3", "dtrnet-fig3"},
      {"seed000-fig4", "dtrnet-fig4"},
      {"seed000-fig5", "dtrnet-fig5"},
      {"seed000-fig6", "dtrnet-fig6"},
      {"seed001-overhead", "drr-overhead"},
      {"seed002-fig3", "tagat-fig3"},
      {"seed002-fig4", "tagat-fig4"},
      {"seed003-fig2", "tsa-fig2"},
      {"seed003-fig3", "tsa-fig3"},
      {"seed003-fig4", "tsa-fig4"},
      {"seed004-fig5", "radial-fig5"},
      {"seed004-fig6", "radial-fig6"},
      {"seed004-fig7", "radial-fig7"},
      {"seed004-fig9", "radial-fig9"},
      {"seed004-fig10", "radial-fig10"},
      // table layouts
      {"seed000-table1", "dtrnet-table1"},
      {"seed000-table2", "dtrnet-table2"},
      {"seed000-table3", "dtrnet-table3"},
      {"seed000-table4", "dtrnet-table4"},
      {"seed000-table5", "dtrnet-table5"},
      {"seed000-table6", "dtrnet-table6"},
      {"seed001-drr", "drr-summary"},
      {"seed002-summary", "tagat-summary"},
      {"seed002-table1", "tagat-table1"},
      {"seed002-table3", "tagat-table3"},
      {"seed003-table1", "tsa-table1"},
      {"seed003-table2", "tsa-table2"},
      {"seed003-table4", "tsa-table4"},
      {"seed004-depth", "radial-depth"},
      // presets
      {"seed000-dense", "smollm-dense"},
  };
  return ids;
}

std::string current_id(const std::string& id) {
  for (const auto& [before, now] : renamed_ids())
    if (id == before) return now;
  return id;
}

}  // namespace routelab
