#!/usr/bin/env bash
# The GPU checks of issue 18 in one call, for a lent GPU machine (../shared/research/gpu-build.md): the fused loss
# kernels against the unfused loss, the training step against the PyTorch 2.x peer at both shapes (fp32, bf16,
# torch.compile; RouteLab eager and replayed as a CUDA graph), the graphed step against the eager one (the same
# losses) and across a resume, exact resume on CUDA with dropout (a run stopped by SIGINT and resumed must repeat the
# uninterrupted run's losses bit for bit), routed forwards against dense at T 2048/4096, D-LLM's chunked training
# attention and its flash form against the materialised one (time and memory at the 360M layer; the flash form's
# training curve against the chunked one's), variable-length flash attention for
# compacted sequences against the padded path (losses and routed training steps), the fused add + norm and rotary
# kernels against LibTorch's ops (losses; the GPT-2-small and 360M steps without them), 360M-parameter training
# throughput (dense eager and graphed), the quick-start run and the data-parallel step in a group of one (NCCL) against
# the plain one, a classifier's (TAGAT) data-parallel run in a group of one; a 360M checkpoint written beside training against one written by the step; GPU time by kernel class for the GPT-2-small bf16 step and for the routed 360M bf16 steps whose
# time/FLOPs quotient is above 1.1; the routed 360M presets' training steps against dense's by part (`bench step`). Every step prints what it measured into one log; a
# step that fails is reported and the next one still runs; steps that no longer fit the time budget are skipped, and
# the log says so.
#
# Usage: bash packaging/gpu-check.sh CLI LOG [PYTHON] [PEER_SCRIPT]
#   CLI     a routelab-cli built against a CUDA LibTorch
#   LOG     the log file (appended)
#   PYTHON  the interpreter with the peer's torch (default python3)
#   PEER    the peer script (default ../shared/tools/pyref2_gpt_step.py)
# Environment: GPU_CHECK_BUDGET_S (seconds for all steps, default 420), GPU_CHECK_PEAK_TFLOPS (bf16 dense peak for
# MFU, default 989: H100/H200 SXM), GPU_CHECK_ONLY (a regular expression: only the steps it matches),
# GPU_CHECK_RESUME_STEPS (default 400), GPU_CHECK_DEVICE (default cuda; cpu rehearses the script), ROUTELAB_HOME
# (corpora; a temporary folder by default), GPU_CHECK_SHARDS (a folder `routelab-cli prepare` wrote with a subword
# tokenizer: the 360M presets train on it too, the seeds' regime; those steps are skipped without it),
# GPU_CHECK_TESTS (the routelab-tests of the same build, default beside CLI: the GPU suite, step core-suite-gpu).
set -uo pipefail
cli="$1"
log="$2"
python="${3:-python3}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
peer="${4:-$root/../shared/tools/pyref2_gpt_step.py}"
budget="${GPU_CHECK_BUDGET_S:-420}"
dev="${GPU_CHECK_DEVICE:-cuda}"
kernels=()  # GPU time by kernel class and the longest kernels, after the timed steps (a GPU's table only)
[[ $dev == cuda* ]] && kernels=(--kernels 25)
peak="${GPU_CHECK_PEAK_TFLOPS:-989}"
work="$(mktemp -d)"
export ROUTELAB_HOME="${ROUTELAB_HOME:-$work/home}" ROUTELAB_EXPERIMENTS="$root/experiments" cli work dev
deadline=$(($(date +%s) + budget))
failed=()

say() { echo "$*" | tee -a "$log"; }

# step NAME SECONDS COMMAND...: runs COMMAND under a timeout of at most SECONDS (less when the budget is nearly spent)
step() {
  local name="$1" limit="$2"
  shift 2
  if [ -n "${GPU_CHECK_ONLY:-}" ] && ! [[ "$name" =~ $GPU_CHECK_ONLY ]]; then return 0; fi
  local left=$((deadline - $(date +%s)))
  if [ "$left" -lt 15 ]; then
    say "=== $name: skipped (budget spent)"
    failed+=("$name(skipped)")
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit="$left"
  say "=== $name (limit ${limit}s): $*"
  local start rc
  start=$(date +%s.%N)
  timeout --signal=INT --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  say "=== $name: rc $rc, $(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $start }") s"
  [ "$rc" -eq 0 ] || failed+=("$name(rc $rc)")
}

