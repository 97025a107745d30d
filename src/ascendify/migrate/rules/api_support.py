"""Torch APIs with limits on Ascend: the official support list, ops without an NPU kernel, float64."""

from __future__ import annotations

import ast
import re
from functools import cache

from ascendify import knowledge

from ..model import UNSUPPORTED
from .base import NPU, REPORT_ONLY, Example, rule

# A small phrase table for an English gloss of the Chinese limit texts (the original is always kept).
_PHRASES = [
    ("可能回退至CPU执行", "may fall back to the CPU"),
    ("当前仅支持推理场景，不支持训练场景", "inference only, not training"),
    ("不支持多进程加载NPU数据", "no multi-process loading of NPU data"),
    ("不支持double数据类型", "double (float64) is not supported"),
    ("不支持稀疏张量", "sparse tensors are not supported"),
    ("目前嵌套张量只支持创建，不支持其他操作", "nested tensors: creation only"),
    ("仅支持", " supports only "),
    ("不支持", "not supported: "),
    ("，", ", "),
    ("、", ", "),
    ("和", " and "),
    ("：", ": "),
    ("；", "; "),
]
_CJK = re.compile(r"[\u3000-\u9fff\uff00-\uffef]")
# "`input`仅支持fp16，fp32": a limit on dtypes only (severity "dtype-limits", easy to filter out)
_DTYPE_ONLY = re.compile(r"^`\w+`仅支持[a-z0-9，, ]+$")


def gloss(text: str) -> str:
    """English gloss of a limit text when the phrase table covers it entirely, else ''."""
    out = text
    for zh, en in _PHRASES:
        out = out.replace(zh, en)
    out = re.sub(r"\s+", " ", out).strip()
    return "" if _CJK.search(out) else out


@cache
def _tensor_methods_without_kernel() -> dict[str, str]:
    out = {}
    for _name, op in knowledge.ops_without_npu_kernel().items():
        for api in op.get("python_api") or []:
            if api.startswith("torch.Tensor."):
                out[api[len("torch.Tensor.") :]] = api
    return out


@cache
def _apis_without_kernel() -> dict[str, str]:
    out = {}
    for name, op in knowledge.ops_without_npu_kernel().items():
        for api in op.get("python_api") or []:
            if not api.startswith("torch.Tensor.") and not api.startswith("torch._C"):
                out[api] = name
    return out


def _is_call_or_use(ctx, node) -> bool:
    p = ctx.parent(node)
    return isinstance(p, ast.Call) and p.func is node


@rule(
    "ASC901",
    "unsupported-api",
    "a torch API the official support list marks unsupported on Ascend",
    safety=REPORT_ONLY,
    targets=(NPU, "portable"),
    hooks=("chain",),
    category="api",
    doc="""
    ## What it does
    Lists every call of a torch API that Huawei's PyTorch 2.13 support list marks unsupported on every chip
    family (A2, A3, 950DT), with the list's note.

    ## Why
    These calls fail (or fall back to the CPU) on an NPU even when the rest of the script is converted.

    ## Example
    `torch.nn.utils.rnn.pack_padded_sequence(x, lengths)`

    ## Use instead
    See the row's tip; often a composition of supported ops.

    ## Fix safety
    Report only.
    """,
    examples=[Example("import torch\ny = torch.poisson(rates)\n", None)],
)
def unsupported_api(ctx, node: ast.AST) -> None:
    q = ctx.qname(node)
    if not q or q not in knowledge.unsupported_apis() or not _is_call_or_use(ctx, node):
        return
    note = knowledge.api_support()[q].get("constraints") or ""
    ctx.report(node, api=q, severity=UNSUPPORTED, reason=note or "unsupported on Ascend (official support list)",
               gloss=gloss(note) if note else "", tip="replace with supported ops, or run this part on the CPU")


