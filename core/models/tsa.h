// PLACEHOLDER (being written): Token-Selective Attention.
#pragma once
#include "core/models/registry.h"

namespace routelab {

ArchitectureEntry tsa_architecture();

}  // namespace routelab