# Exact resume on CUDA with dropout and deterministic kernels: an uninterrupted run, then the same run stopped by
# SIGINT once its first checkpoint exists and resumed; the two train/loss and val/loss series must be identical.
# Arguments: a name for its store (default resume), then further settings for both runs.
resume_check() {
  local name="${1:-resume}"
  local db="$work/$name.sqlite"
  local steps="${GPU_CHECK_RESUME_STEPS:-400}"
  local common=(--preset quickstart --device "$dev" --steps "$steps" --set model.dropout=0.1 --set train.deterministic=true
                --set train.eval_every=$((steps / 4)) --set train.checkpoint_every=$((steps / 4)) --set train.log_every=1
                --db "$db" --quiet "${@:2}")
  "$cli" train "${common[@]}" --name full || return 1
  "$cli" train "${common[@]}" --name part &
  local pid=$! waited=0
  until ls "$work/checkpoints/$name/run-2/"* > /dev/null 2>&1 || [ "$waited" -gt 600 ]; do
    sleep 0.05
    waited=$((waited + 1))
  done
  sleep "${GPU_CHECK_STOP_DELAY_S:-0.7}"
  kill -INT "$pid"
  wait "$pid"
  echo "part ended with rc $? (stopped by SIGINT)"
  "$cli" show 2 --db "$db" | head -12
  "$cli" resume 2 --db "$db" --quiet || return 1
  "$cli" show 2 --db "$db" | grep -i -E "status|resumed" || true
  for key in train/loss val/loss; do
    "$cli" export 1 --db "$db" | grep ",$key," | cut -d, -f2,3,5 > "$work/a.csv"
    "$cli" export 2 --db "$db" | grep ",$key," | cut -d, -f2,3,5 > "$work/b.csv"
    echo "$key: $(wc -l < "$work/a.csv") values uninterrupted, $(wc -l < "$work/b.csv") stopped and resumed"
    if ! cmp -s "$work/a.csv" "$work/b.csv"; then
      echo "RESUME MISMATCH in $key:"
      diff "$work/a.csv" "$work/b.csv" | head -8
      return 1
    fi
  done
  echo "exact resume on CUDA with dropout: identical"
}

