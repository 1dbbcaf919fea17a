// The resolved config a run was stored with, read once under the run model's error policy (Torch-free).
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace routelab {

struct RunRecord;

/// The run's stored config: a JSON object (sections model, data, train, run). A DataError naming `store_path` and
/// the run when the stored text is not JSON or not an object.
nlohmann::json stored_config(const RunRecord& run, const std::string& store_path);

/// Sequences one optimizer step of a stored config trained on: train.batch_size x train.grad_accum (1 for a run
/// stored before accumulation existed). A DataError naming the key where either is missing or not an integer.
std::int64_t sequences_per_step(const nlohmann::json& config);

}  // namespace routelab
