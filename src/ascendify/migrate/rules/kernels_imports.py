"""Imports of CUDA-only packages whose every use a kernel rule rewrote: removed with them.

``from flash_attn import flash_attn_func`` fails on an NPU (flash-attn does not install there); once every
``flash_attn_func(...)`` of the file is a ``npu_fusion_attention`` call, the import goes too. A name still used
anywhere else (a call that could not be mapped, ``flash_attn_func = None`` in an ``except ImportError``, a
test ``if flash_attn_func is not None``) keeps its import, and the import stays listed.
"""

from __future__ import annotations

import ast

from ..model import CHANGE, REPORT, holes
from .base import Example, rule

# packages whose imports this cleans, and the rules whose rewrites count
PACKAGES = ("flash_attn", "xformers", "apex")
REWRITING_RULES = frozenset({"ASC608", "ASC609", "ASC610", "ASC611"})
IMPORT_REPORTS = frozenset({"ASC603", "ASC604", "ASC606"})  # the report-only rows listing those imports


def _covered(spans: list[tuple[int, int, list[tuple[int, int]]]], a: int, b: int) -> bool:
    """[a, b) is replaced by some edit (inside its span, outside the holes that keep the original text)."""
    for s, e, hs in spans:
        if s <= a and b <= e and not any(ha <= a and b <= hb for ha, hb in hs):
            return True
    return False


def _own_lines(ctx, stmt: ast.stmt) -> bool:
    src = ctx.src
    first = src.line_text(stmt.lineno)
    tail = src.line_text(stmt.end_lineno).encode("utf-8")[stmt.end_col_offset:].decode("utf-8", "replace")
    return not first[: stmt.col_offset].strip() and (not tail.strip() or tail.strip().startswith("#"))


@rule(
    "ASC612",
    "replaced-kernel-import",
    "an import of flash_attn / xformers / apex whose every use was rewritten",
    hooks=("module",),
    tokens=PACKAGES,
    doc="""
    ## What it does
    Removes the names of a `flash_attn`, `xformers` or `apex` import whose every use in the file was rewritten
    by ASC608-ASC611 (the whole statement when none is left; `pass` where it was the only statement of a
    block). A name used anywhere else keeps its import, and ASC603/ASC604/ASC606 keep listing it.

    ## Why
    These packages do not install on Ascend: the import alone would fail once the calls are converted.

    ## Example
    `from flash_attn import flash_attn_func` with every `flash_attn_func(...)` converted

    ## Use instead
    (the import removed)

    ## Fix safety
    Safe: only names with no use left are removed.
    """,
    examples=[
        Example("from flash_attn import flash_attn_func, flash_attn_varlen_func\nimport torch\n"
                "o = flash_attn_func(q, k, v)\np = flash_attn_varlen_func\n",
                "from flash_attn import flash_attn_varlen_func\nimport torch\nimport torch_npu\n"
                "o = torch_npu.npu_fusion_attention(q, k, v, q.shape[2], \"BSND\",\n"
                "                                   scale=q.shape[-1] ** -0.5)[0]\np = flash_attn_varlen_func\n"),
        Example("try:\n    from flash_attn import flash_attn_func\nexcept ImportError:\n    flash_attn_func = None\n"
                "import torch\no = flash_attn_func(q, k, v)\n",
                "try:\n    from flash_attn import flash_attn_func\nexcept ImportError:\n    flash_attn_func = None\n"
                "import torch\nimport torch_npu\no = torch_npu.npu_fusion_attention(q, k, v, q.shape[2], \"BSND\",\n"
                "                                   scale=q.shape[-1] ** -0.5)[0]\n", fires=False),
    ],
)
def replaced_kernel_import(ctx, tree: ast.Module) -> None:
    spans = [(e.start, e.end, holes(e)) for f in ctx.findings if f.kind == CHANGE and f.rule in REWRITING_RULES
             for e in f.edits]
    if not spans:
        return
    stmts = [n for n in ctx.index.imports if _package_import(n)]
    if not stmts:
        return
    uses: dict[str, list[ast.Name]] = {}
    for node in ctx.index.order:
        if type(node) is ast.Name:
            uses.setdefault(node.id, []).append(node)
    for stmt in stmts:
        keep, drop = [], []
        for alias in stmt.names:
            local = alias.asname or (alias.name.split(".")[0] if isinstance(stmt, ast.Import) else alias.name)
            refs = uses.get(local, [])
            if refs and all(_covered(spans, *ctx.span(r)) for r in refs):
                drop.append(alias)
            else:
                keep.append(alias)
        if not drop:
            continue
        if keep:
            names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in keep)
            text = f"from {stmt.module} import {names}" if isinstance(stmt, ast.ImportFrom) else f"import {names}"
            ctx.change(stmt, [ctx.replace(stmt, text)], api=_module(stmt),
                       message=f"drop {', '.join(a.name for a in drop)} from the import (every use converted)")
            continue
        ctx.change(stmt, [_delete(ctx, stmt)], api=_module(stmt),
                   message="import removed: every use converted")
        ctx.findings[:] = [f for f in ctx.findings if not (f.kind == REPORT and f.rule in IMPORT_REPORTS
                                                           and f.line == stmt.lineno)]


def _module(stmt: ast.stmt) -> str:
    return stmt.module if isinstance(stmt, ast.ImportFrom) else ", ".join(a.name for a in stmt.names)


def _package_import(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.ImportFrom):
        mods = [stmt.module or ""] if not stmt.level else []
    else:
        mods = [a.name for a in stmt.names]
    return bool(mods) and all(m.split(".")[0] in PACKAGES for m in mods)


def _delete(ctx, stmt: ast.stmt):
    """The edit removing ``stmt``: its whole lines, or ``pass`` where a block would be left empty."""
    from ..model import Edit

    parent = ctx.parent(stmt)
    block = next((getattr(parent, f) for f in ("body", "orelse", "finalbody", "handlers")
                  if stmt in (getattr(parent, f, None) or [])), None) if parent is not None else None
    if block is not None and len(block) == 1 or not _own_lines(ctx, stmt):
        return ctx.replace(stmt, "pass")
    src = ctx.src
    a = src.line_starts[stmt.lineno - 1]
    b = src.line_starts[stmt.end_lineno] if stmt.end_lineno < len(src.line_starts) else len(src.text)
    return Edit(a, b, "")
