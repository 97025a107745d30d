"""A quick look at the entry script for CUDA checks that run-time redirection cannot change.

``device.type == "cuda"``, ``"cuda" in str(device)`` and ``backend == "nccl"`` compare plain strings: under
redirection the device type is the target's (``"npu"``) and the backend ``hccl``, so such checks take their
non-CUDA branch. The comparisons are found with :mod:`ast` (cheap: one file) and listed in the report as
*findings*, with the line; ``ascendify migrate`` rewrites them for good.

>>> [f["line"] for f in scan_source("if x.device.type == 'cuda':\\n    pass\\nname = 'cuda.pt'\\n")]
[1]
"""

from __future__ import annotations

import ast
from typing import Any

from ascendify.auto.record import short_path

_WORDS = {"cuda": "the device type is the target's", "nccl": "the backend is the target's (hccl/gloo)"}


def _literal(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        v = node.value.split(":")[0] if node.value.startswith("cuda:") else node.value
        return v if v.lower() in _WORDS else None
    return None


def scan_source(src: str, filename: str = "<script>") -> list[dict[str, Any]]:
    try:
        tree = ast.parse(src, filename)
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for op, (a, b) in zip(node.ops, zip(operands, operands[1:], strict=False), strict=False):
            if isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn | ast.Is | ast.IsNot):
                lit = _literal(a) or _literal(b)
                if lit:
                    what = ast.unparse(node)
                    out.append({"file": filename, "line": node.lineno, "code": what[:120],
                                "message": f"compares with {lit!r}: under redirection {_WORDS[lit.lower()]}, "
                                           "so this takes its non-CUDA branch"})
                    break
    return out


def scan_file(path: str) -> list[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as f:
            return scan_source(f.read(), short_path(path))
    except (OSError, UnicodeDecodeError):
        return []
