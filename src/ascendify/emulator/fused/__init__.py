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
    "npu_prompt_flash_attention": "infer:npu_prompt_flash_attention",
    "npu_incre_flash_attention": "infer:npu_incre_flash_attention",
    "npu_fused_infer_attention_score": "infer:npu_fused_infer_attention_score",
    "npu_rms_norm": "norms:npu_rms_norm",
    "npu_add_rms_norm": "norms:npu_add_rms_norm",
    "npu_rotary_mul": "rope:npu_rotary_mul",
    "npu_swiglu": "activations:npu_swiglu",
    "npu_geglu": "activations:npu_geglu",
    "fast_gelu": "activations:fast_gelu",
    "npu_fast_gelu": "activations:npu_fast_gelu",
    "npu_scaled_masked_softmax": "softmax:npu_scaled_masked_softmax",
    "npu_dropout_with_add_softmax": "softmax:npu_dropout_with_add_softmax",
    "npu_moe_gating_top_k_softmax": "moe:npu_moe_gating_top_k_softmax",
    "npu_grouped_matmul": "moe:npu_grouped_matmul",
    "npu_format_cast": "format:npu_format_cast",
    "npu_format_cast_": "format:npu_format_cast_",
    "npu_confusion_transpose": "format:npu_confusion_transpose",
    "npu_apply_adam_w": "optim:npu_apply_adam_w",
    "npu_apply_adam": "optim:npu_apply_adam",
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