# train.cuda_graph against the eager step: quick-start with dropout and deterministic kernels, once eager and once
# replayed as a CUDA graph; the graph replays the eager step's kernels, so the losses should agree bit for bit (the
# largest difference is printed where they do not). The resume check runs again with the graph (resume-cuda-graph).
graph_check() {
  local db="$work/graph${1:+-$1}.sqlite" steps=${GRAPH_STEPS:-300} preset=${GRAPH_PRESET:-quickstart}
  [ $# -gt 0 ] && shift
  local common=(--preset "$preset" --device "$dev" --steps "$steps" --set model.dropout=0.1 --set train.deterministic=true
                --set train.eval_every=100 --set train.checkpoint_every=150 --set train.log_every=1 --db "$db" --quiet
                "$@")
  "$cli" train "${common[@]}" --name eager || return 1
  "$cli" train "${common[@]}" --name graph --set train.cuda_graph=true || return 1
  "$cli" runs --db "$db" | head -5
  local rc=0
  for key in train/loss val/loss; do
    "$cli" export 1 --db "$db" | grep ",$key," | cut -d, -f2,3,5 > "$work/e.csv"
    "$cli" export 2 --db "$db" | grep ",$key," | cut -d, -f2,3,5 > "$work/g.csv"
    if cmp -s "$work/e.csv" "$work/g.csv"; then
      echo "$key: eager and CUDA graph identical ($(wc -l < "$work/e.csv") values)"
    else
      rc=1
      echo "$key: eager and CUDA graph differ ($(wc -l < "$work/e.csv") vs $(wc -l < "$work/g.csv") values)"
      paste -d, "$work/e.csv" "$work/g.csv" | awk -F, '{ d = $3 - $6; if (d < 0) d = -d; if (d > m) { m = d; s = $2 } }
        END { printf "largest |difference| %.3g at step %s\n", m, s }'
      diff "$work/e.csv" "$work/g.csv" | head -6
    fi
  done
  return $rc
}

# The same run trained twice from the same seed, with an environment variable set (VAR=VALUE) and by default. Other
# kernels take part, so the curves agree to rounding, not bit for bit; the check fails on a validation-loss gap above
# 0.05. Usage: pair_check VAR VALUE NAME TRAIN-ARGS...
pair_check() {
  local var="$1" value="$2" name="$3"
  shift 3
  local db="$work/$name.sqlite"
  local common=(--device "$dev" --steps 200 --set train.eval_every=50 --db "$db" --quiet "$@")
  env "$var=$value" "$cli" train "${common[@]}" --name "$name-$value" || return 1
  "$cli" train "${common[@]}" --name "$name-default" || return 1
  "$cli" runs --db "$db" | head -5
  val_gap "$db" "$name" "$var=$value"
}

# A GPU path against LibTorch's own, which an environment variable switches it off for (VAR=0).
# Usage: switch_check VAR NAME TRAIN-ARGS...
switch_check() {
  local var="$1" name="$2"
  shift 2
  pair_check "$var" 0 "$name" "$@"
}

# The validation curves of runs 1 and 2 of a database side by side; fails on a gap above 0.05 (or no values).
# Usage: val_gap DB NAME FIRST-RUN'S-LABEL
val_gap() {
  local db="$1" name="$2" label="$3"
  for run in 1 2; do "$cli" export "$run" --db "$db" | grep ",val/loss," | cut -d, -f3,5 > "$work/$name$run.csv"; done
  paste -d, "$work/${name}1.csv" "$work/${name}2.csv" | awk -F, -v label="$label" '{ d = $2 - $4; if (d < 0) d = -d
    if (d > m) m = d; printf "step %s: val loss %s %.4f, other %.4f\n", $1, label, $2, $4 }
    END { printf "largest |val loss difference| %.4f\n", m; exit (NR == 0 || m > 0.05) }'
}

# DTRNet's step captured as a CUDA graph (its sized rows checked after each replay, the step captured again when the
# routing outgrows them or falls well below) against its eager step: the routed quick-start in bf16. The two runs
# need not size alike (other shapes, other rounding), so the curves agree within 0.05, not bit for bit; the debug
# log says how often the graph was captured again and why.
dtrnet_graph_check() {
  local db="$work/graph-dtrnet.sqlite" log_file="$work/graph-dtrnet.log"
  local common=(--preset quickstart-dtrnet --precision bf16 --device "$dev" --steps 200 --set train.eval_every=50
                --db "$db")
  "$cli" train "${common[@]}" --quiet --name eager || return 1
  "$cli" --log-level debug train "${common[@]}" --name graph --set train.cuda_graph=true > "$log_file" 2>&1 ||
    { tail -5 "$log_file"; return 1; }
  echo "captured again: $(grep -c 'overflowed the captured' "$log_file") overflows (the step rerun eagerly)," \
    "$(grep -c 'shapes were resized' "$log_file") resizes"
  "$cli" runs --db "$db" | head -5
  val_gap "$db" graph-dtrnet eager
}

# D-LLM's evicting attention through flash attention against the chunked form (the D-LLM preset in bf16).
flash_eviction_check() { switch_check ROUTELAB_FLASH_EVICTION flash-eviction --preset dllm --precision bf16; }

# D-LLM's evicting attention in fp32 (where flash attention takes none) on memory-efficient attention against the
# chunked form (the D-LLM preset, fp32).
efficient_eviction_check() { switch_check ROUTELAB_EFFICIENT_EVICTION efficient-eviction --preset dllm; }

# D-LLM's flash form on cuDNN's fused attention (ROUTELAB_EVICTION_CUDNN=1, an opt-in until measured) against flash
# attention's kernel: the preset in bf16.
cudnn_eviction_check() { pair_check ROUTELAB_EVICTION_CUDNN 1 cudnn-eviction --preset dllm --precision bf16; }

