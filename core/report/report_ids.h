// The source papers' figures, tables and presets are named after their methods (DTRNet, DRR, TAGAT, TSA, Radial):
// "dtrnet-fig5", "tsa-table2", "smollm-dense". Their earlier ids ("seed000-fig5", ...) are still accepted where a
// name is looked up, so stored sweep files, scripts and habits keep working; "seed" means a random seed only.
// No Torch, no Qt.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace routelab {

/// Every renamed id: (earlier id, current id).
const std::vector<std::pair<std::string, std::string>>& renamed_ids();
/// The current id of `id`: its new name when it is an earlier one, else `id` itself.
std::string current_id(const std::string& id);

}  // namespace routelab
