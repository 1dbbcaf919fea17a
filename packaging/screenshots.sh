#!/usr/bin/env bash
# Makes every screenshot in resources/screenshots/ again from nothing: trains the runs they show into fresh stores
# with routelab-cli, then opens the real GUI under Xvfb once per screenshot (a fresh settings folder each time, so
# neither the user's remembered layout nor an earlier shot's shows) and lets it grab its window or one tab
# (ROUTELAB_SCREENSHOT*, app/gui_main.cpp). Needs a GUI build (./build, or ROUTELAB_BUILD_DIR) and xvfb-run; about
# 25 minutes on two cores, most of it training. Usage: bash packaging/screenshots.sh [OUT_DIR] (default
# resources/screenshots); ROUTELAB_SHOTS=dashboard-dtrnet,figure-dtrnet-fig5 makes only those;
# ROUTELAB_SHOTS_STORES=DIR keeps the stores there and trains none whose store is there already (shots again after a
# GUI change). Look at every file before committing it: a shot taken before its data arrived shows empty panels.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ROUTELAB_BUILD_DIR:-$root/build}"
cli="$build/app/routelab-cli"
gui="$build/app/routelab"
out="$(mkdir -p "${1:-$root/resources/screenshots}" && cd "${1:-$root/resources/screenshots}" && pwd)"
for program in "$cli" "$gui"; do
  [ -x "$program" ] || { echo "screenshots.sh: $program is missing: build with the GUI first" >&2; exit 2; }
done
command -v xvfb-run > /dev/null || { echo "screenshots.sh: xvfb-run is missing (apt install xvfb)" >&2; exit 2; }
work="$(mktemp -d -t routelab-screenshots.XXXXXX)"
trap 'rm -rf "$work"' EXIT
stores="${ROUTELAB_SHOTS_STORES:-$work}"
mkdir -p "$stores"
stores="$(cd "$stores" && pwd)"
export ROUTELAB_HOME="$stores/home"  # the corpus, logs and the default store stay out of the user's data folder
cd "$root"                         # presets name their corpus relative to the checkout

wanted() { [ -z "${ROUTELAB_SHOTS:-}" ] || [[ ",$ROUTELAB_SHOTS," == *",$1,"* ]]; }

train() {  # train STORE PRESET STEPS SEED [more train options]; SEED - keeps the preset's (the run's name unsuffixed)
  local store=$1 preset=$2 steps=$3 seed=$4 seeds=()
  shift 4
  [ "$seed" = - ] || seeds=(--seed "$seed")
  echo "screenshots.sh: training $preset ($steps steps, seed $seed) into $(basename "$store")"
  "$cli" --log-level warn train --db "$store" --preset "$preset" --steps "$steps" ${seeds[@]+"${seeds[@]}"} --quiet "$@"
}

