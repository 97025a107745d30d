"""On by default (``--no-rewrite-checks`` / ``ASCENDIFY_REWRITE_CHECKS=0`` turn it off): make the user's
device-type checks see CUDA as the target.

Run-time redirection cannot change ``device.type == "cuda"``: the device *is* an ``npu`` device, so the check
takes its non-CUDA branch (which may mean a CPU autocast for NPU tensors). The user's
own files (the entry script and the modules it imports from outside site-packages, torch and the standard
library) are compiled with one narrow change: in a comparison whose other side is an attribute ``.type`` (a
device type) the literal ``"cuda"`` becomes the target type, and in a comparison with a ``get_backend()`` call
``"nccl"`` becomes the target backend. Nothing else changes, nothing is written to disk and no bytecode is
cached, so the files on disk never change. Every rewritten comparison is listed in the report.

>>> rewrite_source("ok = dev.type == 'cuda' and name == 'cuda'\\n", "npu", "hccl")[0]
"ok = dev.type == 'npu' and name == 'cuda'\\n"
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.machinery
import sys
from typing import Any

from ascendify.auto.record import is_user_file, short_path


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
            if name == "get_backend":
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
    """Compile ``src`` with the device checks rewritten; changed lines are recorded as findings."""
    tree = ast.parse(src, path)
    t = _Checks(device_type, backend)
    tree = ast.fix_missing_locations(t.visit(tree))
    if rec is not None:
        from ascendify.auto.scan import scan_source

        text = src.decode("utf-8", "replace") if isinstance(src, bytes) else src
        rewritten = set(t.changed)
        for line in sorted(rewritten):
            rec.findings.append({"file": short_path(path), "line": line, "code": t.codes.get(line, "")[:120],
                                 "message": f"rewritten in memory to test for {device_type!r} / {backend!r} "
                                            "(--no-rewrite-checks to keep it)"})
        rec.findings.extend(f for f in scan_source(text, short_path(path)) if f["line"] not in rewritten)
    return compile(tree, path, "exec", dont_inherit=True)


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
