#!/usr/bin/env bash
# Fills .pydeps/ (ignored; carried to the GPU machine, which reaches no registry) with the wheels that
# scripts/prebuilt-gpu.sh's Python phases unpack beside the package for the PyTorch venv's Python 3.12: pytest and
# its dependencies (phase python), cuDNN Frontend's Python wheel (pybench's peer) and py-spy (pyprofile).
#   scripts/pydeps.sh [DIR]     (default: .pydeps in the checkout)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$root/.pydeps}"
mkdir -p "$dir"
python3 -m pip download -q --only-binary=:all: --no-deps --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 --platform any -d "$dir" \
  pytest==8.4.2 iniconfig==2.3.1 packaging==26.4 pluggy==1.7.0 pygments==2.21.0 \
  nvidia-cudnn-frontend==1.32.0 py-spy==0.4.3
ls "$dir"