# Variable-length flash attention for compacted sequences against the padded path (the routed quick-start in bf16).
varlen_check() { switch_check ROUTELAB_VARLEN_ATTENTION varlen --preset quickstart-dtrnet --precision bf16; }

# DTRNet's packed rows sized from the previous forward (one read of the counts a forward) against one read per
# routed layer: the routed quick-start in bf16.
# bf16: DTRNet's packed rows sized by their total; fp32: its unpacked rows sized a sequence (compact_sized_padded).
sized_check() {
  switch_check ROUTELAB_SIZED_COMPACTION sized --preset quickstart-dtrnet --precision bf16 || return 1
  switch_check ROUTELAB_SIZED_COMPACTION sized-fp32 --preset quickstart-dtrnet
}

# RouteLab's fused add + norm kernels against LibTorch's norms: RMSNorm (the quick-start), LayerNorm with biases
# (GPT-2 style) in bf16 and fp32, DTRNet's routed layers and TSA's gated blocks (the gated add + norm).
fused_norm_check() {
  switch_check ROUTELAB_FUSED_NORM norm-rms --preset quickstart --precision bf16 || return 1
  switch_check ROUTELAB_FUSED_NORM norm-layer --preset quickstart --precision bf16 --set model.style=gpt2 || return 1
  switch_check ROUTELAB_FUSED_NORM norm-layer-fp32 --preset quickstart --set model.style=gpt2 || return 1
  switch_check ROUTELAB_FUSED_NORM norm-dtrnet --preset quickstart-dtrnet --precision bf16 || return 1
  switch_check ROUTELAB_FUSED_NORM norm-tsa --preset tsa-charlm --precision bf16 --set train.batch_size=16
}

# RouteLab's rotary-embedding kernel against LibTorch's ops: positions shared (dense) and per sequence (DTRNet's
# compacted rows).
fused_rope_check() {
  switch_check ROUTELAB_FUSED_ROPE rope --preset quickstart --precision bf16 || return 1
  switch_check ROUTELAB_FUSED_ROPE rope-dtrnet --preset quickstart-dtrnet --precision bf16
}

say "=== gpu-check $(date -u +%FT%TZ), budget ${budget}s"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 | tee -a "$log"
"$python" -c 'import torch; print("peer torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))' 2>&1 |
  tee -a "$log"
"$cli" --version 2>&1 | tee -a "$log"

# RouteLab's fused next-token loss against the unfused path: times and the largest differences.
# The suite of checks that need a GPU (tests/test_gpu.cpp): every language model's forward on the GPU against the CPU's,
# and every capturable eval forward replayed as a real CUDA graph against exact forwards.
tests="${GPU_CHECK_TESTS:-$(dirname "$cli")/routelab-tests}"
if [ -x "$tests" ]; then
  step core-suite-gpu 120 "$tests" test_gpu
else
  step core-suite-gpu 1 bash -c "echo 'no routelab-tests at $tests'; exit 1"
fi
step loss-kernels 60 "$cli" bench loss --device "$dev" --rows 16384 --vocab 50257 --reps 10
# The goals are set in bf16 (>= 1.1x eager, >= 1.0x torch.compile, MFU >= 35%); fp32 without the compile's minute.
step train-step-gpt2-small-bf16 180 "$cli" bench train-step --device "$dev" --shape gpt2-small --precision bf16 \
  --compile --cuda-graph --peak-tflops "$peak" --steps 20 --warmup 5 --python "$python" --script "$peer" "${kernels[@]}"
export -f graph_check pair_check switch_check val_gap dtrnet_graph_check fused_norm_check fused_rope_check varlen_check \
  flash_eviction_check efficient_eviction_check cudnn_eviction_check sized_check
# The fused add + norm kernels: the same losses as LibTorch's norms, and the step without them (MFU's gain).
step fused-norm-equals-unfused 180 bash -c fused_norm_check
step train-step-gpt2-small-bf16-unfused-norm 60 env ROUTELAB_FUSED_NORM=0 "$cli" bench train-step --device "$dev" \
  --shape gpt2-small --precision bf16 --cuda-graph --peak-tflops "$peak" --steps 20 --warmup 5
