// The resolved config a run was stored with, read once under the run model's error policy (Torch-free).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace routelab {

struct RunRecord;

/// The run's stored config: a JSON object (sections model, data, train, run). A DataError naming `store_path` and
/// the run when the stored text is not JSON or not an object.
nlohmann::json stored_config(const RunRecord& run, const std::string& store_path);

}  // namespace routelab
