#!/usr/bin/env bash
# README command 2 (and .ci/run): installs the dependencies, builds everything and runs the whole test suite
# through ctest. GUI suites run on Qt's offscreen platform; suites are run one at a time (each uses every core).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/packaging/install-deps.sh"
bash "$root/packaging/build.sh"
build="${ROUTELAB_BUILD_DIR:-$root/build}"
export QT_QPA_PLATFORM=offscreen
ctest --test-dir "$build" --output-on-failure --timeout 900