step fused-rope-equals-unfused 90 bash -c fused_rope_check
step graph-equals-eager 90 bash -c graph_check
# MoD's captured step (its trace's device values read after each replay) against its eager step, quick-start shape.
step graph-equals-eager-mod 90 bash -c 'graph_check mod --set model.arch=mod'
# D-LLM's step captured since 2026-11-30 (fp32 with dropout: the materialised eviction; its bf16 flash form runs in
# train-step-routed-360m-bf16-graph).
step graph-equals-eager-dllm 120 bash -c 'graph_check dllm --set model.arch=dllm'
# TSA's, DRR's and early exit's steps, captured since 2026-11-30 (their traces' shares left on the device).
step graph-equals-eager-tsa-drr-exit 180 env GRAPH_STEPS=150 bash -c \
  'graph_check tsa --set model.arch=tsa && graph_check early-exit --set model.arch=early-exit &&
   GRAPH_PRESET=drr graph_check drr'
step graph-near-eager-dtrnet 120 bash -c dtrnet_graph_check
step train-step-small 90 "$cli" bench train-step --device "$dev" --shape small --precision both --steps 30 --warmup 5 \
  --cuda-graph --peak-tflops "$peak" --python "$python" --script "$peer"
step train-step-gpt2-small-fp32 60 "$cli" bench train-step --device "$dev" --shape gpt2-small --precision fp32 \
  --cuda-graph --peak-tflops "$peak" --steps 20 --warmup 5 --python "$python" --script "$peer"
step train-step-gpt2-small-tf32 60 "$cli" bench train-step --device "$dev" --shape gpt2-small --precision fp32 --tf32 \
  --cuda-graph --peak-tflops "$peak" --steps 20 --warmup 5 --python "$python" --script "$peer"
export -f resume_check
step resume-cuda-dropout 90 bash -c resume_check
step resume-cuda-graph 90 bash -c 'resume_check graph-resume --set train.cuda_graph=true' 
step forward-batch8 120 "$cli" bench forward --device "$dev" --lengths 2048,4096 --fractions 0.1,0.3 --batch 8 --reps 5 \
  --warmup 2
step forward-batch1 90 "$cli" bench forward --device "$dev" --lengths 2048,4096 --fractions 0.1,0.3 --batch 1 --reps 5 \
  --warmup 2
# The eval forwards with a read of the routed counts in every routed layer (before 2026-11-29): what sizing MoD's,
# D-LLM's and (since 2026-11-30) DTRNet's padded compactions (fp32), TSA's sparse FFN rows and (since 2026-11-30)
# MoD's and D-LLM's packed rows beside DTRNet's (bf16) from the previous forward takes off.
step forward-batch8-exact-counts 90 env ROUTELAB_SIZED_COMPACTION=0 "$cli" bench forward --device "$dev" \
  --lengths 2048,4096 --fractions 0.1,0.3 --batch 8 --reps 5 --warmup 2
step forward-batch1-exact-counts 90 env ROUTELAB_SIZED_COMPACTION=0 "$cli" bench forward --device "$dev" \
  --lengths 2048,4096 --fractions 0.1,0.3 --batch 1 --reps 5 --warmup 2
step forward-batch8-bf16-exact-counts 90 env ROUTELAB_SIZED_COMPACTION=0 "$cli" bench forward --device "$dev" \
  --lengths 2048,4096 --fractions 0.1,0.3 --batch 8 --reps 5 --warmup 2 --precision bf16
step forward-batch8-bf16 90 "$cli" bench forward --device "$dev" --lengths 2048,4096 --fractions 0.1,0.3 --batch 8 \
  --reps 5 --warmup 2 --precision bf16
# The eval forwards captured as CUDA graphs and replayed (dense's too; DTRNet's in bf16 only): the launch-bound
# forwards (bf16 at d 512, batch 1) without the host's launches.
step forward-batch8-bf16-graph 90 "$cli" bench forward --device "$dev" --lengths 2048,4096 --fractions 0.1,0.3 \
  --batch 8 --reps 5 --warmup 2 --precision bf16 --cuda-graph
step forward-batch1-graph 90 "$cli" bench forward --device "$dev" --lengths 2048,4096 --fractions 0.1,0.3 --batch 1 \
  --reps 5 --warmup 2 --cuda-graph
