#!/usr/bin/env bash
# TSA §3.4 / App. C Table 6: TSA's depth-regulariser sweep lambda in {0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5}
# on the §3.2 char-LM setting (preset tsa-charlm) with the same steps, seed and data, plus the sweep's own dense
# baseline (tsa-charlm-dense); then `compare` of all runs and, per run, the last validation loss, alpha (eq. 6)
# and TLOps saved (eq. 7), both measured in eval mode.
# Usage: experiments/tsa-lambda-sweep.sh [STEPS=5000] [DB=/tmp/routelab-tsa-lambda.db] [EXTRA ARGS to train...]
# STEPS must be at least the presets' 100 warm-up steps.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cli="${ROUTELAB_CLI:-$here/../build/app/routelab-cli}"
steps="${1:-5000}"
db="${2:-/tmp/routelab-tsa-lambda.db}"
shift $(( $# > 2 ? 2 : $# ))

run_id() { sed -n 's/^run \([0-9]*\) .*/\1/p' | head -1; }
# The last value of a stored metric (export's CSV: run,key,step,wall_time,value).
last_metric() { "$cli" export "$1" --db "$db" --format csv | awk -F, -v k="$2" '$2 == k { v = $5 } END { print (v == "" ? "-" : v) }'; }

ids=()
labels=()
out="$("$cli" train --preset tsa-charlm-dense --steps "$steps" --db "$db" --seed 1 --quiet "$@" 2>/dev/null)"
echo "$out" | head -1
ids+=("$(run_id <<<"$out")")
labels+=("dense")
for lambda in 0 0.001 0.005 0.01 0.05 0.1 0.5; do
  out="$("$cli" train --preset tsa-charlm --steps "$steps" --db "$db" --seed 1 --quiet --name "tsa-lambda-$lambda" \
    --set "model.depth_coeff=$lambda" "$@" 2>/dev/null)"
  echo "$out" | head -1
  ids+=("$(run_id <<<"$out")")
  labels+=("$lambda")
done
"$cli" compare "${ids[@]}" --db "$db"
echo
printf '| lambda | run | val loss | alpha | TLOps saved |\n|---|---|---|---|---|\n'
for i in "${!ids[@]}"; do
  id="${ids[$i]}"
  printf '| %s | %s | %s | %s | %s |\n' "${labels[$i]}" "$id" "$(last_metric "$id" val/loss)" \
    "$(last_metric "$id" val/alpha)" "$(last_metric "$id" val/tlops_saved)"
done
