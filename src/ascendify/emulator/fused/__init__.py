"""torch_npu's fused operators on the emulated npu device, with the NPU's semantics (plain PyTorch math).

One module per operator family (:mod:`.attention`, ...); :mod:`.formats` holds the storage-format bookkeeping
(``npu_format_cast``, ``get_npu_format``). :func:`lookup` gives the emulated ``torch_npu.<name>``; the shim
(:mod:`ascendify.emulator.api.shim`) serves it, and the operators also take plain CPU tensors.
Signatures, sources and constraints: ``ascendify/data/npu_fused_ops.json``.
"""

from __future__ import annotations

import importlib

#: torch_npu name -> "module:function" of its emulation
OPS = {
    "npu_fusion_attention": "attention:npu_fusion_attention",
    "npu_fusion_attention_grad": "attention:npu_fusion_attention_grad",
}


def names() -> frozenset[str]:
    return frozenset(OPS)


def lookup(name: str):
    """The emulated ``torch_npu.<name>``, or None when it is not emulated."""
    target = OPS.get(name)
    if target is None:
        return None
    module, _, attr = target.partition(":")
    fn = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    fn.__module__ = "torch_npu"
    return fn
