"""A model copied by value (``ascendify port``'s observer keeps the model as it was at its first call): a cloudpickle
round trip with every module of the user's project pickled by value, so that loading the copy needs neither the
project on ``sys.path`` nor its module names free (the original's and the migrated copy's ``model.py`` never clash
in one process), and a model holding a lambda over its own submodules (minGPT's ``Block.mlpf``) keeps calling the
copy's submodules."""

from __future__ import annotations

import copy
import os
import sys
from typing import Any


def copy_by_value(obj: Any, root: str) -> Any:
    import cloudpickle

    try:
        return cloudpickle.loads(dumps_by_value(obj, root))
    except Exception:  # noqa: BLE001 (a model cloudpickle cannot take: deepcopy, and say nothing)
        return copy.deepcopy(obj)

def pickle_by_value(obj: Any, path: str, root: str) -> None:
    """cloudpickle ``obj`` with every module of the user's project (files under ``root``, and ``__main__``) by
    value: loading it needs neither the project on ``sys.path`` nor its module names free."""
    from ascendify.core.fileio import write_atomic

    write_atomic(path, dumps_by_value(obj, root))

def dumps_by_value(obj: Any, root: str) -> bytes:
    import cloudpickle

    registered = []
    root = os.path.abspath(root) + os.sep
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if not f or name == "__main__" or "site-packages" in f:
            continue
        if os.path.abspath(f).startswith(root):
            try:
                cloudpickle.register_pickle_by_value(mod)
                registered.append(mod)
            except ValueError:
                pass
    try:
        return cloudpickle.dumps(obj)
    finally:
        for mod in registered:
            try:
                cloudpickle.unregister_pickle_by_value(mod)
            except ValueError:
                pass


def save_models(found: Any, models: Any, out: str, root: str) -> None:
    """Rank 0's files beside ``observe.json``: each model's first batch (``batch-K.pt``) and its copy
    (``model-K.pkl``); ``found`` (the :class:`~ascendify.port.observation.Observation`) names them, or says why one
    is missing."""
    import torch

    by_index = {m.index: m for m in models}
    for entry in found.models:
        m = by_index[entry.index]
        if m.batch is not None:
            path = os.path.join(out, f"batch-{m.index}.pt")
            try:
                torch.save(m.batch, path)
                entry.batch_file = os.path.basename(path)
            except Exception as e:  # noqa: BLE001
                entry.snapshot_note = f"batch not saved: {type(e).__name__}: {e}"
        if m.snapshot is not None:
            path = os.path.join(out, f"model-{m.index}.pkl")
            try:
                pickle_by_value(m.snapshot, path, root)
                entry.file = os.path.basename(path)
            except Exception as e:  # noqa: BLE001
                entry.snapshot_note = f"model not saved: {type(e).__name__}: {e}"
