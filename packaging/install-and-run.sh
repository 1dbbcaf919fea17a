#!/usr/bin/env bash
# README command 1: installs every dependency, builds RouteLab (Release) and runs the main job on the embedded
# default: the GUI with the quick-start experiment ready when a display exists, otherwise the CLI trains the
# quick-start preset on the King James Bible corpus and prints where the run was stored.
# `--torch pip` builds against the pinned LibTorch 2.x with CUDA (PyPI's wheel, in .venv-torch) instead of Debian's
# LibTorch 1.13 (CPU); other arguments go to `routelab-cli train` (e.g. --set run.device=cuda).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/packaging/torch-choice.sh"
bash "$root/packaging/install-deps.sh" --torch "$routelab_torch"
if [ "$routelab_torch" = pip ]; then
  build="${ROUTELAB_BUILD_DIR:-$root/build-pip}"
else
  build="${ROUTELAB_BUILD_DIR:-$root/build}"
fi
ROUTELAB_BUILD_DIR="$build" bash "$root/packaging/build.sh" --torch "$routelab_torch"
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] && [ -x "$build/app/routelab" ]; then
  echo "routelab: opening the GUI with the quick-start experiment selected"
  exec "$build/app/routelab" --preset quickstart
fi
echo "routelab: no display; training the quick-start preset with routelab-cli"
exec "$build/app/routelab-cli" train --preset quickstart "${routelab_args[@]}"
