"""torch_npu's fused operators on the emulated npu device, with the NPU's semantics (plain PyTorch math).

One module per operator family (:mod:`.attention`, :mod:`.layout`, ...); :mod:`.formats` is no operator but the
storage-format bookkeeping that ``npu_format_cast`` (in :mod:`.layout`) and ``get_npu_format`` share. :func:`lookup` gives the emulated ``torch_npu.<name>``; the shim
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
    "npu_format_cast": "layout:npu_format_cast",
    "npu_format_cast_": "layout:npu_format_cast_",
    "npu_confusion_transpose": "layout:npu_confusion_transpose",
    "npu_apply_adam_w": "optim:npu_apply_adam_w",
    "npu_apply_adam": "optim:npu_apply_adam",
    # quantisation
    "npu_quantize": "quant:npu_quantize",
    "npu_dynamic_quant": "quant:npu_dynamic_quant",
    "npu_dynamic_block_quant": "quant:npu_dynamic_block_quant",
    "npu_convert_weight_to_int4pack": "quant:npu_convert_weight_to_int4pack",
    "npu_trans_quant_param": "quant:npu_trans_quant_param",
    "npu_dynamic_mx_quant": "mx:npu_dynamic_mx_quant",
    "npu_dynamic_mx_quant_with_dual_axis": "mx:npu_dynamic_mx_quant_with_dual_axis",
    "npu_grouped_dynamic_mx_quant": "mx:npu_grouped_dynamic_mx_quant",
    "npu_dynamic_block_mx_quant": "mx:npu_dynamic_block_mx_quant",
    "npu_quant_matmul": "qmatmul:npu_quant_matmul",
    "npu_weight_quant_batchmatmul": "qmatmul:npu_weight_quant_batchmatmul",
    "npu_transpose_batchmatmul": "qmatmul:npu_transpose_batchmatmul",
    "npu_transpose_quant_batchmatmul": "qmatmul:npu_transpose_quant_batchmatmul",
    "npu_add_rms_norm_quant": "norms:npu_add_rms_norm_quant",
    "npu_add_rms_norm_dynamic_quant": "norms:npu_add_rms_norm_dynamic_quant",
    # MoE routing
    "npu_moe_init_routing": "routing:npu_moe_init_routing",
    "npu_moe_init_routing_v2": "routing:npu_moe_init_routing_v2",
    "npu_moe_finalize_routing": "routing:npu_moe_finalize_routing",
    "npu_moe_token_permute": "routing:npu_moe_token_permute",
    "npu_moe_token_unpermute": "routing:npu_moe_token_unpermute",
    "npu_moe_gating_top_k": "routing:npu_moe_gating_top_k",
    # communication fused with computation
    "npu_all_gather_base_mm": "comm:npu_all_gather_base_mm",
    "npu_mm_reduce_scatter_base": "comm:npu_mm_reduce_scatter_base",
    "npu_mm_all_reduce_base": "comm:npu_mm_all_reduce_base",
    "npu_alltoallv_gmm": "comm:npu_alltoallv_gmm",
    "npu_gmm_alltoallv": "comm:npu_gmm_alltoallv",
    # inference attention and KV cache
    "npu_fused_infer_attention_score_v2": "infer:npu_fused_infer_attention_score_v2",
    "_npu_fused_infer_attention_score_get_max_workspace": "infer:_npu_fused_infer_attention_score_get_max_workspace",
    "_npu_fused_infer_attention_score_v2_get_max_workspace":
        "infer:_npu_fused_infer_attention_score_v2_get_max_workspace",
    "npu_attention_update": "infer:npu_attention_update",
    "npu_scatter_pa_kv_cache": "paged:npu_scatter_pa_kv_cache",
    "npu_gather_pa_kv_cache": "paged:npu_gather_pa_kv_cache",
    "npu_scatter_nd_update_": "paged:npu_scatter_nd_update_",
    "_npu_reshape_and_cache": "paged:_npu_reshape_and_cache",
    "_npu_paged_attention": "paged:_npu_paged_attention",
    "_npu_paged_attention_get_workspace": "paged:_npu_paged_attention_get_workspace",
    "_npu_flash_attention": "paged:_npu_flash_attention",
    "_npu_flash_attention_unpad": "paged:_npu_flash_attention_unpad",
    "_npu_rotary_embedding": "paged:_npu_rotary_embedding",
    "npu_sparse_flash_attention": "sparse:npu_sparse_flash_attention",
    "npu_lightning_indexer": "sparse:npu_lightning_indexer",
    "npu_interleave_rope": "rope:npu_interleave_rope",
    "npu_apply_rotary_pos_emb": "rope:npu_apply_rotary_pos_emb",
    "npu_mrope": "rope:npu_mrope",
    "npu_top_k_top_p": "softmax:npu_top_k_top_p",
    # backward entry points and training variants
    "npu_fusion_attention_v2": "attention:npu_fusion_attention_v2",
    "npu_swiglu_backward": "activations:npu_swiglu_backward",
    "npu_clipped_swiglu": "activations:npu_clipped_swiglu",
    "npu_rms_norm_backward": "norms:npu_rms_norm_backward",
    "npu_sparse_lightning_indexer_grad_kl_loss": "sparse:npu_sparse_lightning_indexer_grad_kl_loss",
    # fused pieces of DeepSeek / Qwen serving in vllm-ascend
    "npu_kv_rmsnorm_rope_cache": "paged:npu_kv_rmsnorm_rope_cache",
    "_npu_flash_attention_unpad_v2": "paged:_npu_flash_attention_unpad_v2",
    "npu_grouped_matmul_swiglu_quant_v2": "moe:npu_grouped_matmul_swiglu_quant_v2",
    "npu_rms_norm_dynamic_mx_quant": "norms:npu_rms_norm_dynamic_mx_quant",
    "npu_add_rms_norm_dynamic_mx_quant": "norms:npu_add_rms_norm_dynamic_mx_quant",
    "_npu_matmul_add_fp32": "qmatmul:_npu_matmul_add_fp32",
    "npu_kronecker_quant": "quant:npu_kronecker_quant",
}

#: operators with torch_npu's ``.out`` overload as an attribute (``torch_npu.<op>.out(..., workspace=, out=[...])``)
_OUT_OVERLOADS = ("npu_fused_infer_attention_score", "npu_fused_infer_attention_score_v2")


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
        fn = _on_products(name, getattr(importlib.import_module(f"{__name__}.{module}"), attr))
        if name in _OUT_OVERLOADS:
            from ascendify.emulator.fused.infer import _fia_out

            fn.out = _fia_out(fn)
        _served[name] = fn
    return fn


_served: dict = {}


def _on_products(name: str, fn):
    """``fn`` as torch_npu serves it: refusing to run on a chip whose product family torch_npu does not document
    it for (data: ``npu_fused_ops.json`` ``products``), counted by name in the emulator's report
    (``fused_ops``), and quiet about the plain ops it runs inside (on an NPU the fused operator is one kernel:
    their fidelity events, such as a CPU fallback of ``frexp``, are not the user's)."""
    import functools

    from ascendify.core import knowledge
    from ascendify.emulator import runtime
    from ascendify.emulator.fused._check import product

    products = knowledge.load("npu_fused_ops")["ops"][name].get("products")
    quiet = runtime.quiet

    @functools.wraps(fn)
    def op(*args, **kwargs):
        if products is not None:
            product(name, products, args[0] if args else next(iter(kwargs.values()), None))
        quiet[0] += 1
        try:
            out = fn(*args, **kwargs)
        finally:
            quiet[0] -= 1
        runtime.recorder.fused[name] += 1
        return out

    op.__module__ = "torch_npu"
    return op


_library: list = []


def register_torch_ops() -> list[str]:
    """Define the emulated operators in the ``npu`` operator namespace, so that ``torch.ops.npu.<name>`` (what
    MindSpeed and vllm-ascend call) works as ``torch_npu.<name>`` does (ATB's ``_npu_*`` operators: in
    ``torch.ops.atb``, the row's ``namespace``); idempotent. Each is a
    CompositeImplicitAutograd kernel: autograd runs through its PyTorch math. Returns the names registered."""
    if _library:
        return _library[1]
    import torch

    from ascendify.core import knowledge

    libs: dict = {}
    done = []
    for name, row in knowledge.load("npu_fused_ops")["ops"].items():
        schema = row["schema"]
        if ".out(" in schema.split(" ->")[0] or name not in OPS:
            continue  # out= overloads (npu_apply_adam*) stay torch_npu.<name> only
        ns = row.get("namespace", "npu")  # ATB's operators live in torch.ops.atb
        if ns not in libs:
            libs[ns] = torch.library.Library(ns, "DEF")  # noqa: TOR901 (a Python namespace of the emulator's own)
        lib = libs[ns]
        for sch in (schema, *row.get("overloads", ())):
            lib.define(sch)
            lib.impl(sch.split("(", 1)[0], _positional(lookup(name), sch), "CompositeImplicitAutograd")
        done.append(name)
    _library[:] = [libs, done]
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
