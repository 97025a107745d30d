"""On by default (``--no-rewrite-checks`` / ``ASCENDIFY_REWRITE_CHECKS=0`` turn it off): make the user's
device-type checks see CUDA as the target.

Run-time redirection cannot change ``device.type == "cuda"``: the device *is* an ``npu`` device, so the check
takes its non-CUDA branch (which may mean a CPU autocast for NPU tensors). The user's
own files (the entry script and the modules it imports from outside site-packages, torch and the standard
library) are compiled with one narrow change: in a comparison whose other side is an attribute ``.type`` (a
device type) the literal ``"cuda"`` becomes the target type, and in a comparison with a ``get_backend()`` or
``get_default_backend_for_device(...)`` call ``"nccl"`` becomes the target backend. Nothing else changes, nothing is written to disk and no bytecode is
cached, so the files on disk never change. Every rewritten comparison is listed in the report.

The other CUDA checks (:mod:`ascendify.auto.scan`) are listed too; where the operand is a plain value
(``device_type == "cuda"`` with a string of the program's), it is passed through :func:`probe` on its way into
the comparison, so the finding says which branch the run took.

>>> rewrite_source("ok = dev.type == 'cuda' and name == 'cuda'\\n", "npu", "hccl")[0]
"ok = dev.type == 'npu' and name == 'cuda'\\n"
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.machinery
import sys
from typing import Any

from ascendify.program.frames import is_user_file, short_path


class _Checks(ast.NodeTransformer):
    def __init__(self, device_type: str, backend: str) -> None:
        self.device_type = device_type
        self.backend = backend
        self.changed: list[int] = []
        self.codes: dict[int, str] = {}

    def _subject(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Attribute) and node.attr == "type":
            return "cuda"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            if name in ("get_backend", "get_default_backend_for_device"):
                return "nccl"
        return None

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        if not all(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops):
            return node
        before = ast.unparse(node)
        n_changed = len(self.changed)
        operands = [node.left, *node.comparators]
        for i, (a, b) in enumerate(zip(operands, operands[1:], strict=False)):
            for lit_pos, other in ((i, b), (i + 1, a)):
                lit = operands[lit_pos]
                want = self._subject(other)
                if want and isinstance(lit, ast.Constant) and lit.value == want:
                    new = ast.copy_location(ast.Constant(self.device_type if want == "cuda" else self.backend), lit)
                    operands[lit_pos] = new
                    self.changed.append(node.lineno)
        node.left, node.comparators = operands[0], operands[1:]
        if len(self.changed) > n_changed:
            self.codes[node.lineno] = before
        return node


def rewrite_source(src: str, device_type: str, backend: str) -> tuple[str, list[int]]:
    """The rewritten source (for tests and docs) and the lines changed."""
    tree = ast.parse(src)
    t = _Checks(device_type, backend)
    tree = t.visit(tree)
    return (ast.unparse(tree) + "\n" if t.changed else src), t.changed


def compile_user_source(src: str | bytes, path: str, device_type: str, backend: str, rec=None) -> Any:
    """Compile ``src`` with the device checks rewritten; changed lines are recorded as findings. The other
    CUDA checks are findings too; where their operand is a plain value (``device_type == "cuda"``), it is
    watched (:func:`probe`), so the finding says which branch the run took."""
    tree = ast.parse(src, path)
    t = _Checks(device_type, backend)
    tree = t.visit(tree)
    if rec is not None:
        from ascendify.auto.scan import checks, finding, from_device

        rewritten = set(t.changed)
        for line in sorted(rewritten):
            rec.findings.append({"file": short_path(path), "line": line, "code": t.codes.get(line, "")[:120],
                                 "message": f"rewritten in memory to test for {device_type!r} / {backend!r} "
                                            "(--no-rewrite-checks to keep it)"})
        for node, i, j, word in sorted(checks(tree), key=lambda c: (c[0].lineno, c[0].col_offset)):
            operands = [node.left, *node.comparators]
            f = finding(node, operands[i], word, short_path(path))
            rec.findings.append(f)
            if not (word == "cuda" and from_device(operands[i])):
                operands[i] = _watched(operands[i], f, operands[j].value, node.ops[min(i, j)], i < j)
                node.left, node.comparators = operands[0], operands[1:]
    return compile(ast.fix_missing_locations(tree), path, "exec", dont_inherit=True)


# Checks watched at run time: (finding, the operand's source, the literal's value, operator, whether the operand
# is on the left, the value seen for each outcome)
_WATCHED: list[tuple[dict[str, Any], str, str, type, bool, dict[bool, Any]]] = []


def _watched(operand: ast.expr, f: dict[str, Any], lit: str, op: ast.cmpop, left: bool) -> ast.expr:
    """``probe(<operand>, key)``: the operand's value, seen by :func:`probe` on the way."""
    _WATCHED.append((f, ast.unparse(operand)[:60], lit, type(op), left, {}))
    fn = ast.Attribute(ast.Attribute(ast.Attribute(ast.Call(ast.Name("__import__", ast.Load()),
                                                            [ast.Constant("ascendify.auto.rewrite")], []),
                                                   "auto", ast.Load()), "rewrite", ast.Load()), "probe", ast.Load())
    return ast.copy_location(ast.Call(fn, [operand, ast.Constant(len(_WATCHED) - 1)], []), operand)


def probe(value: Any, key: int) -> Any:
    """Return ``value`` unchanged; the first time the watched check meets a value that decides it one way or
    the other, its finding says which branch the run took and why."""
    f, what, lit, op, left, seen = _WATCHED[key]
    try:  # does the check find the literal (the CUDA side), as the program's own comparison decides it?
        text = value if isinstance(value, str) else str(value)
        if op in (ast.In, ast.NotIn):
            hit = (lit in text) if not left else (text in lit)
        else:
            hit = text == lit
    except Exception:  # noqa: BLE001 - an odd operand: say nothing rather than disturb the program
        return value
    if hit in seen:
        return value
    seen[hit] = value
    branch = (f"is {text!r}, a plain value that still says {lit!r} (not redirected), so the CUDA branch runs "
              "(its CUDA calls are redirected)") if hit else f"is {text!r}, so this takes its non-CUDA branch"
    if len(seen) == 1:
        f["message"] = f"compares `{what}` with {lit!r}: at run time it {branch}"
    else:
        f["message"] = (f"compares `{what}` with {lit!r}: at run time both branches ran ({seen[True]!r} kept the "
                        f"CUDA branch, {seen[False]!r} took the other)")
    return value


class _RewritingLoader(importlib.machinery.SourceFileLoader):
    """Loads a user module from source with the checks rewritten; never reads or writes cached bytecode."""

    settings: tuple[str, str, Any] = ("npu", "hccl", None)

    def get_code(self, fullname: str) -> Any:
        path = self.get_filename(fullname)
        src = self.get_data(path)
        dt, be, rec = self.settings
        return compile_user_source(src, path, dt, be, rec)


class RewriteFinder(importlib.abc.MetaPathFinder):
    """Routes imports of the user's own ``.py`` files through :class:`_RewritingLoader`."""

    def __init__(self, device_type: str, backend: str, rec) -> None:
        self.settings = (device_type, backend, rec)

    def find_spec(self, name, path, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or not spec.origin or not spec.origin.endswith(".py") or not is_user_file(spec.origin):
            return None
        loader = _RewritingLoader(name, spec.origin)
        loader.settings = self.settings
        spec.loader = loader
        return spec

    def install(self) -> None:
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
