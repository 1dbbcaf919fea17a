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

}  // namespace routelab
