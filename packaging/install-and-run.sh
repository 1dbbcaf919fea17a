#!/usr/bin/env bash
# README command 1: installs every dependency from Debian's packages, builds RouteLab (Release) and runs the main
# job on the embedded default: the GUI with the quick-start experiment ready when a display exists, otherwise the
# CLI trains the quick-start preset on the King James Bible corpus and prints where the run was stored.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/packaging/install-deps.sh"
bash "$root/packaging/build.sh"
build="${ROUTELAB_BUILD_DIR:-$root/build}"
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then
  echo "routelab: opening the GUI with the quick-start experiment selected"
  exec "$build/app/routelab" --preset quickstart
fi
echo "routelab: no display; training the quick-start preset with routelab-cli"
exec "$build/app/routelab-cli" train --preset quickstart "$@"
