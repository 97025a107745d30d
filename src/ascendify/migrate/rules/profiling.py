"""Profiling on the NPU (ASC5xx): the profiler's CUDA activities, NVTX ranges and push/pop pairs."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from ..model import CHANGE, MANUAL, UNSUPPORTED, Edit
from .base import NPU, PORTABLE, Example, rule


@rule(
    "ASC501",
    "profiler-cuda",
    "CUDA activities of `torch.profiler` / `use_cuda=` of the autograd profiler",
    hooks=("chain", "call"),
    tokens=('profiler', 'cuda_'),
    doc="""
    ## What it does
    Rewrites `torch.profiler.ProfilerActivity.CUDA` to `ProfilerActivity.NPU` for `--to npu`, and
    `prof.key_averages().table(sort_by="cuda_time_total")` to the device-neutral `"device_time_total"`; reports
    `use_cuda=True` / `use_device="cuda"` arguments of `torch.autograd.profiler.profile` and, for `--to portable`,
    the CUDA activity.

    ## Why
    The CUDA activity records nothing on Ascend: the trace has no device timeline.

    ## Example
    `torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])`

    ## Use instead
    `ProfilerActivity.NPU` (registered by torch_npu), or `torch_npu.profiler.profile` for CANN-level traces.

    ## Fix safety
    Safe.
    """,
    examples=[
        Example(
            "from torch.profiler import ProfilerActivity\nacts = [ProfilerActivity.CUDA]\n",
            "from torch.profiler import ProfilerActivity\nimport torch_npu\nacts = [ProfilerActivity.NPU]\n",
        ),
        Example('print(prof.key_averages().table(sort_by="cuda_time_total"))\n',
                'print(prof.key_averages().table(sort_by="device_time_total"))\n', target="portable"),
    ],
    emits_npu=("torch.profiler.ProfilerActivity.NPU",),
)
def profiler_cuda(ctx, node: ast.AST) -> None:
    if isinstance(node, ast.Call):
        q = ctx.qname(node.func)
        if isinstance(node.func, ast.Attribute) and node.func.attr == "table":
            for kw in node.keywords:
                v = kw.value
                if kw.arg == "sort_by" and isinstance(v, ast.Constant) and v.value in _CUDA_SORT_KEYS:
                    seg = ctx.seg(v)
                    new = seg.replace("cuda_", "device_")
                    if ctx.claim(v):
                        ctx.change(v, [ctx.replace(v, new)] if seg[1:-1] == v.value else [None],
                                   api=f"sort_by={v.value!r}", message="profiler table sorted by CUDA time")
        if q and q.startswith("torch.autograd.profiler") or q and q.startswith("torch.profiler"):
            for kw in node.keywords:
                if kw.arg == "use_cuda" or (kw.arg == "use_device" and isinstance(kw.value, ast.Constant)
                                            and kw.value.value == "cuda"):
                    if ctx.claim(kw.value):
                        ctx.report(node, api=f"{q}({kw.arg}=...)", severity=MANUAL,
                                   reason="profiles CUDA kernels only",
                                   tip='use use_device="npu" (torch_npu) or activities=[...NPU]')
        return
    q = ctx.qname(node)
    if q != "torch.profiler.ProfilerActivity.CUDA" or not ctx.claim(node):
        return
    if ctx.target == NPU:
        a, b = ctx.span(node)
        if ctx.src.text[b - 4 : b] == "CUDA":
            ctx.change(node, [Edit(b - 4, b, "NPU")], api=q)
        else:
            ctx.change(node, [None], api=q)
    else:
        ctx.report(node, api=q, severity=MANUAL, reason="the CUDA activity records nothing on other devices",
                   tip="choose activities from torch.profiler.supported_activities()")


_CUDA_SORT_KEYS = frozenset({"cuda_time_total", "self_cuda_time_total", "cuda_time", "self_cuda_time",
                             "cuda_memory_usage", "self_cuda_memory_usage"})


@rule(
    "ASC502",
    "nvtx-range",
    "`with torch.cuda.nvtx.range(msg):` annotates a range for Nsight",
    hooks=("call",),
    tokens=('nvtx',),
    doc="""
    ## What it does
    Rewrites the NVTX range context manager `torch.cuda.nvtx.range(msg)` to
    `torch.autograd.profiler.record_function(msg)`, which shows in every PyTorch profiler (torch_npu's too).
    `range_push`/`range_pop` pairs are ASC503's.

    ## Why
    torch_npu has no NVTX: `torch.cuda.nvtx.*` fails on Ascend ("NVTX functions not installed").

    ## Example
    `with torch.cuda.nvtx.range("forward"): y = model(x)`

    ## Use instead
    `with torch.autograd.profiler.record_function("forward"): y = model(x)` (or `torch_npu.npu.mstx` for
    msprof timelines).

    ## Fix safety
    Safe: both are annotations with no effect on results. Calls with format arguments are listed instead.
    """,
    examples=[
        Example('import torch\nwith torch.cuda.nvtx.range("fwd"):\n    pass\n',
                'import torch\nwith torch.autograd.profiler.record_function("fwd"):\n    pass\n'),
        Example('import torch\nwith torch.cuda.nvtx.range("step {}", 3):\n    pass\n', None),
    ],
)
def nvtx_range(ctx, call: ast.Call) -> None:
    q = ctx.qname(call.func)
    if q != "torch.cuda.nvtx.range" or len(call.args) != 1 or call.keywords:
        return
    p = ctx.parent(call)
    if not isinstance(p, ast.withitem):
        return
    ctx.claim(call.func)
    ctx.change(call, [ctx.chain_edit(call.func, "torch.autograd.profiler.record_function")], api=q,
               message="NVTX range -> torch.autograd.profiler.record_function")


_NEWLINE = re.compile(r"(\r\n|\r|\n)")
NVTX_PUSH, NVTX_POP = "torch.cuda.nvtx.range_push", "torch.cuda.nvtx.range_pop"
RECORD_FUNCTION = "torch.autograd.profiler.record_function"


@dataclass
class NvtxPair:
    """A ``range_push(msg)`` statement and the ``range_pop()`` that closes it, in the same block."""

    push: ast.Expr
    pop: ast.Expr
    body: list[ast.stmt]
    inner: list[NvtxPair] = field(default_factory=list)


def _nvtx_stmt(ctx, stmt: ast.stmt) -> str | None:
    """"push" / "pop" for a statement that is only a range_push(msg) / range_pop() call, else None."""
    if not isinstance(stmt, ast.Expr) or not isinstance(stmt.value, ast.Call):
        return None
    call = stmt.value
    q = ctx.qname(call.func)
    if q == NVTX_PUSH and len(call.args) == 1 and not call.keywords and not isinstance(call.args[0], ast.Starred):
        return "push"
    if q == NVTX_POP and not call.args and not call.keywords:
        return "pop"
    return None


def _own_line(ctx, stmt: ast.stmt) -> bool:
    first = ctx.src.line_text(stmt.lineno)
    tail = ctx.src.line_text(stmt.end_lineno).encode("utf-8")[stmt.end_col_offset:].decode("utf-8", "replace")
    return not first[: stmt.col_offset].strip() and (not tail.strip() or tail.strip().startswith("#"))


def nvtx_pairs(ctx) -> list[NvtxPair]:
    """The range_push/range_pop pairs that ASC503 can turn into ``with`` blocks (computed once per file).

    A pair qualifies when both are statements on their own lines in the same block, pushes and pops match
    like brackets, and the statements between them contain no other push/pop (nested pairs of the same
    block excepted) and no string spanning lines (re-indenting would change it).
    """
    cached = getattr(ctx, "_nvtx_pairs", None)
    if cached is not None:
        return cached
    pairs: list[NvtxPair] = []
    blocks = {}
    if "range_p" not in ctx.src.text:
        ctx._nvtx_pairs = pairs
        return pairs
    for call in ctx.index.calls:
        if ctx.qname(call.func) in (NVTX_PUSH, NVTX_POP):
            stmt = ctx.parent(call)
            owner = ctx.parent(stmt) if isinstance(stmt, ast.Expr) else None
            if owner is not None:
                blocks[id(owner)] = owner
    for owner in blocks.values():
        for name in ("body", "orelse", "finalbody"):
            stmts = getattr(owner, name, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                pairs.extend(_pairs_in_block(ctx, stmts))
    ctx._nvtx_pairs = pairs
    return pairs


def _pairs_in_block(ctx, stmts: list[ast.stmt]) -> list[NvtxPair]:
    found: list[NvtxPair] = []
    stack: list[tuple[int, list[NvtxPair]]] = []  # (index of the push, pairs found inside it)
    for i, s in enumerate(stmts):
        kind = _nvtx_stmt(ctx, s)
        if kind == "push":
            stack.append((i, []))
        elif kind == "pop" and stack:
            j, inner = stack.pop()
            pair = NvtxPair(stmts[j], s, stmts[j + 1 : i], inner)
            if _pair_ok(ctx, pair):
                found.append(pair)
                (stack[-1][1] if stack else []).append(pair)
            elif stack:
                stack[-1][1].append(None)  # poisons the enclosing pair
    return found


def _pair_ok(ctx, pair: NvtxPair) -> bool:
    if None in pair.inner or not (_own_line(ctx, pair.push) and _own_line(ctx, pair.pop)):
        return False
    inner_stmts: set[int] = set()
    todo = list(pair.inner)
    while todo:
        p = todo.pop()
        inner_stmts |= {id(p.push), id(p.pop)}
        todo.extend(p.inner)
    for stmt in pair.body:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Call) and ctx.qname(n.func) in (NVTX_PUSH, NVTX_POP) and id(
                    ctx.parent(n)) not in inner_stmts:
                return False
            if isinstance(n, (ast.Constant, ast.JoinedStr)) and n.lineno != n.end_lineno and (
                    isinstance(n, ast.JoinedStr) or isinstance(n.value, (str, bytes))):
                return False
    return True


def paired_nvtx_calls(ctx) -> set[int]:
    """ids of the range_push/range_pop call chains that ASC503 converts (ASC204 leaves them to it)."""
    return {id(p.push.value.func) for p in nvtx_pairs(ctx)} | {id(p.pop.value.func) for p in nvtx_pairs(ctx)}


@rule(
    "ASC503",
    "nvtx-push-pop",
    "`torch.cuda.nvtx.range_push(msg)` ... `range_pop()` annotates a range for Nsight",
    hooks=("module",),
    tokens=('nvtx',),
    doc="""
    ## What it does
    Turns a `torch.cuda.nvtx.range_push(msg)` statement and the `torch.cuda.nvtx.range_pop()` that closes it
    in the same block into `with torch.autograd.profiler.record_function(msg):` around the statements between
    them (re-indented; nested pairs too). Pairs it cannot see whole (a pop in another block or function,
    code between them that holds another push or pop, a string spanning lines, a pop in an `except`) stay
    listed by ASC204.

    ## Why
    torch_npu has no NVTX: `torch.cuda.nvtx.*` fails on Ascend ("NVTX functions not installed") and on the CPU.
    `record_function` ranges show in every PyTorch profiler trace (torch_npu's too). torch_npu's msprof
    annotations (`torch_npu.npu.mstx`) would be the Ascend-only alternative, but its range methods are not in
    the verified torch_npu API list, so they are not emitted.

    ## Example
    `torch.cuda.nvtx.range_push(f"iter{it}")`, `out = model(x)`, `torch.cuda.nvtx.range_pop()`

    ## Use instead
    `with torch.autograd.profiler.record_function(f"iter{it}"):` / `    out = model(x)`

    ## Fix safety
    Safe: annotations only. The range now also closes when the code between raises or returns early (the
    NVTX stack would otherwise stay unbalanced).
    """,
    examples=[
        Example(
            'import torch\nfor it in range(3):\n    torch.cuda.nvtx.range_push(f"iter{it}")\n    out = model(x)\n'
            "    loss = out.sum()  # scalar\n    torch.cuda.nvtx.range_pop()\n    print(loss)\n",
            'import torch\nfor it in range(3):\n    with torch.autograd.profiler.record_function(f"iter{it}"):\n'
            "        out = model(x)\n        loss = out.sum()  # scalar\n    print(loss)\n",
        ),
        Example(
            'import torch\ntorch.cuda.nvtx.range_push("step")\ntorch.cuda.nvtx.range_push("fwd")\ny = f(x)\n'
            "torch.cuda.nvtx.range_pop()\n\nz = g(y)\ntorch.cuda.nvtx.range_pop()\n",
            'import torch\nwith torch.autograd.profiler.record_function("step"):\n'
            '    with torch.autograd.profiler.record_function("fwd"):\n        y = f(x)\n\n    z = g(y)\n',
            target=PORTABLE,
        ),
        Example('import torch\ntorch.cuda.nvtx.range_push("a")\ntorch.cuda.nvtx.range_pop()\n',
                'import torch\nwith torch.autograd.profiler.record_function("a"):\n    pass\n'),
        Example('import torch\ntorch.cuda.nvtx.range_push("a")\nif x:\n    torch.cuda.nvtx.range_pop()\n', None),
        Example(
            'import torch\ndef f(x):\n    torch.cuda.nvtx.range_push("b")\n    if x:\n        torch.cuda.synchronize()\n'
            "    torch.cuda.nvtx.range_pop()\n",
            'import torch\ndef f(x):\n    with torch.autograd.profiler.record_function("b"):\n        if x:\n'
            "            if torch.accelerator.is_available():\n                torch.accelerator.synchronize()\n",
            target=PORTABLE,
        ),
    ],
)
def nvtx_push_pop(ctx, tree: ast.Module) -> None:
    pairs = nvtx_pairs(ctx)
    if not pairs:
        return
    deleted = {p.pop.lineno for p in pairs}
    # changes made by other rules whose new text spans lines (a guard `if ...:` + indented call): inside a
    # converted range their continuation lines need the extra indentation too
    multiline = [(f, i) for f in ctx.findings if f.kind == CHANGE for i, e in enumerate(f.edits)
                 if "\n" in e.text or "\r" in e.text]
    # outer pairs are checked after their inner pairs: one that cannot be converted poisons its outer pairs
    failed: set[int] = set()
    for pair in sorted(pairs, key=lambda p: p.pop.lineno - p.push.lineno):
        _convert_pair(ctx, pair, deleted, multiline, failed)


def _convert_pair(ctx, pair: NvtxPair, deleted: set[int], multiline: list, failed: set[int]) -> None:
    src = ctx.src
    nl = src.newline
    push_call, api = pair.push.value, f"{NVTX_PUSH} / range_pop"
    lo = src.line_starts[pair.push.end_lineno] if pair.push.end_lineno < len(src.line_starts) else len(src.text)
    hi = src.line_starts[pair.pop.lineno - 1]
    inside = [(f, i) for f, i in multiline if lo <= f.edits[i].start < hi]
    clash = any(f.edits[i].end > hi for f, i in inside) or any(id(p) in failed for p in pair.inner)
    if clash:
        failed.add(id(pair))
        for stmt, what in ((pair.push, NVTX_PUSH), (pair.pop, NVTX_POP)):
            ctx.claim(stmt.value.func)
            ctx.report(stmt, api=what, severity=UNSUPPORTED, reason="NVTX exists only on CUDA, and this range "
                       "could not be turned into a `with` block here (a change reaches past its end)",
                       tip=f"wrap the statements in `with {RECORD_FUNCTION}(...)` by hand")
        return
    indent = src.line_text(pair.push.lineno)[: pair.push.col_offset]
    unit = _indent_unit(ctx, pair.push, indent)
    arg = push_call.args[0]
    pa, pb = ctx.span(pair.push)
    header = f"with {ctx.ref(RECORD_FUNCTION)}({ctx.hole(arg)}):"
    edits = [Edit(pa, pb, header)]
    body_lines = [ln for ln in range(pair.push.end_lineno + 1, pair.pop.lineno)
                  if ln not in deleted and src.line_text(ln).strip()]
    for ln in body_lines:
        pos = src.line_starts[ln - 1]
        edits.append(Edit(pos, pos, unit))
    pop_start = src.line_starts[pair.pop.lineno - 1]
    pop_end = src.line_starts[pair.pop.end_lineno] if pair.pop.end_lineno < len(src.line_starts) else len(src.text)
    comment = src.line_text(pair.pop.end_lineno).encode("utf-8")[pair.pop.end_col_offset:].decode(
        "utf-8", "replace").strip()
    keep = f"{indent}{unit}{comment}{nl}" if comment else ""
    if not pair.body:  # nothing between: the with block needs a statement
        keep = f"{indent}{unit}pass{'  ' + comment if comment else ''}{nl}"
    if pop_end == len(src.text) and not src.text.endswith(("\n", "\r")):
        keep = keep.rstrip("\r\n")
    edits.append(Edit(pop_start, pop_end, keep))
    for n in (push_call.func, pair.pop.value.func):
        ctx.claim(n)
    if ctx.change(pair.push, edits, api=api, message="NVTX range_push/range_pop -> with record_function(...)"):
        for f, i in inside:
            e = f.edits[i]
            f.edits[i] = Edit(e.start, e.end, _NEWLINE.sub(lambda m: m.group(1) + unit, e.text))
            f.after = _NEWLINE.sub(lambda m: m.group(1) + unit, f.after)


def _indent_unit(ctx, stmt: ast.stmt, indent: str) -> str:
    """One level of indentation as the file writes it (the step from the enclosing block, else 4 spaces)."""
    owner = ctx.parent(stmt)
    if isinstance(owner, ast.stmt):
        outer = ctx.src.line_text(owner.lineno)[: owner.col_offset]
        if indent.startswith(outer) and len(indent) > len(outer):
            return indent[len(outer):]
    return "\t" if "\t" in indent else "    "