step forward-batch1-bf16-graph 90 "$cli" bench forward --device "$dev" --lengths 2048,4096 --fractions 0.1,0.3 \
  --batch 1 --reps 5 --warmup 2 --precision bf16 --cuda-graph
# The same on the padded path (no variable-length packing): rows a sequence attended whole against the default's packed
# rows of the batch (both sized from the previous forward, no routed layer waiting for its count).
step forward-batch8-bf16-padded 90 env ROUTELAB_VARLEN_ATTENTION=0 "$cli" bench forward --device "$dev" \
  --lengths 2048,4096 --fractions 0.1,0.3 --batch 8 --reps 5 --warmup 2 --precision bf16
# The training step of routed models against dense's (forward, loss, backward, clip, AdamW), routers forced.
for precision in fp32 bf16; do
  step "train-step-routed-batch8-$precision" 120 "$cli" bench forward --train --device "$dev" --lengths 2048,4096 \
    --fractions 0.1,0.3 --batch 8 --reps 5 --warmup 2 --precision "$precision"
done
step varlen-equals-padded 120 bash -c varlen_check
step flash-eviction-equals-chunked 90 bash -c flash_eviction_check
step efficient-eviction-equals-chunked 90 bash -c efficient_eviction_check
step cudnn-eviction-near-flash 90 bash -c cudnn_eviction_check
step sized-equals-exact-counts 120 bash -c sized_check
# D-LLM's training attention at the 360M layer (batch 8, 15 heads of 64, 5 key/value heads): chunked kernel and
# flash form (grouped heads, one backward; on flash attention's kernel and on cuDNN's in bf16, on memory-efficient
# attention in both precisions) vs materialised form.
step eviction-360m 90 "$cli" bench eviction --device "$dev" --lengths 2048 --kv-heads 5 --precision both --reps 5 \
  --warmup 2
# The 360M presets byte-level on the embedded corpus (they default to subword shards, which a GPU box may not have).
byte_level=(--set data.source=kjv --set data.tokenizer=byte)
for cfg in smollm-360m-dense dtrnet-360m-bilayer mod-360m dllm-360m; do
  step "train-360m-$cfg" 60 "$cli" train --config "$root/experiments/$cfg.json" --device "$dev" --steps 30 \
    "${byte_level[@]}" --set train.eval_every=1000 --set train.checkpoint_every=1000 --set train.warmup_steps=10 --set train.log_every=5 \
    --db "$work/360m.sqlite"
done
# Checkpoints at the 360M shape: a snapshot to pinned host memory written on its own thread against the step writing
# it (the debug lines give the step's wait and the write's time; the whole run's time is in the step's line).
for mode in true false; do
  step "checkpoint-360m-async-$mode" 90 "$cli" --log-level debug train \
    --config "$root/experiments/smollm-360m-dense.json" --device "$dev" --steps 12 "${byte_level[@]}" \
    --set train.eval_every=1000 --set train.checkpoint_every=4 --set train.warmup_steps=2 --set train.log_every=4 \
    --set train.checkpoint_async=$mode --db "$work/ckpt-$mode.sqlite"
done
# D-LLM at batch 8 in one micro-batch (its preset accumulates 4 x 2, chosen before the chunked eviction), and the
# routed training steps at the 360M shape with D-LLM among them (it stopped the benchmark while materialised).
step train-360m-dllm-360m-batch8 60 "$cli" train --config "$root/experiments/dllm-360m.json" --device "$dev" \
  --steps 30 "${byte_level[@]}" --set train.batch_size=8 --set train.grad_accum=1 --set train.eval_every=1000 \
  --set train.checkpoint_every=1000 --set train.warmup_steps=10 --set train.log_every=5 --db "$work/360m.sqlite"
step train-step-routed-360m-bf16 150 "$cli" bench forward --train --device "$dev" --archs dtrnet,mod,tsa,dllm \
  --embd 960 --layers 32 --heads 15 --kv-heads 5 --lengths 2048 --fractions 0.1,0.3 --batch 8 --reps 3 --warmup 1 \
  --precision bf16 --breakdown-above 1.1 --kernels 8
