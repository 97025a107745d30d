"""A quick look at the user's files for CUDA checks that run-time redirection cannot change.

``device.type == "cuda"``, ``"cuda" in str(device)`` and ``backend == "nccl"`` compare strings. Where the
operand comes from a redirected device (``x.type``, ``str(x.device)``), it is the target's (``"npu"``) and the
check takes its non-CUDA branch. Where it is a plain value (``device_type == "cuda"`` with ``device_type = "cuda"``
a string of the script's), it may still say ``"cuda"``, and then the CUDA branch runs (its CUDA calls
redirected): which one happens is known only at run time. The comparisons are found with :mod:`ast` (cheap:
one file) and listed in the report as *findings*, with the line; a file compiled by ``ascendify run``
(:mod:`ascendify.auto.rewrite`) has each such operand watched, and its finding then says what happened.
``ascendify migrate`` rewrites them for good.

>>> [f["line"] for f in scan_source("if x.device.type == 'cuda':\\n    pass\\nname = 'cuda.pt'\\n")]
[1]
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

from ascendify.program.frames import short_path

_WORDS = {"cuda": "the device type is the target's", "nccl": "the backend is the target's (hccl/gloo)"}
_OPS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)


def _literal(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        v = node.value.split(":")[0] if node.value.startswith("cuda:") else node.value
        return v if v.lower() in _WORDS else None
    return None


def from_device(node: ast.AST) -> bool:
    """``node`` reads a device (``x.device``, ``torch.device(...)``) or its type (``x.type``,
    ``str(x.device)``): under redirection it is the target's, whatever the program wrote."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and node.args:
        return from_device(node.args[0])
    if isinstance(node, ast.Attribute):
        return node.attr in ("type", "device")
    if isinstance(node, ast.Call):
        f = node.func
        return isinstance(f, ast.Attribute) and f.attr == "device" or isinstance(f, ast.Name) and f.id == "device"
    return False


def static_message(lit: str, operand: ast.AST) -> str:
    """What a check of ``operand`` against ``lit`` does under redirection, as far as the source tells."""
    word = lit.lower()
    if word == "cuda" and from_device(operand):
        return f"compares with {lit!r}: under redirection {_WORDS[word]}, so this takes its non-CUDA branch"
    what = ast.unparse(operand)[:60]
    target = "device type ('npu'...)" if word == "cuda" else "backend ('hccl'/'gloo')"
    return (f"compares `{what}` with {lit!r}: this may take its non-CUDA branch. A {target} read from the "
            f"redirected program is the target's; a plain string that still says {lit!r} keeps the CUDA branch "
            "(whose CUDA calls are redirected)")


def checks(tree: ast.AST) -> Iterator[tuple[ast.Compare, int, int, str]]:
    """(comparison, index of the operand compared with the literal, index of the literal, the literal's word)
    for each CUDA check: the first pair of each comparison that compares with ``"cuda"``/``"nccl"``."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for i, op in enumerate(node.ops):
            if isinstance(op, _OPS):
                a, b = operands[i], operands[i + 1]
                lit = _literal(a) or _literal(b)
                if lit:
                    yield (node, i + 1, i, lit) if _literal(a) else (node, i, i + 1, lit)
                    break


def finding(node: ast.Compare, operand: ast.AST, lit: str, filename: str) -> dict[str, Any]:
    return {"file": filename, "line": node.lineno, "code": ast.unparse(node)[:120],
            "message": static_message(lit, operand)}


def scan_source(src: str, filename: str = "<script>") -> list[dict[str, Any]]:
    try:
        tree = ast.parse(src, filename)
    except SyntaxError:
        return []
    out = []
    for node, i, _, lit in sorted(checks(tree), key=lambda c: (c[0].lineno, c[0].col_offset)):
        out.append(finding(node, [node.left, *node.comparators][i], lit, filename))
    return out


def scan_file(path: str) -> list[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as f:
            return scan_source(f.read(), short_path(path))
    except (OSError, UnicodeDecodeError):
        return []
