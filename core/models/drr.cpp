// PLACEHOLDER (being written): Depth Routing Residuals.
#include "core/models/drr.h"

#include "core/util/errors.h"

namespace routelab {

ArchitectureEntry drr_architecture() {
  ArchitectureEntry e;
  e.id = "drr";
  e.display_name = "Depth Routing Residuals";
  e.check = [](const nlohmann::json&, const std::string&) {};
  e.create = [](const nlohmann::json&, const ModelContext&) -> std::shared_ptr<LanguageModel> {
    throw ConfigError("drr is not built yet");
  };
  return e;
}

}  // namespace routelab
