"""The general rules (ASC0xx): the ``import torch_npu`` the engine adds (ASC001), and nothing left behind
silently (ASC099): every CUDA token that no rule converted or listed gets a review row.

After the rules ran, the file's CUDA-specific tokens (names resolved into ``torch.cuda``/``torch.backends.cudnn``,
``.cuda``/``.is_cuda`` attributes, strings that are exactly a CUDA device, ``"nccl"`` or
``"CUDA_VISIBLE_DEVICES"``) are checked against the changes and report rows; any that none covers is listed
as ``ASC099 unclaimed-cuda-token`` (severity ``review``).
"""

from __future__ import annotations

import ast

from ascendify.device.apis import is_device_string

from ..flags import own_name_ids
from ..model import CHANGE, REPORT, REVIEW, Finding
from ..spans import Spans
from .base import REPORT_ONLY, Example, rule


@rule(
    "ASC001",
    "add-torch-npu-import",
    "`import torch_npu` added once where the converted file needs it",
    hooks=(),
    doc="""
    ## What it does
    Adds `import torch_npu` once to every file that the `--to npu` conversion changed (unless ASC001 is
    ignored), right after the first `torch` import (else after `from __future__` imports or the module
    docstring). A file that already imports torch_npu gets nothing; a second run adds nothing. For
    `--to portable`, `import torch` is added the same way when a converted name needs it.

    ## Why
    `import torch_npu` registers the `npu` device, `torch.npu`, `Tensor.npu()` and the `hccl` backend (recent
    torch versions autoload it, the explicit import keeps the code clear and works on all versions).

    ## Example
    `import torch` followed by `x.cuda()`

    ## Use instead
    `import torch` / `import torch_npu` / `x.npu()`

    ## Fix safety
    Safe.
    """,
    examples=[
        Example('"""Doc."""\nfrom __future__ import annotations\nimport os\nimport torch\nx.cuda()\n',
                '"""Doc."""\nfrom __future__ import annotations\nimport os\nimport torch\nimport torch_npu\nx.npu()\n'),
        Example("import torch\nimport torch_npu\nx.cuda()\n", "import torch\nimport torch_npu\nx.npu()\n",
                fires=False),
    ],
)
def _add_import(ctx, node) -> None:  # pragma: no cover - the engine inserts the import
    return None


@rule(
    "ASC099",
    "unclaimed-cuda-token",
    "a CUDA-specific token that no other rule converted or listed",
    safety=REPORT_ONLY,
    hooks=(),
    doc="""
    ## What it does
    Lists CUDA-specific tokens left in the converted code that no rule handled: a `torch.cuda` name used in an
    unusual way, a `"cuda"` string outside any device position the analysis can see (`d = {"dev": "cuda"}`),
    an `"nccl"` string that does not reach a backend argument.

    ## Why
    Every CUDA-specific site must be either converted or listed; these rows are the remainder, for review.

    ## Example
    `settings = {"device": "cuda"}` (a device string in a dict the analysis does not follow)

    Not listed: reads of the script's own flags (`args.cuda` for `add_argument("--cuda", ...)`): those are
    the user's names, with one advice row (ASC805).

    ## Use instead
    Convert by hand, or pass the value through a device position the rules recognise.

    ## Fix safety
    Report only.
    """,
    examples=[Example('cfg = {"device": "cuda"}\n', None)],
)
def _doc_only(ctx, node) -> None:  # pragma: no cover - the scan below does the work
    return None


def cuda_tokens(ctx) -> list[tuple[ast.AST, str]]:
    """(node, what) for every CUDA-specific token of the file. Reads of the script's own flags
    (``args.cuda``, see ``flags.py``) are the user's names, not CUDA tokens."""
    out: list[tuple[ast.AST, str]] = []
    idx = ctx.index
    own = own_name_ids(ctx)
    for node in idx.attributes:
        if node.attr in ("cuda", "is_cuda") and ctx.qname(node) is None and id(node) not in own:
            out.append((node, f".{node.attr}"))
    names = ctx.imports.names
    for node in idx.chains:
        root = node
        while type(root) is ast.Attribute:
            root = root.value
        if type(root) is not ast.Name or root.id not in names or root.id in ctx.rewritten_locals:
            continue  # not rooted at an import, or its import statement was rewritten
        q = ctx.qname(node)
        if q and (q.startswith("torch.cuda") or q.startswith("torch.backends.cudnn")
                  or q.startswith("torch.backends.cuda") or "nccl" in q.lower()):
            out.append((node, q))
    for node in idx.strings:
        v = node.value
        if (is_device_string(v, "cuda") or v in ("nccl", "NCCL", "CUDA_VISIBLE_DEVICES")) and id(
                node) not in ctx.roles.kept:
            out.append((node, repr(v)))
    return out


def scan_leftovers(ctx) -> None:
    listed_lines: set[int] = set()
    spans: list[tuple[int, int]] = []
    for f in ctx.findings:
        if f.kind == CHANGE:
            spans.extend((e.start, e.end) for e in f.edits)
        elif f.kind == REPORT:
            listed_lines.update(range(f.line, f.end_line + 1))
    changed = Spans(spans)  # a token inside or across a change is the change's (a binary search, not a scan)
    for node, what in cuda_tokens(ctx):
        if node.lineno in listed_lines or changed.overlaps(*ctx.span(node)):
            continue
        ctx.findings.append(Finding("ASC099", REPORT, node.lineno, node.end_lineno or node.lineno, api=what,
                                    severity=REVIEW, message="CUDA-specific token not converted by any rule",
                                    tip="convert by hand (or pass it through a recognised device/backend position)",
                                    before=ctx.src.line_text(node.lineno).strip()))
        listed_lines.add(node.lineno)
