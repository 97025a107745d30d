"""Branches guarded by an availability check of a CUDA-only package: on Ascend they never run.

``HAVE_FA = RequirementCache("flash-attn>=2")`` ... ``if HAVE_FA and ...: return flash_attn_func(...)``: ASC608
rewrites the call, but flash-attn does not install on Ascend, so the check is False there and the converted
call is dead code. The checks recognised: ``RequirementCache("pkg...")`` / ``module_available("pkg")`` /
``package_available("pkg")`` (lightning), ``importlib.util.find_spec("pkg")`` (``is not None``),
``is_flash_attn_2_available()`` and the other ``is_<pkg>..._available()`` functions (transformers, diffusers),
a name assigned one of those, and the flag of ``try: import pkg ... except ImportError: FLAG = False`` (or
``name = None`` for a name the ``try`` imports). The packages: flash-attn, xformers, apex, bitsandbytes and the
CUDA-only packages of ``cuda_extension_modules.json`` (ASC620).
"""

from __future__ import annotations

import ast
import re
from bisect import bisect_left, bisect_right

from ..model import CHANGE, MANUAL, REPORT, holes
from .base import NPU, PORTABLE, SAFE, Example, rule
from .kernels_extensions import modules as extension_modules
from .kernels_imports import _covered

LIBRARIES = ("flash_attn", "xformers", "apex", "bitsandbytes")
DISPLAY = {"flash_attn": "flash-attn", "transformer_engine": "transformer-engine"}
# rewrites that replace a package's call with what the target has (the guarded branch then works there)
KERNEL_RULES = frozenset({"ASC608", "ASC609", "ASC610", "ASC611"})
# helpers that leave the branch's meaning alone: the file's imports, the removed package imports
_NOT_CONVERSIONS = frozenset({"ASC001", "ASC612"})
_REQUIREMENT_FUNCS = ("RequirementCache", "module_available", "package_available")
_FIND_SPEC = ("importlib.util.find_spec", "importlib.find_loader", "pkgutil.find_loader")
_IMPORT_ERRORS = ("ImportError", "ModuleNotFoundError", "Exception", "BaseException")
_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _packages() -> frozenset[str]:
    return frozenset(LIBRARIES) | frozenset(extension_modules())


def package_of(requirement: str) -> str | None:
    """The CUDA-only package a requirement or module name names (``"flash-attn>=2.0"`` -> ``flash_attn``)."""
    m = _NAME.match(requirement)
    if m is None:
        return None
    name = m.group(1).lower().replace("-", "_").split(".")[0]
    return name if name in _packages() else None


def _availability_function(name: str) -> str | None:
    """``is_flash_attn_2_available`` -> flash_attn (the transformers / diffusers / accelerate spelling)."""
    if not name.startswith("is_") or not ("available" in name or "greater_or_equal" in name):
        return None
    rest = name[3:]
    return max((p for p in _packages() if rest.startswith(p + "_")), key=len, default=None)


def _str_arg(call: ast.Call) -> str | None:
    a = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg in ("name", "requirement")),
                                            None)
    return a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None


def _call_name(ctx, func: ast.AST) -> str:
    q = ctx.qname(func)
    if q:
        return q
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else ""


