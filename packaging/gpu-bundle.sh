#!/usr/bin/env bash
# Packs what a lent GPU machine needs to run packaging/gpu-check.sh into one git-ignored folder of the checkout
# (default .device), for machines that receive the checkout and nothing beside it and have PyTorch 2.x but no
# RouteLab dependencies: the CLI and SentencePiece module of a pip build (built here against the same torch wheel),
# the Debian libraries they need besides LibTorch (spdlog, fmt, SQLite, SentencePiece, libgomp), the KJV text the
# presets read, the PyTorch 2.x peer, and run.sh, which points the CLI at the machine's own torch libraries and runs
# gpu-check.sh once per (budget, steps) pair into $OUT/gpu.log.
#
# Usage: bash packaging/gpu-bundle.sh [BUILD_DIR (default build-pip)] [BUNDLE (default .device)]
# Then on the machine: bash .device/run.sh 300 '^(step-a|step-b)$' [200 '^step-c$' ...]   (carry the bundle folder)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-build-pip}"
bundle="${2:-.device}"
cd "$root"
[ -x "$build/app/routelab-cli" ] || { echo "gpu-bundle: $build/app/routelab-cli not found (build with --torch pip)" >&2; exit 1; }
mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/home/corpora" .git/info
grep -qx "/$bundle/" .git/info/exclude 2>/dev/null || echo "/$bundle/" >> .git/info/exclude
cp "$build/app/routelab-cli" "$build/app/routelab-cli-bin" "$build/core/libroutelab_spm.so" "$bundle/bin/"
for lib in libspdlog.so.1.10 libfmt.so.9 libsqlite3.so.0 libsentencepiece.so.0 libsentencepiece_train.so.0 libgomp.so.1; do
  cp -L "/lib/x86_64-linux-gnu/$lib" "$bundle/lib/"
done
corpus="${ROUTELAB_HOME:-$HOME/.local/share/routelab}/corpora/kjv.txt"
[ -f "$corpus" ] || { echo "gpu-bundle: $corpus not found (run the quick start once)" >&2; exit 1; }
cp "$corpus" "$bundle/home/corpora/"
cp "$root/../shared/tools/pyref2_gpt_step.py" "$bundle/"
# The core suites' executable (the GPU suite, step core-suite-gpu) with the Qt Core and Test libraries it needs (the
# GPU machine has no Qt), compressed: ICU's data alone is 31 MB of the 64 the device's carry takes.
if [ -x "$build/tests/routelab-tests" ]; then
  staging="$(mktemp -d)"
  mkdir -p "$staging/lib"
  cp "$build/tests/routelab-tests" "$staging/"
  ldd "$build/tests/routelab-tests" | awk '$3 ~ /^\// { print $1, $3 }' | while read -r name path; do
    case "$name" in
      libQt6*|libicu*|libglib-2.0*|libdouble-conversion*|libb2*|libpcre2*|libzstd*) cp -L "$path" "$staging/lib/" ;;
    esac
  done
  tar -cJf "$bundle/tests.tar.xz" -C "$staging" .
  rm -rf "$staging"
fi
cat > "$bundle/run.sh" <<'EOF'
#!/usr/bin/env bash
# Written by packaging/gpu-bundle.sh. Usage: run.sh BUDGET_S REGEX [BUDGET_S REGEX ...]
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/.."
py=${PY:-python3}
torch_dir=$($py -c 'import torch, os; print(os.path.dirname(torch.__file__))')
export LD_LIBRARY_PATH=$torch_dir/lib:$torch_dir/../nvidia/cu13/lib:/usr/local/cuda/lib64:$here/lib
export ROUTELAB_HOME=$here/home ROUTELAB_SPM_MODULE=$here/bin/libroutelab_spm.so PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
"$here/bin/routelab-cli" --version || { ldd "$here/bin/routelab-cli-bin"; exit 1; }
if [ -f "$here/tests.tar.xz" ]; then  # the core suites' executable and its Qt libraries (packed by gpu-bundle.sh)
  tests_dir="$(mktemp -d)"
  # Python's tarfile rather than tar -J: the machine has the peer's Python, maybe not xz.
  $py -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$here/tests.tar.xz" "$tests_dir"
  export GPU_CHECK_TESTS="$tests_dir/routelab-tests" LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$tests_dir/lib"
fi
while [ $# -ge 2 ]; do
  GPU_CHECK_BUDGET_S=$1 GPU_CHECK_ONLY=$2 bash packaging/gpu-check.sh "$here/bin/routelab-cli" "$OUT/gpu.log" "$py" \
    "$here/pyref2_gpt_step.py" > /dev/null
  shift 2
done
EOF
chmod +x "$bundle/run.sh"
echo "gpu-bundle: $bundle ($(du -sh "$bundle" | cut -f1)); carry [\"$bundle\"] and run: bash $bundle/run.sh 300 '<steps regex>'"
