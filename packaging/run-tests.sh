#!/usr/bin/env bash
# README command 2 (and .ci/run): installs the dependencies, then builds and tests RouteLab against both LibTorch
# builds: Debian's LibTorch 1.13 (everything, GUI suites on Qt's offscreen platform) and the pinned LibTorch 2.x with
# CUDA from PyPI (core, CLI and the core suites, run on the CPU; its CUDA code paths compiled and linked).
# `--torch debian` or `--torch pip` runs one of the two only. Suites run one at a time (each uses every core).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
which_torch="both"
for arg in "$@"; do
  case "$arg" in
    --torch=*) which_torch="${arg#--torch=}" ;;
    debian|pip) which_torch="$arg" ;;
    --torch) ;;
    *) echo "routelab: run-tests.sh takes only --torch debian|pip" >&2; exit 2 ;;
  esac
done
export QT_QPA_PLATFORM=offscreen
started=$SECONDS
step() { echo "routelab: [$((SECONDS - started)) s] $*"; }

if [ "$which_torch" = pip ] || [ "$which_torch" = both ]; then
  bash "$root/packaging/install-deps.sh" --torch pip
else
  bash "$root/packaging/install-deps.sh"
fi
if [ "$which_torch" != pip ]; then
  step "build against Debian's LibTorch"
  bash "$root/packaging/build.sh"
  step "test suite (Debian's LibTorch)"
  ctest --test-dir "${ROUTELAB_BUILD_DIR:-$root/build}" --output-on-failure --timeout 900
  # Results must not depend on the thread count: the core suites again with every run on one thread.
  step "core suites again, one thread per run (ROUTELAB_MAX_THREADS=1)"
  ROUTELAB_MAX_THREADS=1 ctest --test-dir "${ROUTELAB_BUILD_DIR:-$root/build}" --output-on-failure --timeout 900 -L core
fi
if [ "$which_torch" != debian ]; then
  step "build against the pinned LibTorch 2.x (pip, CUDA): core, CLI and core suites"
  ROUTELAB_BUILD_DIR="${ROUTELAB_PIP_BUILD_DIR:-$root/build-pip}" bash "$root/packaging/build.sh" --torch pip \
    -DROUTELAB_BUILD_GUI=OFF
  step "core suites (LibTorch 2.x on the CPU)"
  ctest --test-dir "${ROUTELAB_PIP_BUILD_DIR:-$root/build-pip}" --output-on-failure --timeout 900 -L core
fi
step "done"
