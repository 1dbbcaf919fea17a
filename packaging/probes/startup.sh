#!/usr/bin/env bash
# Probe: how long a routelab-cli command takes to start, through the launcher (routelab-cli: LibTorch loads once)
# and through its program started directly (routelab-cli-bin, which restarts itself with the same variables and so
# loads LibTorch twice: the command as it was before the launcher). Interleaved, the median of N each; prints both and
# their ratio. Usage: bash packaging/probes/startup.sh [build folder] [N] [command ...] (default build, 9,
# architectures).
set -euo pipefail
build="${1:-build}"
n="${2:-9}"
shift $(($# < 2 ? $# : 2))
command=("$@")
[ ${#command[@]} -gt 0 ] || command=(architectures)
median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
seconds() {  # wall seconds of one start of $1 with the command, output dropped
  local start end
  start=$(date +%s%N)
  env -u OMP_WAIT_POLICY -u ROUTELAB_RELAUNCHED -u OPENBLAS_CORETYPE -u ROUTELAB_OPENBLAS_CHOSE \
    "$1" "${command[@]}" > /dev/null
  end=$(date +%s%N)
  awk -v ns=$((end - start)) 'BEGIN {printf "%.3f\n", ns / 1e9}'
}
launcher=() program=()
for _ in $(seq "$n"); do
  launcher+=("$(seconds "$build/app/routelab-cli")")
  program+=("$(seconds "$build/app/routelab-cli-bin")")
done
l=$(printf '%s\n' "${launcher[@]}" | median)
p=$(printf '%s\n' "${program[@]}" | median)
echo "routelab-cli ${command[*]}: launcher ${l} s, program restarting itself ${p} s (median of $n, interleaved);" \
  "ratio $(awk -v p="$p" -v l="$l" 'BEGIN {printf "%.2f", p / l}')x"
