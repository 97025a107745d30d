#!/usr/bin/env bash
# Create .venv and install ascendify with its pinned dependencies (torch 2.13.0, CPU build, first:
# any other torch pulls gigabytes of CUDA packages). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[dev]"
.venv/bin/python -c "import torch, ascendify; print('ascendify', ascendify.__version__, 'torch', torch.__version__)"
