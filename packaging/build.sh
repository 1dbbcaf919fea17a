#!/usr/bin/env bash
# Configures and builds RouteLab (Release, Ninja). `--torch debian` (default): Debian's LibTorch 1.13 into ./build;
# `--torch pip`: the pinned LibTorch 2.x with CUDA from .venv-torch (install-deps.sh --torch pip) into ./build-pip.
# ROUTELAB_BUILD_DIR overrides the folder; other arguments go to CMake's configure step, e.g. -DROUTELAB_BUILD_GUI=OFF.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/packaging/torch-choice.sh"
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release)
if [ "$routelab_torch" = pip ]; then
  build="${ROUTELAB_BUILD_DIR:-$root/build-pip}"
  torch_dir="$("$routelab_venv/bin/python3" -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)" ||
    { echo "routelab: no LibTorch in $routelab_venv: run bash packaging/install-deps.sh --torch pip" >&2; exit 1; }
  # The prefix too: Torch's package finds Caffe2 and its libraries through the standard search paths first, where
  # Debian's LibTorch 1.13 would otherwise win.
  cmake_args+=(-DTorch_DIR="$torch_dir/share/cmake/Torch" -DCMAKE_PREFIX_PATH="$torch_dir")
  # Torch's CMake package needs the CUDA toolkit it was built with (13.0): nvcc and the CUDA libraries to link.
  if [ -x /usr/local/cuda/bin/nvcc ]; then cmake_args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc); fi
else
  build="${ROUTELAB_BUILD_DIR:-$root/build}"
fi
cmake -S "$root" -B "$build" "${cmake_args[@]}" "${routelab_args[@]}"
cmake --build "$build" --parallel "$(nproc)"
