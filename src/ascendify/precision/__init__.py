"""Precision: prove a migrated model computes what the original computed, and find where it first goes wrong.

* ``dump(model, "dump/", level=..., mode=...)`` records every module call and torch API call (forward and
  backward) with statistics, a fingerprint, dtypes, shapes, scalar arguments and the source line, in msprobe's
  on-disk layout (see ``precision.model`` for the data model and ``docs/precision.md``).
* ``step()`` marks a step boundary for a dump installed by ``ascendify dump``.
* ``load_dump(path)`` reads our dumps and msprobe's into the same objects.

The data model (``model``) is torch-free; everything else is imported on first use.
"""

from __future__ import annotations

import importlib

from ascendify.precision.model import Dump, DumpError, Node, ScalarArg, TensorStats
from ascendify.precision.msprobe_io import list_steps_ranks, load_dump

# public name -> module that defines it (imported lazily: importing ascendify.precision does not import torch)
_LAZY: dict[str, str] = {
    "dump": "ascendify.precision.dumper",
    "Dumper": "ascendify.precision.dumper",
    "DumpTooLarge": "ascendify.precision.dumper",
    "step": "ascendify.precision.dumper",
    "compare_models": "ascendify.precision.lockstep",
    "LockstepSettings": "ascendify.precision.lockstep",
    "compare_dumps": "ascendify.precision.dumpcompare",
    "compare_curves": "ascendify.precision.curves",
}

__all__ = [
    "Dump",
    "DumpError",
    "Node",
    "ScalarArg",
    "TensorStats",
    "list_steps_ranks",
    "load_dump",
    *_LAZY,
]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ascendify.precision' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