# Each routed model beside dense alone, in a process of its own: the step above holds five models' memory at once,
# and an allocator short of room empties its cache and retries, waiting for the device (the rows' memory note).
for arch in dtrnet mod tsa dllm; do
  step "train-step-routed-360m-bf16-alone-$arch" 60 "$cli" bench forward --train --device "$dev" --archs "$arch" \
    --embd 960 --layers 32 --heads 15 --kv-heads 5 --lengths 2048 --fractions 0.1,0.3 --batch 8 --reps 3 --warmup 1 \
    --precision bf16 --breakdown-above 1.1 --kernels 8
done
# The four routed models beside dense in one process again, with PyTorch's allocator mapping its blocks into
# segments that grow (expandable_segments): whether the allocator's trips to the device beside five models' memory
# are fragmentation.
step train-step-routed-360m-bf16-expandable 90 env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$cli" bench \
  forward --train --device "$dev" --archs dtrnet,mod,tsa,dllm --embd 960 --layers 32 --heads 15 --kv-heads 5 \
  --lengths 2048 --fractions 0.1,0.3 --batch 8 --reps 3 --warmup 1 --precision bf16
# D-LLM's step with its flash form on cuDNN's kernel (beside train-step-routed-360m-bf16-alone-dllm's on flash
# attention's).
step train-step-routed-360m-bf16-alone-dllm-cudnn 60 env ROUTELAB_EVICTION_CUDNN=1 "$cli" bench forward --train \
  --device "$dev" --archs dllm --embd 960 --layers 32 --heads 15 --kv-heads 5 --lengths 2048 --fractions 0.1,0.3 \
  --batch 8 --reps 3 --warmup 1 --precision bf16 --breakdown-above 1.1 --kernels 8
# D-LLM's fp32 step (TF32 matmuls, train.tf32's default) with its eviction on memory-efficient attention (since
# 2026-11-30; the chunked form before), beside dense's.
step train-step-routed-360m-fp32-dllm 90 "$cli" bench forward --train --device "$dev" --archs dllm --embd 960 \
  --layers 32 --heads 15 --kv-heads 5 --lengths 2048 --fractions 0.1,0.3 --batch 8 --reps 3 --warmup 1 \
  --breakdown-above 1.1 --kernels 8
# MoD's and DTRNet's steps captured as CUDA graphs against dense's captured step (train.cuda_graph), routers forced:
# what the graph takes off the routed layers' launches and the host's waits.
step train-step-routed-360m-bf16-graph 180 "$cli" bench forward --train --cuda-graph --device "$dev" \
  --archs mod,dtrnet,dllm --embd 960 --layers 32 --heads 15 --kv-heads 5 --lengths 2048 --fractions 0.1,0.3 --batch 8 \
  --reps 3 --warmup 1 --precision bf16 --breakdown-above 1.1
# The same with the fp32 routers in plain fp32 (bench forward's setting before 2026-11-28): what TF32 gives them.
step train-step-routed-360m-bf16-no-tf32 90 "$cli" bench forward --train --device "$dev" --archs dtrnet,dllm \
  --embd 960 --layers 32 --heads 15 --kv-heads 5 --lengths 2048 --fractions 0.1 --batch 8 --reps 3 --warmup 1 \
  --precision bf16 --tf32 false
# DTRNet with a read of the routed count in every routed layer (before 2026-11-29): what the sized rows take off.
step train-step-routed-360m-bf16-exact-counts 60 env ROUTELAB_SIZED_COMPACTION=0 "$cli" bench forward --train \
  --device "$dev" --archs dtrnet --embd 960 --layers 32 --heads 15 --kv-heads 5 --lengths 2048 --fractions 0.1,0.3 \
  --batch 8 --reps 3 --warmup 1 --precision bf16
step train-step-routed-360m-bf16-padded 120 env ROUTELAB_VARLEN_ATTENTION=0 "$cli" bench forward --train \
  --device "$dev" --archs dtrnet,mod --embd 960 --layers 32 --heads 15 --kv-heads 5 --lengths 2048 --fractions 0.1,0.3 \
  --batch 8 --reps 3 --warmup 1 --precision bf16
