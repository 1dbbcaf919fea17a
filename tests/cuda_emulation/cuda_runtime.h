// Stands in for the CUDA toolkit's header when the kernel suite compiles RouteLab's kernels on the CPU.
#pragma once
#include "emulation.h"
