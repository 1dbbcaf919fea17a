// PLACEHOLDER (being written): Early exit.
#pragma once
#include "core/models/registry.h"

namespace routelab {

ArchitectureEntry early_exit_architecture();

}  // namespace routelab
