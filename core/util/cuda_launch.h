// Kernel launches written once for nvcc and for the CPU emulation that the kernel suite compiles RouteLab's kernels
// against (tests/cuda_emulation/): ROUTELAB_LAUNCH(grid, block, stream, kernel)(arguments...). The kernel comes
// last so that a template's arguments may hold commas.
#pragma once

#ifdef ROUTELAB_CUDA_EMULATION
#define ROUTELAB_LAUNCH(grid, block, stream, ...) \
  (static_cast<void>(stream), ::routelab::emulation::launch((grid), (block), __VA_ARGS__))
#else
#define ROUTELAB_LAUNCH(grid, block, stream, ...) __VA_ARGS__<<<(grid), (block), 0, (stream)>>>
#endif
