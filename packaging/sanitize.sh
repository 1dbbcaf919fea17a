#!/usr/bin/env bash
# RouteLab's own code under GCC's AddressSanitizer and UndefinedBehaviorSanitizer (-DROUTELAB_SANITIZE): builds the
# core, the CLI and the core suites into ./build-sanitize (`--torch pip`: against the pinned LibTorch 2.x into
# ./build-sanitize-pip, its CUDA code compiled, the suites run on the CPU; ROUTELAB_BUILD_DIR overrides) and runs the
# core suites there; a sanitizer's report fails the suite that made it. `--gui` builds the GUI too and runs every
# suite (on Qt's offscreen platform). Not part of the README's test command: an instrumented build takes longer than a
# plain one. Run it after changing RouteLab's kernels, readers and parsers. Other arguments go to ctest (e.g.
# -R test_shards).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/packaging/torch-choice.sh"
gui=OFF
suites=(-L core)
ctest_args=()
for arg in ${routelab_args[@]+"${routelab_args[@]}"}; do
  if [ "$arg" = --gui ]; then gui=ON; suites=(); else ctest_args+=("$arg"); fi
done
suffix=""
if [ "$routelab_torch" = pip ]; then suffix=-pip; fi
build="${ROUTELAB_BUILD_DIR:-$root/build-sanitize$suffix}"
ROUTELAB_BUILD_DIR="$build" bash "$root/packaging/build.sh" --torch "$routelab_torch" -DCMAKE_CXX_FLAGS=-g1 \
  -DROUTELAB_BUILD_GUI=$gui -DROUTELAB_SANITIZE=address,undefined
# Every report, a leak at exit included (LeakSanitizer), stops the process with a non-zero status and its stack;
# ASAN_OPTIONS=detect_leaks=0 in the environment leaves leaks unchecked.
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:exitcode=86${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
ubsan="halt_on_error=1:print_stacktrace=1:suppressions=$root/packaging/ubsan.supp"
export UBSAN_OPTIONS="$ubsan${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export QT_QPA_PLATFORM=offscreen
ctest --test-dir "$build" --output-on-failure --timeout 1800 ${suites[@]+"${suites[@]}"} \
  ${ctest_args[@]+"${ctest_args[@]}"}
