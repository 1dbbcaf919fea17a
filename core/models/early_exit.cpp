// PLACEHOLDER (being written): Early exit.
#include "core/models/early_exit.h"

#include "core/util/errors.h"

namespace routelab {

ArchitectureEntry early_exit_architecture() {
  ArchitectureEntry e;
  e.id = "early-exit";
  e.display_name = "Early exit";
  e.check = [](const nlohmann::json&, const std::string&) {};
  e.create = [](const nlohmann::json&, const ModelContext&) -> std::shared_ptr<LanguageModel> {
    throw ConfigError("early-exit is not built yet");
  };
  return e;
}

}  // namespace routelab