class Guards:
    """Availability checks of one file: ``check(expr)`` -> (package, True where the expression is true only
    where the package is installed / False where it is true only where it is missing), or None."""

    def __init__(self, ctx, spans):
        self.ctx = ctx
        self.spans = spans  # the edits made: an import they removed no longer fails
        self._flags: dict[str, str | None] = {}
        self._bindings: dict[str, list[ast.AST]] | None = None  # name -> its assignments and imports, in order

    def _bound(self, name: str) -> list[ast.AST]:
        """The assignments (``Assign``/``AnnAssign`` with ``name`` a target) and imports binding ``name``, filed
        by name once (looking through every assignment for every flag made a large file quadratic)."""
        if self._bindings is None:
            by: dict[str, list[ast.AST]] = {}
            for a in self.ctx.index.assigns:
                targets = a.targets if isinstance(a, ast.Assign) else [a.target]
                for t in {t.id for t in targets if isinstance(t, ast.Name)}:
                    by.setdefault(t, []).append(a)
            for imp in self.ctx.index.imports:
                for alias in imp.names:
                    by.setdefault(alias.asname or alias.name.split(".")[0], []).append(imp)
            self._bindings = by
        return self._bindings.get(name, [])

    def check(self, node: ast.AST, depth: int = 0) -> tuple[str, bool] | None:
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            g = self.check(node.operand, depth)
            return (g[0], not g[1]) if g else None
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and _is_none(node.comparators[0]):
            op = node.ops[0]
            if isinstance(op, (ast.IsNot, ast.NotEq, ast.Is, ast.Eq)):
                g = self.check(node.left, depth)
                if g is None:
                    return None
                return g[0], g[1] == isinstance(op, (ast.IsNot, ast.NotEq))
            return None
        if isinstance(node, ast.Call):
            name = _call_name(self.ctx, node.func)
            short = name.rpartition(".")[2]
            if name == "bool" and len(node.args) == 1 and not node.keywords:
                return self.check(node.args[0], depth)
            if short in _REQUIREMENT_FUNCS or name in _FIND_SPEC:
                s = _str_arg(node)
                pkg = package_of(s) if s is not None else None
                return (pkg, True) if pkg else None
            pkg = _availability_function(short)
            return (pkg, True) if pkg else None
        if isinstance(node, ast.Name) and depth == 0:
            pkg = self.flag(node.id)
            return (pkg, True) if pkg else None
        return None

    def flag(self, name: str) -> str | None:
        """The package whose availability the variable ``name`` holds, from every binding of it in the file."""
        if name in self._flags:
            return self._flags[name]
        self._flags[name] = None  # no recursion through the name itself
        pkgs = set()
        bindings = 0
        bound = self._bound(name)
        for a in bound:
            if not isinstance(a, (ast.Assign, ast.AnnAssign)):
                continue
            targets = a.targets if isinstance(a, ast.Assign) else [a.target]
            bindings += 1
            if len(targets) != 1 or a.value is None:
                return None
            g = self.check(a.value, 1)
            if g is not None and g[1]:
                pkgs.add(g[0])
                continue
            pkg = self._try_package(a) if _is_const(a.value) else None
            if pkg is None:
                return None
            pkgs.add(pkg)
        for imp in bound:  # `from flash_attn import f` in a try whose handler sets `f = None`
            if not isinstance(imp, (ast.Import, ast.ImportFrom)):
                continue
            for alias in imp.names:
                local = alias.asname or alias.name.split(".")[0]
                if local == name:
                    pkg = self._try_package(imp)
                    if pkg is None:
                        return None
                    bindings += 1
                    pkgs.add(pkg)
        if not bindings or len(pkgs) != 1:
            return None
        self._flags[name] = pkgs.pop()
        return self._flags[name]

    def _try_package(self, stmt: ast.stmt) -> str | None:
        """The package a ``try`` around ``stmt`` imports, where the ``try`` catches the import's failure (an
        import that ASC612 removed, every use converted, fails no more: the flag is then always true)."""
        p = self.ctx.parent(stmt)
        while p is not None and not isinstance(p, ast.Try):
            if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
                return None
            p = self.ctx.parent(p)
        if p is None or not any(_catches_import_error(h) for h in p.handlers):
            return None
        pkgs = {pkg for s in p.body for n in ast.walk(s) if isinstance(n, (ast.Import, ast.ImportFrom))
                and not _covered(self.spans, *self.ctx.span(n)) for pkg in [_imported_package(n)] if pkg}
        return pkgs.pop() if len(pkgs) == 1 else None


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _is_const(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in (True, False, None)


def _catches_import_error(h: ast.ExceptHandler) -> bool:
    if h.type is None:
        return True
    types = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
    return any(isinstance(t, ast.Name) and t.id in _IMPORT_ERRORS for t in types)


def _imported_package(n: ast.Import | ast.ImportFrom) -> str | None:
    if isinstance(n, ast.ImportFrom):
        return package_of(n.module or "") if not n.level else None
    pkgs = {package_of(a.name) for a in n.names} - {None}
    return pkgs.pop() if len(pkgs) == 1 else None


def _show(pkg: str) -> str:
    return DISPLAY.get(pkg, pkg)


@rule(
    "ASC614",
    "cuda-package-guard",
    "a branch that runs only where a CUDA-only package (flash-attn, xformers, apex...) is installed",
    safety=SAFE,
    hooks=("module",),
    tokens=("flash", "xformers", "apex", "bitsandbytes", "find_spec", "find_loader", "requirementcache",
            "module_available", "package_available"),
    doc="""
    ## What it does
    Finds branches guarded by an availability check of a CUDA-only package: `RequirementCache("flash-attn>=2")`,
    `module_available("xformers")` (lightning), `importlib.util.find_spec("flash_attn")` (`is not None`),
    `is_flash_attn_2_available()` and the other `is_<package>..._available()` functions (transformers,
    diffusers), a variable assigned one of those, and the flag of `try: import flash_attn ... except
    ImportError: HAS_FLASH = False` (or `flash_attn_func = None`, tested as `flash_attn_func is not None`).
    The packages: flash-attn, xformers, apex, bitsandbytes and those of ASC620's table (`transformer_engine`,
    `cupy`...).
    - A branch (`if`, `elif`, a conditional expression) with code that migrate converted: `--to npu`, where the
      branch holds a kernel rewrite (ASC608-ASC611) and nothing of the package is left in it, the check is
      taken out of the test (`if HAVE_FA and mask is None:` becomes `if mask is None:`; a test that is only the
      check becomes `True`); otherwise (and `--to portable`) the guard is listed (manual) with the way to make
      it true.
    - A branch that only calls the package (nothing converted) gets an advice row: on Ascend the code after
      it (the fallback) is what runs.

    ## Why
    flash-attn, xformers and apex do not install on Ascend, so the check is always False there: a call
    converted to `npu_fusion_attention` inside the branch never runs, and nothing else says so.

    ## Example
    `if HAVE_FA and mask is None:` with `HAVE_FA = RequirementCache("flash-attn")` and a converted
    `flash_attn_func` call in the branch

    ## Use instead
    `if mask is None:` (the branch calls `torch_npu.npu_fusion_attention` now, which every NPU has)

    ## Fix safety
    Safe: only where the branch's every use of the package was rewritten (ASC612 removed its imports) and the
    check is the test or one operand of its `and`, in its own text. The assignment of the flag stays (another
    file may import it).
    """,
    examples=[
        Example(
            "import torch\nfrom flash_attn import flash_attn_func\nfrom lightning_utilities import RequirementCache\n"
            "HAVE_FA = RequirementCache('flash-attn>=2.0')\n"
            "def attend(q, k, v, mask):\n"
            "    if HAVE_FA and mask is None:\n"
            "        return flash_attn_func(q, k, v)\n"
            "    return sdpa(q, k, v, mask)\n",
            "import torch\nimport torch_npu\nfrom lightning_utilities import RequirementCache\n"
            "HAVE_FA = RequirementCache('flash-attn>=2.0')\n"
            "def attend(q, k, v, mask):\n"
            "    if mask is None:\n"
            "        return torch_npu.npu_fusion_attention(q, k, v, q.shape[2], \"BSND\",\n"
            "                                              scale=q.shape[-1] ** -0.5)[0]\n"
            "    return sdpa(q, k, v, mask)\n",
        ),
        Example(
            "import importlib.util\nimport torch\nimport xformers.ops as xops\n"
            "if importlib.util.find_spec('xformers') is not None:\n"
            "    out = xops.memory_efficient_attention(q, k, v)\n"
            "else:\n"
            "    out = attention(q, k, v)\n",
            "import importlib.util\nimport torch\nimport torch_npu\n"
            "if True:\n"
            "    out = torch_npu.npu_fusion_attention(q, k, v, q.shape[2], \"BSND\",\n"
            "                                         scale=q.shape[-1] ** -0.5)[0]\n"
            "else:\n"
            "    out = attention(q, k, v)\n",
        ),
        Example(  # portable: listed, the tip says how to make the check true
            "try:\n    from flash_attn import flash_attn_func\nexcept ImportError:\n    flash_attn_func = None\n"
            "import torch.nn.functional as F\n"
            "def attend(q, k, v):\n"
            "    if flash_attn_func is not None:\n"
            "        return flash_attn_func(q, k, v)\n"
            "    return F.scaled_dot_product_attention(q, k, v)\n",
            "try:\n    from flash_attn import flash_attn_func\nexcept ImportError:\n    flash_attn_func = None\n"
            "import torch.nn.functional as F\n"
            "def attend(q, k, v):\n"
            "    if flash_attn_func is not None:\n"
            "        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), "
            "v.transpose(1, 2), enable_gqa=k.shape[2] != q.shape[2]).transpose(1, 2).contiguous()\n"
            "    return F.scaled_dot_product_attention(q, k, v)\n",
            target=PORTABLE, fires=False,
        ),
        Example(  # nothing converted in the branch: advice only
            "from transformers.utils import is_flash_attn_2_available\n"
            "if is_flash_attn_2_available():\n    from flash_attn.layers.rotary import apply_rotary_emb\n",
            None,
        ),
    ],
)
def cuda_package_guard(ctx, tree: ast.Module) -> None:
    changes = [f for f in ctx.findings if f.kind == CHANGE and f.rule not in _NOT_CONVERSIONS]
    spans = [(e.start, e.end, holes(e)) for f in ctx.findings if f.kind == CHANGE for e in f.edits]
    guards = Guards(ctx, spans)
    # the changes by their first edit, the report rows by their line: a guard's branch finds its own by a
    # binary search (a scan of all of them for each guard made a large file quadratic)
    changes.sort(key=lambda f: min((e.start for e in f.edits), default=-1))
    firsts = [min((e.start for e in f.edits), default=-1) for f in changes]
    rows = sorted((_line_start(ctx, f.line), i) for i, f in enumerate(ctx.findings) if f.kind == REPORT)
    row_starts = [r[0] for r in rows]
    for node in ctx.index.order:
        if not isinstance(node, (ast.If, ast.IfExp)):
            continue
        found = _guard_of(guards, node.test)
        if found is None:
            continue
        pkg, positive, operand = found
        region = (node.body if positive else node.orelse) if isinstance(node, ast.If) else [
            node.body if positive else node.orelse]
        if not region:
            continue
        a, b = ctx.span(region[0])[0], ctx.span(region[-1])[1]
        inside = [f for f in changes[bisect_left(firsts, a):bisect_right(firsts, b)]
                  if f.edits and all(a <= e.start and e.end <= b for e in f.edits)]
        left = _package_left(ctx, region, pkg, spans)
        reports = [ctx.findings[i] for _, i in rows[bisect_left(row_starts, a):bisect_left(row_starts, b)]]
        name = _show(pkg)
        where = "here" if positive else "in its else branch"
        check = ctx.seg(operand if operand is not None else node.test)
        if inside:
            what = "; ".join(sorted({f"line {f.line}: {f.message}" for f in inside}))
            if (ctx.target == NPU and positive and operand is not None and not left and not reports
                    and any(f.rule in KERNEL_RULES for f in inside)):
                edit = _drop_operand(ctx, node.test, operand)
                if edit is not None:
                    ctx.change(node.test, [edit], api=f"{name} availability check",
                               message=f"`{check}` dropped: {name} is not installed on Ascend (the check is always "
                                       f"False there) and the branch's {name} code is converted ({what})")
                    continue
            if not positive:
                fix = f"make `{check}` false where the converted code should run (e.g. `{check} and not is_npu`)"
            elif ctx.target == NPU:
                fix = (f"make `{check}` true on the NPU (e.g. `({check} or is_npu)`, or drop it: the converted code "
                       "runs on every NPU)")
            else:
                fix = f"drop `{check}` from the test: the converted code runs on every device"
            todo = f"convert what is left of {name} in the branch (its rows), then " if left or reports else ""
            ctx.report(node.test, api=f"{name} availability check", severity=MANUAL,
                       reason=f"`{check}`: the code {where} runs only where {name} is installed, which it is not on "
                              f"Ascend (nor anywhere without {name}): the converted code never runs ({what})",
                       tip=todo + fix)
        elif left:
            ctx.advise(node.test, api=f"{name} availability check",
                       message=f"`{check}`: the code {where} runs only where {name} is installed: on Ascend "
                               f"it is skipped and the fallback runs ({name} code at line {left[0].lineno})",
                       tip=f"nothing to do for it to run; port the {name} code {where} (see its report rows) "
                           "where the fallback is too slow")


def _guard_of(guards: Guards, test: ast.AST) -> tuple[str, bool, ast.AST | None] | None:
    """(package, positive, the operand to drop: the test itself or one operand of its top ``and``; None where
    the check is inside a larger expression)."""
    g = guards.check(test)
    if g is not None:
        return g[0], g[1], test
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        for v in test.values:
            g = guards.check(v)
            if g is not None and g[1]:
                return g[0], True, v
    return None


def _line_start(ctx, line: int) -> int:
    return ctx.src.line_starts[line - 1]


def _package_left(ctx, region: list[ast.AST], pkg: str, spans) -> list[ast.AST]:
    """The nodes of ``region`` that still name ``pkg`` (not replaced by an edit)."""
    left = []
    for stmt in region:
        for n in ast.walk(stmt):
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                hit = _imported_package(n) == pkg
            elif isinstance(n, (ast.Name, ast.Attribute)):
                q = ctx.qname(n)
                hit = bool(q) and package_of(q) == pkg
            else:
                continue
            if hit and not _covered(spans, *ctx.span(n)):
                left.append(n)
    return left


def _drop_operand(ctx, test: ast.AST, operand: ast.AST):
    """The edit removing ``operand`` from ``test`` (``True`` where it is the whole test); None where the text
    between it and its neighbour is not a plain ``and``."""
    from ..model import Edit

    if operand is test:
        return ctx.replace(test, "True")
    values = test.values
    i = values.index(operand)
    text = ctx.src.text
    s, e = ctx.span(operand)
    if i + 1 < len(values):
        nxt = ctx.span(values[i + 1])[0]
        if re.fullmatch(r"\s*and\s+", text[e:nxt]):
            return Edit(s, nxt, "")
        return None
    prev = ctx.span(values[i - 1])[1]
    if re.fullmatch(r"\s+and\s*", text[prev:s]):
        return Edit(prev, e, "")
    return None
