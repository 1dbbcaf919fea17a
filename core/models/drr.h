// PLACEHOLDER (being written): Depth Routing Residuals.
#pragma once
#include "core/models/registry.h"

namespace routelab {

ArchitectureEntry drr_architecture();

}  // namespace routelab
