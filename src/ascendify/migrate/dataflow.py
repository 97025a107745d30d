"""Which expressions are used as a *device* or a *distributed backend*.

A string literal is only rewritten where it is used as one (``x.to("cuda")``, ``torch.device("cuda", 0)``,
``init_process_group("nccl")``), or where it flows there through a simple assignment
(``device = "cuda"`` ... ``x.to(device)``), an argparse default (``add_argument("--device", default="cuda")``),
a parameter default (``def f(device="cuda")``) or the return value of a function named for devices. Every
other string, log messages and file names included, is left alone.

The analysis is by name, not by scope: one pass collects the names and attributes used in device positions,
a second marks the values assigned to them.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ascendify.device.apis import DEVICE_KEYWORDS, TENSOR_METHODS_WITH_DEVICE, device_params

from .imports import ImportTable

DEVICE = "device"
BACKEND = "backend"

_DEVICE_NAME = re.compile(r"^(device|dev|device_type|device_str|device_name|.*_device|map_location)$", re.I)
_BACKEND_NAME = re.compile(r"^(backend|dist_backend|.*_backend|ddp_backend)$", re.I)
_BACKEND_CALLS = frozenset(
    {
        "torch.distributed.init_process_group",
        "torch.distributed.new_group",
        "torch.distributed.new_subgroups",
        "torch.distributed.is_backend_available",
    }
)


def is_device_name(name: str) -> bool:
    return bool(_DEVICE_NAME.match(name))


def is_backend_name(name: str) -> bool:
    return bool(_BACKEND_NAME.match(name))


def leaves(expr: ast.AST) -> Iterator[ast.AST]:
    """The value-producing leaves of ``a if c else b`` / ``a or b`` (the test is not a value), and the default of
    ``os.environ.get(KEY, "cuda")`` / ``os.getenv(KEY, "cuda")`` (the value when the variable is unset)."""
    if isinstance(expr, ast.Call) and _env_lookup(expr):
        yield expr
        default = expr.args[1] if len(expr.args) > 1 else next(
            (k.value for k in expr.keywords if k.arg == "default"), None)
        if default is not None:
            yield from leaves(default)
    elif isinstance(expr, ast.IfExp):
        yield from leaves(expr.body)
        yield from leaves(expr.orelse)
    elif isinstance(expr, ast.BoolOp):
        for v in expr.values:
            yield from leaves(v)
    else:
        yield expr


def _env_lookup(call: ast.Call) -> bool:
    f = call.func
    if isinstance(f, ast.Name):
        return f.id == "getenv"
    if not isinstance(f, ast.Attribute):
        return False
    if f.attr == "getenv":
        return isinstance(f.value, ast.Name) and f.value.id == "os"
    base = f.value
    return f.attr == "get" and (isinstance(base, ast.Name) and base.id == "environ" or isinstance(
        base, ast.Attribute) and base.attr == "environ" and isinstance(base.value, ast.Name) and base.value.id == "os")


class Roles:
    """``roles[id(node)]`` is DEVICE or BACKEND for every leaf expression in such a position."""

    def __init__(self, tree: ast.AST, imports: ImportTable, index=None):
        self.roles: dict[int, str] = {}
        self.nodes: list[ast.AST] = []  # the marked leaves, in marking order
        self.kept: set[int] = set()  # device strings deliberately kept (map_location dict keys)
        self.imports = imports
        self._vars: dict[str, set[str]] = {DEVICE: set(), BACKEND: set()}
        self._attrs: dict[str, set[str]] = {DEVICE: set(), BACKEND: set()}
        self._pending: list[tuple[ast.AST, str]] = []
        if index is None:
            from .walk import Index

            index = Index(tree)
        assigns, funcs = index.assigns, index.funcs
        for node in index.calls:
            self._call(node)
        for expr, role in self._pending:
            for leaf in leaves(expr):
                if isinstance(leaf, ast.Name):
                    self._vars[role].add(leaf.id)
                elif isinstance(leaf, ast.Attribute):
                    self._attrs[role].add(leaf.attr)
        for node in assigns:
            self._assign(node)
        for fn in funcs:
            self._function(fn)

    def get(self, node: ast.AST) -> str | None:
        return self.roles.get(id(node))

    # -- positions ---------------------------------------------------------------------------------------
    def _mark(self, expr: ast.AST | None, role: str) -> None:
        if expr is None:
            return
        self._pending.append((expr, role))
        for leaf in leaves(expr):
            if id(leaf) not in self.roles:
                self.roles[id(leaf)] = role
                self.nodes.append(leaf)

    def _call(self, call: ast.Call) -> None:
        func = call.func
        q = self.imports.qualify(func)
        params = device_params(q) if q else None
        if params is None and q is None and isinstance(func, ast.Attribute):
            params = TENSOR_METHODS_WITH_DEVICE.get(func.attr)
        if params is not None:
            if params.positional is not None and len(call.args) > params.positional:
                arg = call.args[params.positional]
                if not isinstance(arg, ast.Starred):
                    self._mark(arg, DEVICE)
            for kw in call.keywords:
                if kw.arg in params.keywords:
                    if q == "torch.load" and isinstance(kw.value, ast.Dict):
                        for v in kw.value.values:
                            self._mark(v, DEVICE)
                        self.kept.update(id(k) for k in kw.value.keys if k is not None)  # where it was saved
                    else:
                        self._mark(kw.value, DEVICE)
        for kw in call.keywords:
            if kw.arg in DEVICE_KEYWORDS and (params is None or kw.arg not in params.keywords):
                if not isinstance(kw.value, ast.Dict):
                    self._mark(kw.value, DEVICE)
            elif kw.arg in ("backend", "dist_backend"):
                self._mark(kw.value, BACKEND)
        if q in _BACKEND_CALLS and call.args:
            self._mark(call.args[0], BACKEND)
        if isinstance(func, ast.Attribute) and func.attr == "add_argument":
            flags = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            flags += [kw.value.value for kw in call.keywords if kw.arg == "dest" and isinstance(kw.value, ast.Constant)]
            names = [str(f).lstrip("-").replace("-", "_") for f in flags]
            role = None
            if any(is_device_name(n) for n in names):
                role = DEVICE
            elif any(is_backend_name(n) for n in names):
                role = BACKEND
            if role:
                for kw in call.keywords:
                    if kw.arg == "default":
                        self._mark(kw.value, role)
                    elif kw.arg == "choices" and isinstance(kw.value, (ast.List, ast.Tuple, ast.Set)):
                        for elt in kw.value.elts:
                            self._mark(elt, role)

    def _assign(self, node: ast.AST) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        value = node.value
        if value is None:
            return
        for t in targets:
            name = t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else None
            if name is None:
                continue
            src = self._vars if isinstance(t, ast.Name) else self._attrs
            if name in src[DEVICE] or is_device_name(name):
                self._mark(value, DEVICE)
            elif name in src[BACKEND] or is_backend_name(name):
                self._mark(value, BACKEND)

    def _function(self, fn: ast.AST) -> None:
        a = fn.args
        positional = a.posonlyargs + a.args
        for arg, default in zip(positional[len(positional) - len(a.defaults) :], a.defaults, strict=True):
            self._param_default(arg.arg, default)
        for arg, default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
            if default is not None:
                self._param_default(arg.arg, default)
        if isinstance(fn, ast.Lambda):
            return
        if "device" in fn.name.lower():
            for node in ast.walk(fn):
                if isinstance(node, ast.Return) and node.value is not None:
                    self._mark(node.value, DEVICE)

    def _param_default(self, name: str, default: ast.AST) -> None:
        if is_device_name(name):
            self._mark(default, DEVICE)
        elif is_backend_name(name):
            self._mark(default, BACKEND)
