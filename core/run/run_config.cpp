#include "core/run/run_config.h"

#include "core/store/run_store.h"
#include "core/util/errors.h"

namespace routelab {

nlohmann::json stored_config(const RunRecord& run, const std::string& store_path) {
  const std::string where = store_path + ": run " + std::to_string(run.id) + " (" + run.name + ")";
  auto doc = nlohmann::json::parse(run.config_json, nullptr, false);
  if (doc.is_discarded()) throw DataError(where + ": its stored config is not JSON");
  if (!doc.is_object())
    throw DataError(where + ": its stored config is a " + std::string(doc.type_name()) + ", not an object");
  return doc;
}

std::int64_t sequences_per_step(const nlohmann::json& config) {
  const auto train = config.contains("train") ? config.at("train") : nlohmann::json();
  const auto integer = [&](const char* key) -> std::int64_t {
    if (!train.is_object() || !train.contains(key) || !train.at(key).is_number_integer())
      throw DataError(std::string("the stored config has no integer train.") + key);
    return train.at(key).get<std::int64_t>();
  };
  return integer("batch_size") * (train.is_object() && train.contains("grad_accum") ? integer("grad_accum") : 1);
}

}  // namespace routelab
