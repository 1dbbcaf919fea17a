// PLACEHOLDER (being written): Radial Networks.
#pragma once
#include "core/models/registry.h"

namespace routelab {

ArchitectureEntry radial_architecture();

}  // namespace routelab