# shot NAME WxH TARGET WAIT_S [ENV=VALUE ...] -- GUI ARGUMENTS: the window (TARGET window) or one of its tabs
# (dashboard, compare, inspector) at a window of WxH on a screen of the same size, WAIT_S seconds after start-up.
# COMPARE_X/COMPARE_FIGURE/COMPARE_TABLE/COMPARE_METRIC in the ENV part become the Compare view's remembered choices.
shot() {
  local name=$1 size=$2 target=$3 wait_s=$4
  shift 4
  wanted "$name" || { while [ "$1" != -- ]; do shift; done; return 0; }
  local config="$work/config-$name" envs=() compare=()
  while [ "$1" != -- ]; do
    case "$1" in
      COMPARE_X=*) compare+=("x=${1#*=}") ;;
      COMPARE_FIGURE=*) compare+=("figure=${1#*=}") ;;
      COMPARE_TABLE=*) compare+=("table=${1#*=}") ;;
      COMPARE_METRIC=*) compare+=("metric=${1#*=}") ;;
      *) envs+=("$1") ;;
    esac
    shift
  done
  shift
  mkdir -p "$config/RouteLab"
  if [ ${#compare[@]} -gt 0 ]; then printf '[compare]\n%s\n' "${compare[@]}" > "$config/RouteLab/RouteLab.conf"; fi
  [ "$target" = window ] && target=""
  rm -f "$out/$name.png"
  echo "screenshots.sh: $name ($size, ${target:-window}, after $wait_s s)"
  env XDG_CONFIG_HOME="$config" ROUTELAB_WINDOW_SIZE="$size" ROUTELAB_SCREENSHOT="$out/$name.png" \
    ROUTELAB_SCREENSHOT_TARGET="$target" ROUTELAB_SCREENSHOT_AFTER_MS=$((wait_s * 1000)) ${envs[@]+"${envs[@]}"} \
    xvfb-run -a -s "-screen 0 ${size}x24" "$gui" "$@" > "$work/$name.log" 2>&1 || true
  [ -s "$out/$name.png" ] || { echo "screenshots.sh: $name was not saved; its log:" >&2; cat "$work/$name.log" >&2; exit 1; }
}

# trained NAME: whether the stores folder holds group NAME's store whole (else what an interrupted run left is removed).
trained() {
  [ -e "$stores/$1.trained" ] && return 0
  rm -rf "$stores/$1.sqlite" "$stores/$1.sqlite-wal" "$stores/$1.sqlite-shm" "$stores/checkpoints/$1"
  return 1
}
# The window: a DTRNet quick-start run, its dense twin and a second DTRNet seed; then a subword twin of the dense
# run for the inspector's subword-versus-characters shot (the tokenizer trained on the corpus the first run wrote).
window="$stores/window.sqlite"
if ! trained window; then
  train "$window" quickstart-dtrnet 400 -
  train "$window" quickstart 400 -
  train "$window" quickstart-dtrnet 400 2
  "$cli" --log-level warn tokenizer train --corpus "$ROUTELAB_HOME/corpora/kjv.txt" --vocab 2000 \
    --out "$stores/kjv-bpe2k.model" --quiet
  train "$window" quickstart 400 - --name quickstart-bpe2k --set data.tokenizer=sentencepiece \
    --set "data.tokenizer_model=$stores/kjv-bpe2k.model"
  touch "$stores/window.trained"
fi
# The panels: the DTRNet paper's presets at the CPU scale (dense with two seeds), Radial Networks and TAGAT.
panels="$stores/panels.sqlite"
if ! trained panels; then
  train "$panels" smollm-dense 200 1
  train "$panels" smollm-dense 200 2
  train "$panels" dtrnet-bilayer 200 1
  train "$panels" mod-0.7 200 1
  train "$panels" dllm-0.85 200 1
  train "$panels" radial 300 1
  train "$panels" tagat-balanced 300 2
  touch "$stores/panels.trained"
fi

verse="And God said, Let there be light: and there was light."
for size in 1280x720 1920x1080; do
  shot "window-$size-dashboard" $size window 15 -- --db "$window" --dashboard 1
  shot "window-$size-overview" $size window 15 -- --db "$window" --select 1,3,2
  shot "window-$size-compare" $size window 20 COMPARE_X=flops COMPARE_TABLE=dtrnet-table1 -- --db "$window" \
    --compare 1,2,3
done
shot window-1280x720-dashboard-tokens 1280x720 window 15 ROUTELAB_SCREENSHOT_TAB="Tokens and cost" -- \
  --db "$window" --dashboard 1
shot window-1280x720-inspector 1280x720 window 25 -- --db "$window" --inspect 1 --inspect-with 2 \
  --inspect-text "$verse"
shot window-1280x720-designer 1280x720 window 10 ROUTELAB_SCREENSHOT_RAISE=designerDock -- --db "$window"
shot inspector-subword-vs-char 1920x1080 inspector 25 -- --db "$window" --inspect 4 --inspect-with 2 \
  --inspect-text "$verse"
shot window-1920x1080-sweep-queue 1920x1080 window 40 -- --db "$work/sweep.sqlite" \
  --sweep experiments/sweeps/tsa-lambda.json

shot dashboard-dtrnet 1920x1080 dashboard 15 -- --db "$panels" --dashboard 3
shot dashboard-dllm 1920x1080 dashboard 15 -- --db "$panels" --dashboard 5
shot dashboard-radial 1920x1080 dashboard 15 -- --db "$panels" --dashboard 6
shot dashboard-tagat 1920x1080 dashboard 15 -- --db "$panels" --dashboard 7
shot dashboard-tagat-metrics 1920x1080 dashboard 15 ROUTELAB_SCREENSHOT_TAB=Metrics -- --db "$panels" --dashboard 7
shot compare-view 1920x1080 compare 25 COMPARE_X=flops COMPARE_TABLE=dtrnet-table1 COMPARE_METRIC=train/loss -- \
  --db "$panels" --compare 1,2,3,4,5
shot token-inspector 1920x1080 inspector 25 -- --db "$panels" --inspect 3 --inspect-with 4 --inspect-text "$verse"
shot inspector-dllm-threshold 1920x1080 inspector 25 -- --db "$panels" --inspect 5 --inspect-with 5 \
  --inspect-with-options "threshold=0.2" --inspect-colour decision --inspect-text "$verse"
if wanted figure-dtrnet-fig5; then
  echo "screenshots.sh: figure-dtrnet-fig5 (routelab-cli figure, 8.5 x 6 cm at 200 dpi)"
  "$cli" --log-level warn figure dtrnet-fig5 --db "$panels" --runs 3 4 5 --dpi 200 --out "$work/figure-dtrnet-fig5.png"
  cp "$work/figure-dtrnet-fig5.png" "$out/figure-dtrnet-fig5.png"
fi
echo "screenshots.sh: written to $out"
