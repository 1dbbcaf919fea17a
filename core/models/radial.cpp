// PLACEHOLDER (being written): Radial Networks.
#include "core/models/radial.h"

#include "core/util/errors.h"

namespace routelab {

ArchitectureEntry radial_architecture() {
  ArchitectureEntry e;
  e.id = "radial";
  e.display_name = "Radial Networks";
  e.check = [](const nlohmann::json&, const std::string&) {};
  e.create = [](const nlohmann::json&, const ModelContext&) -> std::shared_ptr<LanguageModel> {
    throw ConfigError("radial is not built yet");
  };
  return e;
}

}  // namespace routelab
