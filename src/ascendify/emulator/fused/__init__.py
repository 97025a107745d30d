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
    fn = _served.get(name)
    if fn is None:
        module, _, attr = target.partition(":")
        fn = _served[name] = _on_products(name, getattr(importlib.import_module(f"{__name__}.{module}"), attr))
    return fn


_served: dict = {}


def _on_products(name: str, fn):
    """``fn`` refusing to run on a chip whose product family torch_npu does not document it for (data:
    ``npu_fused_ops.json`` ``products``)."""
    import functools

    from ascendify.core import knowledge
    from ascendify.emulator.fused._check import product

    products = knowledge.load("npu_fused_ops")["ops"][name].get("products")
    if products is None:
        fn.__module__ = "torch_npu"
        return fn

    @functools.wraps(fn)
    def op(*args, **kwargs):
        product(name, products, args[0] if args else next(iter(kwargs.values()), None))
        return fn(*args, **kwargs)

    op.__module__ = "torch_npu"
    return op


_library: list = []


def register_torch_ops() -> list[str]:
    """Define the emulated operators in the ``npu`` operator namespace, so that ``torch.ops.npu.<name>`` (what
    MindSpeed and vllm-ascend call) works as ``torch_npu.<name>`` does; idempotent. Each is a
    CompositeImplicitAutograd kernel: autograd runs through its PyTorch math. Returns the names registered."""
    if _library:
        return _library[1]
    import torch

    from ascendify.core import knowledge

    lib = torch.library.Library("npu", "DEF")  # noqa: TOR901 (a Python namespace of the emulator's own)
    done = []
    for name, row in knowledge.load("npu_fused_ops")["ops"].items():
        schema = row["schema"]
        if ".out(" in schema.split(" ->")[0] or name not in OPS:
            continue  # out= overloads (npu_apply_adam*) stay torch_npu.<name> only
        for sch in (schema, *row.get("overloads", ())):
            lib.define(sch)
            lib.impl(sch.split("(", 1)[0], _positional(lookup(name), sch), "CompositeImplicitAutograd")
        done.append(name)
    _library[:] = [lib, done]
    return done


def _positional(fn, schema: str):
    """``fn`` called the way the dispatcher calls a kernel (keyword-only arguments may come by position)."""
    import inspect

    params = list(inspect.signature(fn).parameters.values())

    def kernel(*args, **kwargs):
        pos, kw = [], dict(kwargs)
        for p, a in zip(params, args, strict=False):
            if p.kind is inspect.Parameter.KEYWORD_ONLY:
                kw[p.name] = a
            else:
                pos.append(a)
        out = fn(*pos, **kw)
        return tuple(out) if isinstance(out, list) and "-> Tensor[]" not in schema else out

    kernel.__name__ = fn.__name__
    return kernel
