// ROUTELAB_WITH_CUDA: 1 in the sources CMake compiles against a CUDA LibTorch's CUDA library (core/CMakeLists.txt
// lists them), 0 everywhere else, so a CPU LibTorch build compiles the same files without their CUDA parts.
#pragma once
#ifndef ROUTELAB_WITH_CUDA
#define ROUTELAB_WITH_CUDA 0
#endif