# The seeds' regime, the presets' default: token shards with a subword vocabulary (32,000 pieces: 31M more parameters
# in the embedding and as many in the head than byte level), from the folder GPU_CHECK_SHARDS.
if [ -n "${GPU_CHECK_SHARDS:-}" ]; then
  for cfg in smollm-360m-dense dtrnet-360m-bilayer mod-360m; do
    step "train-360m-shards-$cfg" 60 "$cli" train --config "$root/experiments/$cfg.json" --device "$dev" --steps 30 \
      --set data.source=shards --set data.path="$GPU_CHECK_SHARDS" --set train.eval_every=1000 \
      --set train.checkpoint_every=1000 --set train.warmup_steps=10 --set train.log_every=5 --db "$work/360m.sqlite"
  done
fi
# The 360M dense step without RouteLab's norm and rotary kernels (LibTorch's ops): their gain at the seeds' shape.
step "train-360m-smollm-360m-dense-unfused" 60 env ROUTELAB_FUSED_NORM=0 ROUTELAB_FUSED_ROPE=0 "$cli" train \
  --config "$root/experiments/smollm-360m-dense.json" --device "$dev" --steps 30 "${byte_level[@]}" \
  --set train.eval_every=1000 --set train.checkpoint_every=1000 --set train.warmup_steps=10 --set train.log_every=5 \
  --db "$work/360m.sqlite"
step "train-360m-smollm-360m-dense-graph" 60 "$cli" train --config "$root/experiments/smollm-360m-dense.json" \
  --device "$dev" --steps 30 "${byte_level[@]}" --set train.cuda_graph=true --set train.eval_every=1000 --set train.checkpoint_every=1000 \
  --set train.warmup_steps=10 --set train.log_every=5 --db "$work/360m.sqlite"
step "train-360m-mod-360m-graph" 60 "$cli" train --config "$root/experiments/mod-360m.json" \
  --device "$dev" --steps 30 "${byte_level[@]}" --set train.cuda_graph=true --set train.eval_every=1000 \
  --set train.checkpoint_every=1000 --set train.warmup_steps=10 --set train.log_every=5 --db "$work/360m.sqlite"
step "train-360m-dtrnet-360m-bilayer-graph" 60 "$cli" train --config "$root/experiments/dtrnet-360m-bilayer.json" \
  --device "$dev" --steps 30 "${byte_level[@]}" --set train.cuda_graph=true --set train.eval_every=1000 \
  --set train.checkpoint_every=1000 --set train.warmup_steps=10 --set train.log_every=5 --db "$work/360m.sqlite"
"$cli" runs --db "$work/360m.sqlite" 2>&1 | tee -a "$log"
# The routed 360M presets' training steps as `train` runs them (bf16, their batches and accumulation), each beside the
# dense 360M preset's steps interleaved with its own: the time ratio and the kernel time by part and by kernel.
for cfg in dtrnet-360m-bilayer mod-360m dllm-360m; do
  step "bench-step-360m-$cfg" 120 "$cli" bench step --config "$root/experiments/$cfg.json" --device "$dev" \
    "${byte_level[@]}" --against "$root/experiments/smollm-360m-dense.json" --against-set data.source=kjv \
    --against-set data.tokenizer=byte --steps 6 --warmup 2 --profile-steps 1 --top 6
done
step quickstart 60 "$cli" train --preset quickstart --device "$dev" --steps 200 --db "$work/quick.sqlite"
# Data parallel (issue 23): the step with NCCL active in a group of one against the plain path, d 256, L 6.
step dist-world-1 150 "$cli" bench dist --nproc 1 --steps 30 --skip 10 --set run.device="$dev" --set train.precision=bf16
# A classifier's data-parallel step and shared evaluation (TAGAT's expert choices summed on NCCL) in a group of one.
step dist-classifier-world-1 90 "$cli" train --preset tagat-balanced --device "$dev" --nproc 1 --precision bf16 \
  --set train.epochs=1 --set data.task_train_examples=4000 --set data.task_eval_examples=1000 \
  --set train.eval_every=20 --db "$work/dist-classifier.sqlite"

say "=== gpu-check done; failed or skipped: ${failed[*]:-none}"
rm -rf "$work"
