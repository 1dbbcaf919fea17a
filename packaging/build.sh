#!/usr/bin/env bash
# Configures and builds RouteLab (Release, Ninja) into ./build. Extra arguments go to CMake's configure step,
# e.g. -DROUTELAB_BUILD_GUI=OFF or -DTorch_DIR=/path/to/libtorch/share/cmake/Torch for a CUDA LibTorch.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ROUTELAB_BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build" --parallel "$(nproc)"
