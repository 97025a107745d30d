#!/usr/bin/env bash
# Create .venv and install ascendify with its dependencies at the exact versions CI uses (constraints.txt).
# torch 2.13.0, CPU build, goes first: any other torch pulls gigabytes of CUDA packages. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
PIP=(.venv/bin/python -m pip install -q --disable-pip-version-check)
"${PIP[@]}" --upgrade pip
"${PIP[@]}" "torch==2.13.0"
"${PIP[@]}" -c constraints.txt -e ".[dev]"
.venv/bin/python -c "import torch, ascendify; print('ascendify', ascendify.__version__, 'torch', torch.__version__)"
# the emulated npu device's C++ kernels (about 30 s once; without a compiler the Python kernels serve)
.venv/bin/python -m ascendify.emulator.ops.cfast || true
# the dump's C++ recorder (about 15 s once; without it the Python path records the same dump, slower)
.venv/bin/python -m ascendify.precision.fastrec || true
