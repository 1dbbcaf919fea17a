#!/usr/bin/env bash
# DTRNet's comparison at CPU scale: dense, DTRNet Bilayer, MoD (c 0.7) and D-LLM (Omega 0.85) trained with the
# same step budget, seed and data, then their last evaluations side by side (val loss, FLOPs ratio from the
# measured inference-mode routing, routed % per layer).
# Usage: experiments/dtrnet-compare.sh [STEPS=600] [DB=/tmp/routelab-dtrnet.db] [EXTRA --set ARGS...]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cli="${ROUTELAB_CLI:-$here/../build/app/routelab-cli}"
steps="${1:-600}"
db="${2:-/tmp/routelab-dtrnet.db}"
shift $(( $# > 2 ? 2 : $# ))
ids=()
for preset in smollm-dense dtrnet-bilayer mod-0.7 dllm-0.85; do
  out="$("$cli" train --preset "$preset" --steps "$steps" --db "$db" --seed 1 --quiet "$@" 2>/dev/null)"
  ids+=("$(sed -n 's/^run \([0-9]*\) .*/\1/p' <<<"$out" | head -1)")
  echo "$out" | head -1
done
"$cli" compare "${ids[@]}" --db "$db"
