#!/usr/bin/env bash
# Installs every dependency of RouteLab, idempotently: Debian 12's packages, and with `--torch pip` also the pinned
# LibTorch from PyPI's torch wheel (packaging/requirements-torch.txt) into the project-local venv .venv-torch.
# Nothing is fetched from anywhere else.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/packaging/torch-choice.sh"
export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libtorch-dev libopenblas0-openmp
  qt6-base-dev qt6-base-dev-tools qt6-qpa-plugins qt6-svg-dev libqt6svg6 libgl-dev fonts-dejavu-core
  libqcustomplot-dev libqcustomplot2.1-qt6
  libspdlog-dev libfmt-dev libsqlite3-dev sqlite3 zlib1g-dev nlohmann-json3-dev libcli11-dev libsentencepiece-dev
  # Gloo's headers: data-parallel training on c10d's ProcessGroupGloo (core/dist)
  libgloo-dev
  bible-kjv xvfb xauth poppler-utils
  # pdflatex, booktabs and pgfplots: the suites compile the exported LaTeX tables and pgfplots figures
  texlive-latex-base texlive-latex-recommended texlive-pictures
  # python3-torch: the PyTorch 1.13 peer of the benchmarks; python3-venv: the venv of the pip LibTorch
  python3 python3-torch python3-venv
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "routelab: installing ${#missing[@]} Debian packages: ${missing[*]}"
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "routelab: all Debian packages already installed"
fi

if [ "$routelab_torch" = pip ]; then
  pinned="$(grep -E '^torch==' "$root/packaging/requirements-torch.txt" | cut -d= -f3)"
  have="$("$routelab_venv/bin/python3" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)"
  if [ "$have" = "$pinned" ]; then
    echo "routelab: LibTorch $pinned (pip) already in $routelab_venv"
  else
    echo "routelab: installing LibTorch $pinned from PyPI's torch wheel into $routelab_venv (about 4 GB with its CUDA libraries)"
    /usr/bin/python3 -m venv "$routelab_venv"
    "$routelab_venv/bin/python3" -m pip install --quiet --disable-pip-version-check --progress-bar off \
      -r "$root/packaging/requirements-torch.txt"
  fi
fi
