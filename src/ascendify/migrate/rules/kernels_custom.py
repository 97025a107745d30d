"""Custom CUDA kernels that no rule can rewrite (Triton, ``torch.utils.cpp_extension``): what each does and the
nearest NPU path, so a person can port them. ASC602 lists the kernels (with :func:`describe_triton`), ASC613
each launch, ASC601 the C++/CUDA extensions (with :func:`describe_extension`).
"""

from __future__ import annotations

import ast

from ..model import UNSUPPORTED
from .base import REPORT_ONLY, Example, rule

TRITON_DECORATORS = ("triton.jit", "triton.autotune", "triton.heuristics")
OTHER_PATHS = "or triton-ascend (Triton for Atlas A2/A3), or an Ascend C custom operator"


def describe_triton(ctx, fn: ast.FunctionDef) -> tuple[str, str]:
    """(what the kernel computes, the nearest NPU path), read from the ``tl.*`` calls in its body."""
    ops: set[str] = set()
    loads = stores = 0
    for n in ast.walk(fn):
        if isinstance(n, ast.Call):
            q = ctx.qname(n.func) or ""
            if q.startswith("triton.language."):
                op = q.rsplit(".", 1)[1]
                ops.add(op)
                loads += op == "load"
                stores += op == "store"
            elif isinstance(n.func, ast.Attribute):  # x.to(...), tl.math.rsqrt via an alias...
                ops.add(n.func.attr)
    io = f"{loads} load{'s' * (loads != 1)}, {stores} store{'s' * (stores != 1)}"
    exp, red = "exp" in ops or "exp2" in ops, bool(ops & {"sum", "max", "min", "reduce"})
    if "dot" in ops and exp:
        return f"attention: softmax(q·kᵀ)·v in tiles ({io})", \
            "torch_npu.npu_fusion_attention, or torch.nn.functional.scaled_dot_product_attention"
    if "dot" in ops:
        return f"a tiled matrix multiply ({io})", "torch.matmul (the NPU's Cube unit), or torch_npu.npu_grouped_matmul" \
            " for grouped (MoE) products"
    if exp and red:
        return f"a softmax-style row reduction ({io})", "torch.softmax, or torch_npu.npu_scaled_masked_softmax"
    if ("cos" in ops or "sin" in ops) and not red:
        return f"a rotary position embedding ({io})", "torch_npu.npu_rotary_mul"
    if ops & {"sqrt", "rsqrt"} and red:
        return f"a normalization: a row reduction then a rescale, RMSNorm/LayerNorm-style ({io})", \
            "torch_npu.npu_rms_norm / npu_add_rms_norm (RMSNorm), or torch.nn.functional.layer_norm"
    if "sigmoid" in ops and not red:
        return f"an elementwise gated activation (SiLU/SwiGLU-style, {io})", \
            "torch_npu.npu_swiglu, or torch.nn.functional.silu(a) * b"
    if any(o.startswith("atomic_") for o in ops):
        return f"a scatter with atomic accumulation ({io})", "Tensor.index_add_ / scatter_add_"
    if red:
        return f"a reduction ({io})", "the matching torch reduction (sum, max, ...)"
    return f"elementwise arithmetic ({io})", "a PyTorch composite of torch ops (torch.compile fuses it on the NPU)"


def triton_kernels(ctx) -> dict[str, ast.FunctionDef]:
    """This file's Triton kernels by name."""
    cached = getattr(ctx, "_triton_kernels", None)
    if cached is None:
        cached = {}
        for fn in ctx.index.funcs:
            if isinstance(fn, ast.FunctionDef) and any(
                    (ctx.qname(getattr(d, "func", d)) or "") in TRITON_DECORATORS for d in fn.decorator_list):
                cached[fn.name] = fn
        ctx._triton_kernels = cached
    return cached


@rule(
    "ASC613",
    "triton-launch",
    "a launch of a Triton kernel (`kernel[grid](...)`)",
    safety=REPORT_ONLY,
    hooks=("call",),
    tokens=("triton",),
    doc="""
    ## What it does
    Lists every launch `kernel[grid](args)` of a `@triton.jit` kernel of the file, with what the kernel
    computes (read from its `tl.*` calls: a matrix multiply, attention, a softmax, a normalization, a
    rotary embedding, a gated activation, elementwise arithmetic...) and the nearest NPU path: the torch_npu
    fused operator or torch op that computes the same, triton-ascend, or an Ascend C custom operator.
    The kernel definitions are listed by ASC602 with the same description.

    ## Why
    Upstream Triton compiles for NVIDIA and AMD GPUs only; each launch site is where the replacement goes.

    ## Example
    `_add_rmsnorm_kernel[(rows,)](x, r, w, out, n, eps, BLOCK=block)`

    ## Use instead
    `torch_npu.npu_add_rms_norm(x, r, w, eps)[0]`, or the PyTorch reference the kernel stands for.

    ## Fix safety
    Report only: the kernel's contract (its pointers and strides) needs a person.
    """,
    examples=[Example(
        "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x_ptr, y_ptr):\n"
        "    i = tl.program_id(0)\n    tl.store(y_ptr + i, tl.load(x_ptr + i) * 2)\nk[(4,)](x, y)\n", None)],
)
def triton_launch(ctx, call: ast.Call) -> None:
    f = call.func
    if type(f) is not ast.Subscript or type(f.value) is not ast.Name:
        return
    fn = triton_kernels(ctx).get(f.value.id)
    if fn is None or not ctx.claim(call):
        return
    what, nearest = describe_triton(ctx, fn)
    ctx.report(call, api=f"{fn.name}[grid](...)", severity=UNSUPPORTED,
               reason=f"launches Triton kernel `{fn.name}` (line {fn.lineno}): {what}",
               tip=f"nearest NPU path: {nearest}; {OTHER_PATHS}")


def describe_extension(ctx, node: ast.AST, q: str) -> str:
    """`` `name` from a.cpp, b.cu (functions f, g)`` for a cpp_extension call, read from its literal arguments."""
    call = ctx.parent(node)
    if not (isinstance(call, ast.Call) and call.func is node):
        return ""
    kws = {k.arg: k.value for k in call.keywords if k.arg}
    name = call.args[0] if call.args else kws.get("name")
    parts = []
    if isinstance(name, ast.Constant) and isinstance(name.value, str):
        parts.append(f"`{name.value}`")
    srcs = call.args[1] if len(call.args) > 1 and not q.endswith("load_inline") else kws.get("sources")
    files = _strings(srcs)
    if files:
        parts.append("from " + ", ".join(files[:4]) + (" ..." if len(files) > 4 else ""))
    if q.endswith("load_inline"):
        cuda = kws.get("cuda_sources", call.args[2] if len(call.args) > 2 else None)
        if cuda is not None:
            parts.append("with inline CUDA sources")
        funcs = _strings(kws.get("functions"))
        if funcs:
            parts.append("exposing " + ", ".join(funcs[:6]))
    return " ".join(parts)


def _strings(node: ast.AST | None) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []
