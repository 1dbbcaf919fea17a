// PLACEHOLDER (being written): Token-Selective Attention.
#include "core/models/tsa.h"

#include "core/util/errors.h"

namespace routelab {

ArchitectureEntry tsa_architecture() {
  ArchitectureEntry e;
  e.id = "tsa";
  e.display_name = "Token-Selective Attention";
  e.check = [](const nlohmann::json&, const std::string&) {};
  e.create = [](const nlohmann::json&, const ModelContext&) -> std::shared_ptr<LanguageModel> {
    throw ConfigError("tsa is not built yet");
  };
  return e;
}

}  // namespace routelab
