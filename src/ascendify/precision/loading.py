"""Load a model from ``FILE:FACTORY`` and inputs from ``FILE:FUNC`` or a shape spec, for lockstep comparison.

``FACTORY`` is a name defined in ``FILE`` (a class or a function, called with no arguments; a module instance is
used as is) or a call expression evaluated in the file's namespace: ``models.py:GPT(vocab_size=64, seq_len=16)``.
Files are loaded by :mod:`ascendify.workloads.factory` (each under its own module name, so two files both named
``models.py``, the original and the migrated copy, load side by side; failures are its ``FactoryError``).

Input specs: ``4x16:int64:64`` (integers in ``[0, 64)``), ``2x3x32x32`` or ``2x3x32x32:float32`` (standard
normal), several separated by ``,``, nested in tuples, lists and dicts with keyword inputs (``ascendify.workloads.batchspec``:
``5x2:int64:40, (1x2x16, 1x2x16)``); or ``FILE:FUNC`` (returns a tensor, a tuple/list of inputs of any nesting, or
a dict of keyword inputs).
"""

from __future__ import annotations

from typing import Any

from ascendify.workloads import batchspec, factory

SpecError = batchspec.SpecError  # a malformed or missing command-line spec: a usage error, not bad input


def inputs(spec: str | None, model=None, seed: int = 0) -> tuple:
    """The positional inputs for ``model`` (see :func:`batch`); a spec with keyword inputs is refused here."""
    args, kwargs = batch(spec, model, seed)
    if kwargs:
        raise SpecError(f"{spec}: keyword inputs ({', '.join(kwargs)}) where only positional ones are taken")
    return args


def batch(spec: str | None, model=None, seed: int = 0) -> tuple[tuple, dict[str, Any]]:
    """``(args, kwargs)`` for ``model``: from ``spec`` (``FILE:FUNC``, or shapes in tuples, lists and dicts:
    ``ascendify.workloads.batchspec``), or, without one, a small example batch for models that declare ``ascendify_task``
    (``ascendify.workloads.models.example_batch``)."""
    import torch

    if not spec:
        if model is not None and hasattr(model, "ascendify_task"):
            from ascendify.workloads import models

            # small on purpose: lockstep keeps every call in memory and the emulated npu runs at host speed (a
            # resnet18 at its 224 px took 4 minutes under bf16); at most 64 px images and 32 tokens
            size = min(getattr(model, "ascendify_image_size", None) or 224, 64)
            seq = min(getattr(model, "ascendify_seq_len", None) or 128, 32)
            x, _ = models.example_batch(model, 2, image_size=size, seq_len=seq,
                                        generator=torch.Generator().manual_seed(seed))
            return (x,), {}
        raise SpecError("--inputs is needed: FILE:FUNC, or shapes such as 4x16:int64:64 or 2x3x32x32, nested as "
                        "'5x2:int64:40, (1x2x16, 1x2x16)'")
    if factory.is_spec(spec):
        return batchspec.from_value(factory.load(spec), spec)
    return batchspec.parse(spec, seed)
