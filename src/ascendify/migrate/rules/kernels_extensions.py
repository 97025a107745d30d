"""Compiled CUDA extension modules and CUDA-only packages imported by name (``import dropout_layer_norm``).

The table is package data (``data/cuda_extension_modules.json``): flash-attn's and apex's compiled extensions,
Megatron's fused kernels, mamba's selective scan, CuPy, pynvml, TensorRT... An import of one fails on Ascend.
"""

from __future__ import annotations

import ast
from functools import cache

from ascendify.core import knowledge

from ..model import UNSUPPORTED
from .base import REPORT_ONLY, Example, rule


@cache
def modules() -> dict[str, dict]:
    return knowledge.load("cuda_extension_modules")["modules"]


@rule(
    "ASC620",
    "cuda-extension-module",
    "imports of compiled CUDA extensions and CUDA-only packages (`dropout_layer_norm`, `selective_scan_cuda`, `cupy`)",
    safety=REPORT_ONLY,
    hooks=("import",),
    doc="""
    ## What it does
    Lists imports of the compiled CUDA extension modules that real projects build from flash-attn's, apex's,
    Megatron's or mamba's sources (`dropout_layer_norm`, `rotary_emb`, `xentropy_cuda_lib`,
    `scaled_masked_softmax_cuda`, `selective_scan_cuda`, ...) and of CUDA-only packages (`cupy`, `pycuda`,
    `pynvml`, `tensorrt`, `transformer_engine`), each with what it does and the nearest NPU path. The table is
    package data (`cuda_extension_modules.json`, with its sources).

    ## Why
    These modules are built for CUDA (or need the NVIDIA driver): on an Ascend machine the import fails, often
    in a file that names no CUDA API at all, so nothing else points at it.

    ## Example
    `import dropout_layer_norm`

    ## Use instead
    The row's NPU path: a torch_npu fused op (`npu_rms_norm`, `npu_rotary_mul`, `npu_fusion_attention`,
    `npu_scaled_masked_softmax`), the composite in torch ops, or an Ascend C custom op.

    ## Fix safety
    Report only. A name that a project could also use for a module of its own (`rotary_emb`) says so.
    """,
    examples=[Example("import dropout_layer_norm\n", None), Example("from selective_scan_cuda import fwd\n", None)],
)
def cuda_extension_module(ctx, node: ast.AST) -> None:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and not node.level:
        names = [node.module or ""]
    else:
        return
    table = modules()
    for name in names:
        top = name.split(".")[0]
        row = table.get(top)
        if row is None:
            continue
        own = " (unless it is a module of this project by the same name)" if row.get("generic") else ""
        ctx.report(node, api=top, severity=UNSUPPORTED,
                   reason=f"{row['what']}: a compiled CUDA extension or CUDA-only package ({row['package']}){own}",
                   tip=f"use {row['npu_path']}")
