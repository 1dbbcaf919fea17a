#!/usr/bin/env bash
# Installs every system dependency of RouteLab from Debian 12's packages, idempotently. Nothing is fetched elsewhere.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libtorch-dev libopenblas0-openmp
  qt6-base-dev qt6-base-dev-tools qt6-qpa-plugins qt6-svg-dev libqt6svg6 libgl-dev fonts-dejavu-core
  libqcustomplot-dev libqcustomplot2.1-qt6
  libspdlog-dev libfmt-dev libsqlite3-dev sqlite3 nlohmann-json3-dev libcli11-dev
  bible-kjv xvfb xauth poppler-utils
  # pdflatex, booktabs and pgfplots: the suites compile the exported LaTeX tables and pgfplots figures
  texlive-latex-base texlive-latex-recommended texlive-pictures
  python3 python3-torch
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