@rule(
    "ASC902",
    "limited-api",
    "a torch API that is supported on Ascend with limits",
    safety=REPORT_ONLY,
    hooks=("chain",),
    category="api",
    doc="""
    ## What it does
    Lists calls of torch APIs whose entry in the official support list carries a limit (dtypes, shapes,
    CPU fallback, inference only), with the limit text verbatim (Chinese, as published) and an English gloss.
    Each API is listed at its first call in a file, with the number of calls. Limits that only list dtypes
    get severity `dtype-limits` (easy to filter out), the others `limited`.

    ## Why
    The call runs, but inputs outside the limits fail or silently take a slow path.

    ## Example
    `torch.nn.functional.gelu(x, approximate="none")` (the list says: `approximate` only supports `tanh`)

    ## Use instead
    Keep inputs within the limits (see the row).

    ## Fix safety
    Report only.
    """,
    examples=[Example("import torch\ny = torch.nn.functional.gelu(x)\n", None)],
)
def limited_api(ctx, node: ast.AST) -> None:
    q = ctx.qname(node)
    if not q or not _is_call_or_use(ctx, node):
        return
    entry = knowledge.api_support().get(q)
    if not entry or entry.get("supported_any") is False or not entry.get("constraints"):
        return
    seen = ctx.__dict__.setdefault("_limited_seen", {})
    if q in seen:
        finding, n = seen[q]
        seen[q] = (finding, n + 1)
        finding.tip = f"{n + 1} calls in this file (first one shown)"
        return
    note = entry["constraints"]
    severity = "dtype-limits" if _DTYPE_ONLY.match(note.strip()) else "limited"
    ctx.report(node, api=q, severity=severity, reason=note, gloss=gloss(note), tip="")
    seen[q] = (ctx.findings[-1], 1)


@rule(
    "ASC903",
    "no-npu-kernel",
    "an op with no NPU kernel (runs on the CPU, or fails with TORCH_NPU_FALLBACK_CPU_DISABLE=1)",
    safety=REPORT_ONLY,
    hooks=("chain", "call"),
    category="api",
    doc="""
    ## What it does
    Lists calls of ops for which torch_npu 2.13 registers no NPU kernel (`torch.lgamma`, `x.digamma()`, most of
    `torch.linalg`, special functions...), matched through the op coverage table's Python APIs.

    ## Why
    On an NPU these ops copy their inputs to the CPU, run there and copy back ("CAUTION ... will fall back to
    run on the CPU"): slow in a training loop, and an error when `TORCH_NPU_FALLBACK_CPU_DISABLE=1`.

    ## Example
    `torch.special.i1e(x)`, `x.lgamma()`

    ## Use instead
    A formulation with supported ops, or compute it once outside the hot loop.

    ## Fix safety
    Report only. Method calls are matched by name (`x.lgamma()`), so an unrelated object with such a method
    would be listed too.
    """,
    examples=[Example("import torch\ny = torch.lgamma(x)\n", None)],
)
def no_npu_kernel(ctx, node: ast.AST) -> None:
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute) and ctx.qname(f) is None:
            api = _tensor_methods_without_kernel().get(f.attr)
            if api:
                ctx.report(node, api=api, severity="no-kernel", reason="no NPU kernel: falls back to the CPU",
                           tip="avoid in hot loops; set TORCH_NPU_FALLBACK_CPU_DISABLE=1 to find them at run time")
        return
    q = ctx.qname(node)
    if q and q in _apis_without_kernel() and q not in knowledge.unsupported_apis() and _is_call_or_use(ctx, node):
        ctx.report(node, api=q, severity="no-kernel", reason="no NPU kernel: falls back to the CPU",
                   tip="avoid in hot loops; set TORCH_NPU_FALLBACK_CPU_DISABLE=1 to find them at run time")


_F64 = {"torch.float64", "torch.double", "torch.DoubleTensor", "torch.cuda.DoubleTensor", "torch.complex128",
        "torch.cdouble"}


@rule(
    "ASC904",
    "float64",
    "float64 (double) tensors",
    safety=REPORT_ONLY,
    hooks=("chain", "call"),
    category="api",
    doc="""
    ## What it does
    Lists uses of `torch.float64`/`torch.double`, `torch.cuda.DoubleTensor`, `torch.DoubleTensor` and
    `.double()` calls.

    ## Why
    Many Ascend kernels reject float64 (the support list's dtype notes), and torch_npu's automatic migration
    silently turns `torch.cuda.DoubleTensor` into float32.

    ## Example
    `x = x.double()`

    ## Use instead
    float32 on the device; keep float64 reductions on the CPU where precision matters.

    ## Fix safety
    Report only.
    """,
    examples=[Example("import torch\nx = torch.zeros(3, dtype=torch.float64)\n", None)],
)
def float64(ctx, node: ast.AST) -> None:
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "double" and not node.args and ctx.qname(f) is None:
            ctx.report(node, api=".double()", severity="float64",
                       reason="float64 is partially supported on Ascend", tip="use float32 on the device")
        return
    q = ctx.qname(node)
    if q in _F64:
        ctx.report(node, api=q, severity="float64", reason="float64 is partially supported on Ascend"
                   + (" (torch_npu's transfer_to_npu turns it into float32)" if "DoubleTensor" in q else ""),
                   tip="use float32 on the device")

