"""CUDA-only libraries and custom CUDA code (ASC601-ASC606): C++/CUDA extensions, Triton kernels, flash-attn,
xformers, bitsandbytes and NVIDIA apex, listed with their nearest NPU path."""

from __future__ import annotations

import ast

from ..model import UNSUPPORTED
from .base import REPORT_ONLY, Example, rule
from .kernels_custom import OTHER_PATHS, describe_extension, describe_triton


def _enclosing_def(ctx, node):
    p = ctx.parent(node)
    while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)):
        p = ctx.parent(p)
    return p


def _decorated_by(ctx, fn, prefixes) -> bool:
    while fn is not None:
        for d in fn.decorator_list:
            q = ctx.qname(getattr(d, "func", d))
            if q and any(q == p or q.startswith(p + ".") for p in prefixes):
                return True
        fn = _enclosing_def(ctx, fn)
    return False


def _lib_rule(id, name, summary, prefixes, reason, tip, why, example, instead, exclude=(), describe=None,
              specific=None):
    """``specific``: ``{dotted name: (reason, tip)}`` for the library's APIs whose NPU path is not the
    library's general one (xformers' ``SwiGLU`` is an MLP, not attention)."""
    specific = specific or {}

    def said(q: str) -> tuple[str, str]:
        hit = max((k for k in specific if q == k or q.startswith(k + ".")), key=len, default=None)
        return specific[hit] if hit else (reason, tip)

    doc = f"""
    ## What it does
    Lists imports and uses of {summary}.

    ## Why
    {why}

    ## Example
    `{example}`

    ## Use instead
    {instead}

    ## Fix safety
    Report only: the replacement changes numerics or APIs and needs a person.
    """

    @rule(id, name, summary, safety=REPORT_ONLY, hooks=("import", "chain"), tokens=prefixes, doc=doc,
          examples=[Example(example + "\n", None)])
    def check(ctx, node: ast.AST) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for m in mods:
                if any(m == p or m.startswith(p + ".") for p in prefixes):
                    names = [f"{m}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else [m]
                    r, t = said(names[0]) if len(names) == 1 else (reason, tip)
                    ctx.report(node, api=m, severity=UNSUPPORTED, reason=r, tip=t)
                    return
            return
        q = ctx.qname(node)
        if not q or ctx.is_claimed(node) or q in exclude:
            return
        if not any(q == p or q.startswith(p + ".") for p in prefixes):
            return
        ctx.claim(node)
        fn = _enclosing_def(ctx, node)
        if fn is not None and node in fn.decorator_list or fn is not None and node in [
                getattr(d, "func", None) for d in fn.decorator_list]:
            if describe is not None:
                what, nearest = describe(ctx, fn)
                ctx.report(node, api=q, severity=UNSUPPORTED, reason=f"{reason}: kernel `{fn.name}`, {what}",
                           tip=f"nearest NPU path: {nearest}; {OTHER_PATHS}")
            else:
                ctx.report(node, api=q, severity=UNSUPPORTED, reason=f"{reason}: kernel `{fn.name}`", tip=tip)
        elif fn is not None and _decorated_by(ctx, fn, prefixes):
            return  # inside a kernel: the kernel's row covers it
        else:
            r, t = said(q)
            ctx.report(node, api=q, severity=UNSUPPORTED, reason=r, tip=t)

    return check


_lib_rule(
    "ASC602", "triton-kernel", "Triton kernels (`triton`, `@triton.jit`)", ("triton",),
    "Triton kernels are compiled for NVIDIA GPUs",
    "use torch ops (torch.compile on NPU), triton-ascend, or an Ascend C custom op",
    "Upstream Triton targets NVIDIA/AMD GPUs; Ascend needs the separate triton-ascend backend.",
    "import triton", "torch ops, `torch.compile`, or triton-ascend.", describe=describe_triton,
)
_lib_rule(
    "ASC603", "flash-attn", "the `flash_attn` package", ("flash_attn",),
    "flash-attn is a CUDA-only package",
    "use torch.nn.functional.scaled_dot_product_attention, or torch_npu.npu_fusion_attention on Ascend",
    "flash-attn ships CUDA kernels only.",
    "from flash_attn import flash_attn_func",
    "`F.scaled_dot_product_attention(q, k, v, is_causal=True)` or `torch_npu.npu_fusion_attention`.",
)
_lib_rule(
    "ASC604", "xformers", "the `xformers` package", ("xformers",),
    "xformers' memory-efficient kernels are CUDA-only",
    "use torch.nn.functional.scaled_dot_product_attention (fused on Ascend)",
    "xformers ships CUDA kernels only.",
    "import xformers.ops as xops", "`F.scaled_dot_product_attention`.",
    specific={
        "xformers.ops.SwiGLU": (
            "xformers' fused SwiGLU MLP (w12 -> silu-gate -> w3) is a CUDA kernel",
            "use an nn.Module doing w3(F.silu(x @ w1) * (x @ w2)) (torch_npu.npu_swiglu fuses the gate on Ascend); "
            "keep the parameter names w12/w3 if checkpoints must load"),
        "xformers.ops.swiglu": (
            "xformers' fused swiglu function is a CUDA kernel",
            "use F.silu(x @ w1.T + b1) * (x @ w2.T + b2) @ w3.T + b3 (torch_npu.npu_swiglu for the gate on Ascend)"),
    },
)
_lib_rule(
    "ASC605", "bitsandbytes", "the `bitsandbytes` package", ("bitsandbytes",),
    "bitsandbytes' quantized kernels and 8-bit optimizers are CUDA-only",
    "use torch.optim (or torch_npu.optim.NpuFused*) and torch_npu's quantization ops (npu_quant_matmul)",
    "bitsandbytes ships CUDA kernels only.",
    "import bitsandbytes as bnb", "`torch.optim.AdamW`, `torch_npu.optim.NpuFusedAdamW`.",
)
_lib_rule(
    "ASC606", "apex-import", "NVIDIA apex (`apex.amp`, `apex.parallel`, `amp_C`, fused kernels)",
    ("apex", "amp_C", "fused_layer_norm_cuda", "fused_adam_cuda"),
    "apex does not work on Ascend",
    "use torch.amp for mixed precision, torch DDP, torch_npu.optim.NpuFused* optimizers (see ASC607)",
    "apex is built against CUDA; torch_npu ships its own fused optimizers.",
    "from apex import amp", "`torch.amp.autocast` and `torch.amp.GradScaler`.",
    exclude=("apex.optimizers.FusedAdam", "apex.optimizers.FusedLAMB", "apex.optimizers.FusedSGD",
             "apex.optimizers.FusedAdagrad"),
)

CPP_EXT = {
    "torch.utils.cpp_extension.load": "JIT-compiles C++/CUDA sources",
    "torch.utils.cpp_extension.load_inline": "JIT-compiles C++/CUDA sources",
    "torch.utils.cpp_extension.CUDAExtension": "builds CUDA kernels",
    "torch.utils.cpp_extension.BuildExtension": "builds C++/CUDA extensions",
    "torch.utils.cpp_extension.CUDA_HOME": "locates the CUDA toolkit",
}


@rule(
    "ASC601",
    "cpp-extension",
    "C++/CUDA extensions built with `torch.utils.cpp_extension`",
    safety=REPORT_ONLY,
    hooks=("chain",),
    tokens=('cpp_extension',),
    doc="""
    ## What it does
    Lists `torch.utils.cpp_extension.load`, `load_inline`, `CUDAExtension`, `BuildExtension`, `CUDA_HOME`.
    The `.cu`/`.cpp` files of the project are scanned for `PYBIND11_MODULE`/`TORCH_LIBRARY` and their ops listed
    in `cuda_ops.csv`.

    ## Why
    CUDA kernels do not run on Ascend. Each op needs an NPU implementation: composed torch ops, a torch_npu
    fused op, or an Ascend C kernel registered for the `PrivateUse1` (NPU) key.

    ## Example
    `CUDAExtension("fused_gelu", ["fused_gelu.cpp", "fused_gelu_kernel.cu"])`

    ## Use instead
    Pure-torch fallbacks, torch_npu ops (`torch_npu.npu_*`), or an Ascend C custom op built with
    `torch_npu.utils.cpp_extension.NpuExtension`.

    ## Fix safety
    Report only.
    """,
    examples=[Example("from torch.utils.cpp_extension import load\next = load('x', ['x.cu'])\n", None)],
)
def cpp_extension(ctx, node: ast.AST) -> None:
    q = ctx.qname(node)
    if q in CPP_EXT and ctx.claim(node):
        what = describe_extension(ctx, node, q)
        ctx.report(node, api=q, severity=UNSUPPORTED,
                   reason=f"{CPP_EXT[q]}{' ' + what if what else ''}: CUDA code does not run on Ascend",
                   tip="port each op (its ops are in cuda_ops.csv): nearest NPU path is an Ascend C custom operator "
                       "(built with torch_npu.utils.cpp_extension.NpuExtension, registered for the NPU key), or "
                       "a PyTorch composite of torch / torch_npu.npu_* ops")
