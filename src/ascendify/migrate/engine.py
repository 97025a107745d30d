"""Convert one Python source: parse with ``ast``, run the rules, apply their edits to the original text.

Every edit replaces an exact character span of the original text that a rule first checked (the text there
must be what the rule expects), so everything outside the edits (formatting, comments, line endings, the
encoding) is kept byte for byte. The result is parsed again; a change that would break it is dropped and
listed instead.
"""

from __future__ import annotations

import ast
import gc
import re
import time
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from . import portable
from .dataflow import Roles
from .imports import ImportTable, dotted_parts
from .layout import wrap_long_lines
from .model import (
    _HOLE,
    ADVICE,
    API,
    CHANGE,
    MANUAL,
    REPORT,
    REVIEW,
    UNSAFE,
    UNSUPPORTED,
    Edit,
    FileResult,
    Finding,
    hole,
    holes,
)
from .rules import RULES, Rule
from .rules.base import NPU
from .rules.base import UNSAFE as UNSAFE_GRADE
from .scripts import runs_as_program
from .source import SourceFile
from .spans import Grid
from .walk import Index


@dataclass
class Options:
    target: str = NPU
    unsafe: bool = False
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()

    def enabled(self, rule: Rule) -> bool:
        if self.target not in rule.targets:
            return False
        if self.select and not any(rule.id.startswith(s) for s in self.select):
            return False
        return not any(rule.id.startswith(s) for s in self.ignore)


_ACTIVE: dict[tuple, list[Rule]] = {}


def active_rules(options: Options) -> list[Rule]:
    key = (options.target, options.select, options.ignore)
    rules = _ACTIVE.get(key)
    if rules is None:
        rules = _ACTIVE[key] = [r for r in RULES.values() if options.enabled(r)]
    return rules


_WS = re.compile(r"\s+")


def _no_progress(fraction: float) -> None:
    pass


class Context:
    """What a rule sees: the source, names resolved through imports, device roles, and ways to record results."""

    def __init__(self, src: SourceFile, tree: ast.Module, options: Options):
        self.src = src
        self.tree = tree
        self.options = options
        self.target = options.target
        self.index = Index(tree)
        self.imports = ImportTable.from_nodes(self.index.imports, self.index.top_ids)
        self.qname = self.imports.qualify  # the rules' most frequent call: one Python frame, not two
        self._roles: Roles | None = None
        self.low = src.text.lower()  # for the rules' token filters and the checks after the rules
        self.findings: list[Finding] = []
        self.need_imports: list[str] = []  # modules to import at the top ("torch_npu", "torch")
        self.claimed: set[int] = set()
        self.rewritten_locals: set[str] = set()  # local names whose import statement is rewritten
        self.rule: Rule | None = None
        self.parents = self.index.parents
        self.in_fstring = self.index.in_fstring
        self.need_device_type = False  # portable: DEVICE_TYPE must be defined after the imports
        self._dt_state: str | None = None
        self.need_helpers: list[str] = []  # portable: helper classes to define after the imports (HostEvent)
        self._helper_states: dict[str, str] = {}

    @property
    def roles(self) -> Roles:
        """Device and backend positions (data flow), found when a rule first asks: a file that names no CUDA
        device or backend never needs them."""
        if self._roles is None:
            self._roles = Roles(self.tree, self.imports, self.index)
        return self._roles

    # -- names and text ----------------------------------------------------------------------------------
    def qname(self, node: ast.AST) -> str | None:
        return self.imports.qualify(node)

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.parents.get(id(node))

    def seg(self, node: ast.AST) -> str:
        return self.src.segment(node)

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.src.span(node)

    def claim(self, node: ast.AST) -> bool:
        """Mark ``node`` handled; False when another rule already handled it."""
        if id(node) in self.claimed:
            return False
        self.claimed.add(id(node))
        return True

    def is_claimed(self, node: ast.AST) -> bool:
        return id(node) in self.claimed

    def ref(self, qualified: str) -> str:
        """Text naming ``qualified`` here: through an existing import, else a new top-level import."""
        local = self.imports.local_for(qualified)
        if local is not None:
            return local
        root = qualified.split(".")[0]
        if root not in self.need_imports:
            self.need_imports.append(root)
        return qualified

    def device_type_expr(self) -> str:
        """A device-type string for the portable target: the current accelerator's, else ``"cpu"``.

        ``DEVICE_TYPE``, defined once after the file's imports (reused when a previous run defined it), or the
        inline expression where that name is taken by the file itself.
        """
        torch = self.ref("torch")
        state = self._device_type_state()
        if state == "taken":
            return portable.device_type_expr(torch)
        if state == "missing":
            self.need_device_type = True
        return portable.DEVICE_TYPE_NAME

    def _device_type_state(self) -> str:
        """"defined" (by a previous run), "taken" (the file uses the name otherwise) or "missing"."""
        if self._dt_state is None:
            name = portable.DEVICE_TYPE_NAME
            state = "missing"
            if name in self.imports.names:
                state = "taken"
            for node in self.index.order:
                if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
                    stmt = self.parent(node)
                    ok = (isinstance(stmt, ast.Assign) and id(stmt) in self.index.top_ids and len(stmt.targets) == 1
                          and "accelerator.current_accelerator" in self.seg(stmt.value))
                    state = "defined" if ok and state != "taken" else "taken"
                elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.arg)) and getattr(
                        node, "name", getattr(node, "arg", None)) == name:
                    state = "taken"
            self._dt_state = state
        return self._dt_state

    def helper(self, name: str) -> str | None:
        """The name of portable helper ``name`` (see ``portable.HELPERS``), defined once after the imports.

        None where the file uses the name for something else (the caller then lists the site instead).
        """
        state = self._helper_states.get(name)
        if state is None:
            state = "missing"
            for node in self.index.order:
                if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
                    ok = id(node) in self.index.top_ids and (ast.get_docstring(node) or "").startswith(
                        portable.HELPER_MARK)
                    state = "defined" if ok and state != "taken" else "taken"
                elif (isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store)
                      or isinstance(node, ast.AsyncFunctionDef) and node.name == name
                      or isinstance(node, ast.arg) and node.arg == name):
                    state = "taken"
            if name in self.imports.names:
                state = "taken"
            self._helper_states[name] = state
        if state == "taken":
            return None
        if state == "missing" and name not in self.need_helpers:
            self.need_helpers.append(name)
        return name

    def accelerator_guarded(self, node: ast.AST) -> bool:
        """``node`` only runs when an accelerator is in use: it sits in the true branch of an ``if`` (or a
        conditional expression) testing ``torch.accelerator.is_available()``, ``<device>.type != "cpu"``,
        ``"cpu" not in <device>``, ``not <device>.startswith("cpu")``, ``not x.is_cpu``, the CUDA tests that become
        those (``<device>.type == "cuda"``, ``"cuda" in <device>``, ``<device>.startswith("cuda")``, ``x.is_cuda``),
        or a variable assigned one of those
        (``on_device = device.type != "cpu"``)."""
        child, p = node, self.parent(node)
        while p is not None:
            if isinstance(p, ast.If) and child in p.body or isinstance(p, ast.IfExp) and child is p.body:
                if self._accelerator_test(p.test, 0):
                    return True
            if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                return False
            child, p = p, self.parent(p)
        return False

    def _accelerator_test(self, test: ast.AST, depth: int) -> bool:
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
            return any(self._accelerator_test(v, depth) for v in test.values)
        if isinstance(test, ast.Call):
            return self.qname(test.func) in ("torch.accelerator.is_available", "torch.cuda.is_available")
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.NotEq):
            other = test.comparators[0]
            return isinstance(other, ast.Constant) and other.value == "cpu"
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.In, ast.NotIn)):
            # `"cpu" not in device`, and `"cuda" in device` (ASC104 makes it the former)
            want = "cpu" if isinstance(test.ops[0], ast.NotIn) else "cuda"
            return isinstance(test.left, ast.Constant) and test.left.value == want
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            # `device.type == "cuda"`: ASC104 makes it `device.type != "cpu"` (an accelerator branch)
            return any(isinstance(o, ast.Constant) and o.value == "cuda" for o in (test.left, *test.comparators))
        if isinstance(test, ast.Attribute) and test.attr == "is_cuda":  # ASC102: `not x.is_cpu`
            return True
        if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and test.func.attr == "startswith":
            # `device.startswith("cuda")`: ASC104 makes it `not device.startswith("cpu")`
            return bool(test.args) and isinstance(test.args[0], ast.Constant) and test.args[0].value == "cuda"
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            o = test.operand
            return (isinstance(o, ast.Attribute) and o.attr == "is_cpu"
                    or isinstance(o, ast.Call) and isinstance(o.func, ast.Attribute) and o.func.attr == "startswith"
                    and bool(o.args) and isinstance(o.args[0], ast.Constant) and o.args[0].value == "cpu")
        if isinstance(test, ast.Name) and depth == 0:
            values = [a.value for a in self.index.assigns if isinstance(a, ast.Assign) and len(a.targets) == 1
                      and isinstance(a.targets[0], ast.Name) and a.targets[0].id == test.id]
            return bool(values) and all(self._accelerator_test(v, 1) for v in values)
        return False

    def in_expression(self, node: ast.AST, text: str) -> str:
        """``text`` (a conditional expression replacing ``node``), in parentheses unless the position takes one bare."""
        p = self.parent(node)
        bare = (
            isinstance(p, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return, ast.Expr, ast.keyword,
                           ast.withitem, ast.List, ast.Tuple, ast.Set))
            or isinstance(p, ast.Call) and node in p.args
            or isinstance(p, ast.Dict) and node in p.values
        )
        return text if bare else f"({text})"

    def device_literal(self, value: str) -> str:
        """Replacement text for a device string such as ``"cuda"``/``"cuda:1"`` on this target."""
        kind, _, index = value.partition(":")
        if self.target == NPU:
            return repr("npu" + (":" + index if index else ""))
        expr = self.device_type_expr()
        return f'{expr} + ":{index}"' if index else expr

    # -- edits -------------------------------------------------------------------------------------------
    def replace(self, node: ast.AST, text: str) -> Edit:
        a, b = self.span(node)
        return Edit(a, b, text)

    def chain_edit(self, node: ast.AST, new_qualified: str) -> Edit | None:
        """Rewrite a dotted name (any alias) to ``new_qualified``; None when its text is not a plain chain."""
        parts = dotted_parts(node)
        if parts is None or id(node) in self.in_fstring and "\n" in self.seg(node):
            return None
        if _WS.sub("", self.seg(node)) != ".".join(parts):
            return None
        return self.replace(node, self.ref(new_qualified))

    def insert_first_arg(self, call: ast.Call, text: str) -> Edit | None:
        """Insert ``text`` as the first argument of ``call`` (a ``, `` follows when there are arguments)."""
        a, b = self.span(call)
        fa, fb = self.span(call.func)
        body = self.src.text[fb:b]
        m = re.match(r"\s*\(", body)
        if not m:
            return None
        pos = fb + m.end()
        has_args = bool(call.args or call.keywords)
        return Edit(pos, pos, text + (", " if has_args else ""))

    # -- results -----------------------------------------------------------------------------------------
    def _lines(self, node: ast.AST | None, line: int | None = None) -> tuple[int, int]:
        if node is not None and hasattr(node, "lineno"):
            return node.lineno, node.end_lineno or node.lineno
        return line or 1, line or 1

    def change(self, node: ast.AST, edits: list[Edit | None], *, api: str = "", message: str = "") -> bool:
        """Record a conversion of ``node``; False (and a manual report) when an edit could not be made."""
        rule = self.rule
        line, end = self._lines(node)
        if any(e is None for e in edits) or not edits:
            self.report(node, api=api, severity=MANUAL, reason=f"{message} (the code's layout is unusual: "
                        "convert by hand)" if message else "could not rewrite this site safely: convert by hand",
                        tip="")
            return False
        eds = [e for e in edits if e is not None]
        if id(node) in self.in_fstring:
            eds = self._fstring_quotes(node, eds)
        if rule is not None and rule.safety == UNSAFE_GRADE and not self.options.unsafe:
            before, after = self._before_after(eds)
            self.findings.append(Finding(rule.id, REPORT, line, end, api=api, severity=UNSAFE,
                                         message=message or rule.summary,
                                         tip=f"run with --unsafe to apply: {after.strip()}", before=before))
            return False
        before, after = self._before_after(eds)
        lo = min(self.src.line_of(e.start) for e in eds)
        hi = max(self.src.line_of(max(e.end - 1, e.start)) for e in eds)
        self.findings.append(Finding(rule.id if rule else "ASC000", CHANGE, min(lo, line), max(hi, lo),
                                     api=api, message=message or (rule.summary if rule else ""),
                                     before=before, after=after, edits=eds))
        return True

    def _fstring_quotes(self, node: ast.AST, edits: list[Edit]) -> list[Edit]:
        """Inside an f-string (Python < 3.12) a replacement must not use the f-string's own quote."""
        p = node
        while p is not None and not isinstance(p, ast.JoinedStr):
            p = self.parent(p)
        if p is None:
            return edits
        seg = self.seg(p).lstrip("rRbBuUfF")
        q = seg[:1]
        other = "'" if q == '"' else '"'
        return [Edit(e.start, e.end, e.text.replace(q, other)) if q in e.text else e for e in edits]

    def report(self, node: ast.AST | None, *, api: str = "", reason: str, tip: str = "",
               severity: str = UNSUPPORTED, line: int | None = None, gloss: str = "") -> None:
        l0, l1 = self._lines(node, line)
        kind = REPORT if (self.rule is None or self.rule.category == "cuda") else API
        self.findings.append(Finding(self.rule.id if self.rule else "ASC000", kind, l0, l1, api=api,
                                     message=reason, tip=tip, severity=severity, gloss=gloss,
                                     before=self.src.line_text(l0).strip()))

    def advise(self, node: ast.AST | None, *, api: str = "", message: str, tip: str = "",
               line: int | None = None) -> None:
        l0, l1 = self._lines(node, line)
        self.findings.append(Finding(self.rule.id if self.rule else "ASC000", ADVICE, l0, l1, api=api,
                                     message=message, tip=tip, before=self.src.line_text(l0).strip()))

    def _before_after(self, edits: list[Edit]) -> tuple[str, str]:
        lo = min(self.src.line_of(e.start) for e in edits)
        hi = max(self.src.line_of(max(e.end - 1, e.start)) for e in edits)
        a = self.src.line_starts[lo - 1]
        b = self.src.line_starts[hi] if hi < len(self.src.line_starts) else len(self.src.text)
        return self.src.text[a:b].strip(), apply_edits(self.src.text, edits, a, b).strip()

    def hole(self, node: ast.AST) -> str:
        """Placeholder for ``node``'s original text, with any edits made inside it (see :func:`hole`)."""
        return hole(*self.span(node))

    def hole_span(self, a: int, b: int) -> str:
        return hole(a, b)


def nested_in(inner: Edit, outer: Edit) -> bool:
    """``inner`` lies inside one of ``outer``'s holes (so it is applied within ``outer``'s text)."""
    return inner is not outer and any(a <= inner.start and inner.end <= b for a, b in holes(outer))


def apply_edits(text: str, edits: list[Edit], start: int = 0, end: int | None = None) -> str:
    """``text[start:end]`` with ``edits`` (absolute offsets) applied, holes filled recursively."""
    return EditList(edits).apply(text, start, end)


class EditList:
    """Edits sorted by position once, to apply them to any part of a text: each part finds its edits by a
    binary search instead of a scan of them all (a file with 100,000 edits is re-parsed piece by piece)."""

    __slots__ = ("edits", "starts")

    def __init__(self, edits: list[Edit]):
        self.edits = sorted(edits, key=lambda e: (e.start, e.end))
        self.starts = [e.start for e in self.edits]

    def within(self, start: int, end: int) -> list[Edit]:
        """The edits inside ``[start, end]`` (in position order)."""
        lo, hi = bisect_left(self.starts, start), bisect_right(self.starts, end)
        return [e for e in self.edits[lo:hi] if e.end <= end]

    def apply(self, text: str, start: int = 0, end: int | None = None) -> str:
        return self._apply(text, start, len(text) if end is None else end, frozenset())

    def _apply(self, text: str, start: int, end: int, outer: frozenset[int]) -> str:
        inside = self.within(start, end)
        if outer:  # the edits whose holes are being filled
            inside = [e for e in inside if id(e) not in outer]
        holed = [e for e in inside if "\x00" in e.text]  # only these can hold others
        top = [e for e, n in zip(inside, _nested_flags(inside, holed), strict=True) if not n] if holed else inside
        out, pos = [], start
        for e in top:
            if e.start < pos:  # overlapping edits are resolved before; never apply two over the same text
                continue
            out.append(text[pos : e.start])
            if "\x00" in e.text:
                inner = outer | {id(e)}
                out.append(_HOLE.sub(lambda m, inner=inner: self._apply(text, int(m.group(1)), int(m.group(2)),
                                                                        inner), e.text))
            else:
                out.append(e.text)
            pos = e.end
        out.append(text[pos:end])
        return "".join(out)


def _nested_flags(edits: list[Edit], holed: list[Edit]) -> list[bool]:
    """``nested_in(e, o)`` for some ``o`` of ``holed``, for each ``e`` of ``edits``: the holes sorted by start with
    the two largest ends (of two different edits) seen so far, so each answer is a binary search."""
    spans = sorted((a, b, id(o)) for o in holed for a, b in holes(o))
    starts = [a for a, _, _ in spans]
    best: list[tuple[int, int, int]] = []  # (largest end, its edit, largest end of another edit)
    b1 = b2 = -1
    o1 = 0
    for _, b, o in spans:
        if b > b1:
            if o != o1:
                b2 = b1
            b1, o1 = b, o
        elif o != o1 and b > b2:
            b2 = b
        best.append((b1, o1, b2))
    flags = []
    for e in edits:
        i = bisect_right(starts, e.start) - 1
        if i < 0:
            flags.append(False)
            continue
        b1, o1, b2 = best[i]
        flags.append(b1 >= e.end and o1 != id(e) or b2 >= e.end)
    return flags


# ---------------------------------------------------------------------------------------------------------
def _hook_nodes(ctx: Context, hook: str) -> list[ast.AST]:
    """The nodes of ``hook``, from the context's single traversal."""
    idx = ctx.index
    if hook == "chain":
        names = ctx.imports.names
        chains = []
        for node in idx.chains:
            root = node
            while type(root) is ast.Attribute:
                root = root.value
            if type(root) is ast.Name and root.id in names:
                chains.append(node)
        return chains
    if hook in ("device_value", "backend_value"):
        role = hook.split("_")[0]
        return [n for n in ctx.roles.nodes if ctx.roles.get(n) == role]
    return {"import": idx.imports, "call": idx.calls, "compare": idx.compares, "string": idx.strings,
            "attribute": idx.attributes}[hook]


def run_rules(ctx: Context, rules: list[Rule], progress=_no_progress) -> None:
    low = ctx.low
    rules = [r for r in rules if not r.tokens or any(t in low for t in r.tokens)]
    hooks = ("import", "device_value", "backend_value", "call", "chain", "attribute", "compare", "string")
    for n, hook in enumerate(hooks):
        hook_rules = [r for r in rules if hook in r.hooks]
        if not hook_rules:
            continue
        for node in _hook_nodes(ctx, hook):
            for r in hook_rules:
                ctx.rule = r
                r.check(ctx, node)
        progress(0.3 + 0.4 * (n + 1) / len(hooks))
    for r in rules:
        if "module" in r.hooks:
            ctx.rule = r
            r.check(ctx, ctx.tree)
    ctx.rule = None


def _import_anchor(ctx: Context) -> int | None:
    """Line after which a new top-level import goes (0: before the first statement)."""
    body = ctx.tree.body
    torch_stmt = future = doc = None
    for i, stmt in enumerate(body):
        if i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(
            stmt.value.value, str
        ):
            doc = stmt
        elif isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            future = stmt
        elif isinstance(stmt, ast.Import) and any(a.name == "torch" or a.name.startswith("torch.") for a in stmt.names):
            torch_stmt = torch_stmt or stmt
        elif isinstance(stmt, ast.ImportFrom) and stmt.module and (stmt.module == "torch" or stmt.module.startswith(
                "torch.")) and not stmt.level:
            torch_stmt = torch_stmt or stmt
    anchor = torch_stmt or future or doc
    return anchor.end_lineno if anchor is not None else 0


def _leading_imports_end(ctx: Context) -> int:
    """Last line of the file's leading block of imports (0: none, after a docstring: its last line)."""
    end = 0
    for i, stmt in enumerate(ctx.tree.body):
        if i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(
                stmt.value.value, str):
            end = stmt.end_lineno
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            end = stmt.end_lineno
        elif isinstance(stmt, ast.Try) and all(isinstance(b, (ast.Import, ast.ImportFrom)) for b in stmt.body):
            end = stmt.end_lineno
        else:
            break
    return end


def _insert_device_type(ctx: Context) -> Edit:
    """DEVICE_TYPE and the portable helper classes, defined once after the file's leading imports."""
    src = ctx.src
    nl = src.newline
    torch = ctx.imports.local_for("torch") or "torch"
    text = portable.device_type_block(torch, nl) if ctx.need_device_type else ""
    for name in ctx.need_helpers:
        text += nl + nl + portable.helper_source(name).replace("\n", nl)
    after = _leading_imports_end(ctx)
    if after == 0:
        first = ctx.tree.body[0] if ctx.tree.body else None
        pos = src.line_starts[first.lineno - 1] if first is not None else len(src.text)
        # a class ends the block: two blank lines before what follows (as PEP 8 has it), else one
        return Edit(pos, pos, text.lstrip("\r\n") + nl * (2 if ctx.need_helpers else 1))
    if after < len(src.line_starts):
        pos = src.line_starts[after]
        if pos == len(src.text) and not src.text.endswith(("\n", "\r")):
            text = nl + text
        elif ctx.need_helpers:  # the file's own blank lines follow: top up to two, never more
            text = text.rstrip("\r\n") + nl + nl * max(0, 2 - _blank_lines_at(src.text, pos))
        return Edit(pos, pos, text)
    return Edit(len(src.text), len(src.text), nl + text.rstrip("\r\n"))


def _blank_lines_at(text: str, pos: int) -> int:
    """How many blank lines start at offset ``pos``."""
    n = 0
    for line in text[pos : pos + 400].splitlines(keepends=True):
        if line.strip() or not line.endswith(("\n", "\r")):
            break
        n += 1
    return n


def _insert_imports(ctx: Context, modules: list[str]) -> Edit | None:
    if not modules:
        return None
    src = ctx.src
    nl = src.newline
    after = _import_anchor(ctx)
    text = "".join(f"import {m}{nl}" for m in modules)
    if after == 0:
        first = ctx.tree.body[0] if ctx.tree.body else None
        pos = src.line_starts[first.lineno - 1] if first is not None else len(src.text)
        if first is None and src.text and not src.text.endswith(("\n", "\r")):
            text = nl + text
        return Edit(pos, pos, text)
    if after < len(src.line_starts):
        pos = src.line_starts[after]
        if pos == len(src.text) and not src.text.endswith(("\n", "\r")):
            text = nl + text
        return Edit(pos, pos, text)
    return Edit(len(src.text), len(src.text), nl + text.rstrip("\r\n"))


def _resolve_conflicts(findings: list[Finding]) -> None:
    """Overlapping edits: keep the first change, turn the later one into a manual report.

    The kept edits are filed by position (:class:`~.spans.Grid`), so each change is checked against the few
    kept edits near it, not all of them (time linear in the file's size, not quadratic)."""
    taken = Grid()
    for f in findings:
        if f.kind != CHANGE:
            continue
        clash = any(
            e.start < t.end and t.start < e.end and not nested_in(e, t) and not nested_in(t, e)
            for e in f.edits
            for t in taken.near(e)
        )
        if clash:
            f.kind, f.severity = REPORT, MANUAL
            f.message = f"{f.message} (overlaps another change: convert by hand)"
            f.tip, f.edits, f.after = f.after, [], ""
            continue
        for e in f.edits:
            taken.add(e)


def _bounds(src: SourceFile, tree: ast.Module) -> list[int]:
    """Offsets that cut the file into pieces of whole top-level statements (decorators included; statements
    sharing a line stay together), then the end: each piece parses on its own."""
    starts = src.line_starts
    bounds = [0]
    prev_end = 0
    for stmt in tree.body:
        first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", ())])
        if first > prev_end and first > 1:
            bounds.append(starts[first - 1])
        prev_end = stmt.end_lineno
    bounds.append(len(src.text) + 1)
    return bounds


def _runs(pieces: list[int]) -> list[list[int]]:
    """Sorted piece indexes as ``[first, last + 1]`` runs of consecutive ones."""
    runs: list[list[int]] = []
    for i in pieces:
        if runs and runs[-1][1] == i:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    return runs


def _keep_parsable(src: SourceFile, tree: ast.Module, findings: list[Finding]) -> str:
    """Add the changes one at a time; one that makes the file unparsable becomes a manual report.

    Only the pieces of the file (see :func:`_bounds`) that a change touches are parsed again, with the changes
    kept there so far; pieces an edit spans are joined first, so every edit lies inside one piece."""
    text = src.text
    bounds = _bounds(src, tree)
    changes = [f for f in findings if f.kind == CHANGE]
    # join the pieces that one edit spans: a group is then parsed whole
    joined = [False] * (len(bounds) - 1)  # piece i is in the group of piece i - 1
    for f in changes:
        for e in f.edits:
            r = _pieces(bounds, e)
            for i in range(r.start + 1, r.stop):
                joined[i] = True
    group: list[int] = []
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, j in enumerate(joined):
        g = group[-1] if j and group else i
        group.append(g)
        first.setdefault(g, i)
        last[g] = i
    kept_in: dict[int, list[Edit]] = {}
    kept: list[Edit] = []
    for f in changes:
        groups = sorted({group[i] for e in f.edits for i in _pieces(bounds, e)})
        ok = True
        for g in groups:
            lo, hi = bounds[first[g]], min(bounds[last[g] + 1], len(text))
            try:
                ast.parse(EditList(kept_in.get(g, []) + f.edits).apply(text, lo, hi))
            except SyntaxError as e:
                f.kind, f.severity = REPORT, MANUAL
                f.message = f"{f.message} (the rewrite did not parse here: {e.msg}; convert by hand)"
                f.tip, f.edits, f.after = f.after, [], ""
                ok = False
                break
        if not ok:
            continue
        kept.extend(f.edits)
        for e in f.edits:
            kept_in.setdefault(group[_pieces(bounds, e).start], []).append(e)
    return apply_edits(text, kept)


def _still_parses(src: SourceFile, tree: ast.Module, edits: list[Edit]) -> bool:
    """Whether the text with ``edits`` applied parses, parsing only the statements they touch.

    An edit inside a nested statement is checked by parsing that statement alone (see :mod:`.reparse`); the
    others by parsing the top-level statements they touch: the file is cut at the line starts of its top-level
    statements (decorators included; statements sharing a line stay together); every piece parsed on its own
    before, so the result parses when each touched piece, with its edits, still does. Parsing is most of a
    run's time: a file with one change is not parsed a second time whole.
    """
    from .reparse import unvouched

    ordered = EditList(edits)
    left = unvouched(src, tree, edits, ordered)
    if not left:
        return True
    bounds = _bounds(src, tree)
    pieces = sorted({i for e in left for i in _pieces(bounds, e)})
    if sum(bounds[i + 1] - bounds[i] for i in pieces) > len(src.text) // 2:
        # most of the file (a generated file of top-level statements): one parse beats thousands of small ones
        try:
            ast.parse(ordered.apply(src.text))
        except SyntaxError:
            return False
        return True
    for a, b in _runs(pieces):
        lo, hi = bounds[a], min(bounds[b], len(src.text))
        try:
            ast.parse(ordered.apply(src.text, lo, hi))
        except SyntaxError:
            return False
    return True


def _pieces(bounds: list[int], e: Edit) -> range:
    """Indexes of the pieces ``[bounds[i], bounds[i+1])`` that edit ``e`` touches (an insertion: the one it is in);
    an edit that ends where a piece starts (it replaced the line break before it) touches that piece too."""
    first = bisect_right(bounds, e.start) - 1
    last = bisect_right(bounds, e.end) - 1
    return range(first, last + 1)


def migrate_source(data: bytes | str, options: Options, path: str = "<string>",
                   progress=None) -> tuple[bytes | str, FileResult]:
    """Convert one file's content. Returns (new content of the same type, result). Raises SyntaxError,
    ``DecodeError``. ``progress(fraction)``, when given, is told how far the conversion is (for a long file).

    The cyclic garbage collector is paused meanwhile: the syntax tree is hundreds of thousands of objects and
    holds no cycles, and collecting it over and over took a sixth of the time (more on a large file: the cost
    grew faster than the file)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _migrate_source(data, options, path, progress or _no_progress)
    finally:
        if enabled:
            gc.enable()


def _migrate_source(data: bytes | str, options: Options, path: str, progress) -> tuple[bytes | str, FileResult]:
    t0 = time.perf_counter()
    src = SourceFile.from_bytes(data) if isinstance(data, bytes) else SourceFile.from_text(data)
    tree = ast.parse(src.text, filename=path)
    progress(0.15)
    ctx = Context(src, tree, options)
    progress(0.3)
    run_rules(ctx, active_rules(options), progress)
    from .rules.devices import keep_device_tests_whole
    from .rules.general import scan_leftovers

    if "cuda" in ctx.low:  # a device test that still asks for CUDA names it
        keep_device_tests_whole(ctx)

    if "cud" in ctx.low or "nccl" in ctx.low:  # every CUDA token says cuda, cudnn or nccl
        scan_leftovers(ctx)
    findings = ctx.findings
    _resolve_conflicts(findings)
    progress(0.8)
    edits = [e for f in findings if f.kind == CHANGE for e in f.edits]
    result = FileResult(path=path, status="unchanged", lines=src.line_count(), parsed=True)
    new_text = src.text
    if edits:
        needs = sorted(ctx.need_imports, key=lambda m: (m != "torch", m))  # torch first
        if (options.target == NPU and "torch_npu" not in needs and not ctx.imports.imports_module("torch_npu")
                and options.enabled(RULES["ASC001"])):
            needs.append("torch_npu")
        imp = _insert_imports(ctx, needs)
        if imp is not None:
            edits.append(imp)
            line = src.line_of(imp.start) if imp.start < len(src.text) else src.line_count()
            findings.append(Finding("ASC001", CHANGE, line, line, api=", ".join(needs),
                                    message=f"add `import {', '.join(needs)}` once",
                                    before="", after=imp.text.strip(), edits=[imp]))
        if ctx.need_device_type or ctx.need_helpers:
            dt = _insert_device_type(ctx)
            edits.append(dt)
            line = src.line_of(dt.start) if dt.start < len(src.text) else src.line_count()
            names = [portable.DEVICE_TYPE_NAME] * ctx.need_device_type + ctx.need_helpers
            findings.append(Finding("ASC001", CHANGE, line, line, api=", ".join(names),
                                    message=f"define {', '.join(names)} once after the imports",
                                    before="", after=dt.text.strip(), edits=[dt]))
        new_text = apply_edits(src.text, edits)
        if not _still_parses(src, tree, edits):  # some change broke the code: keep only the changes that parse
            new_text = _keep_parsable(src, tree, findings)
        wrapped = wrap_long_lines(new_text, src.text)  # no changed line longer than the file's longest
        if wrapped is not new_text:
            try:
                ast.parse(wrapped)
                new_text = wrapped
            except SyntaxError:  # pragma: no cover - breaks fall inside brackets only
                pass
        result.status = "changed" if new_text != src.text else "unchanged"
    result.program = runs_as_program(src.text, tree, ctx.index)
    progress(1.0)
    findings.sort(key=lambda f: (f.line, f.rule, f.kind))
    result.findings = findings
    result.seconds = time.perf_counter() - t0
    out: bytes | str = src.encode(new_text) if isinstance(data, bytes) else new_text
    if isinstance(data, bytes) and new_text == src.text:
        out = data
    return out, result


__all__ = ["Options", "Context", "migrate_source", "apply_edits", "active_rules", "REVIEW"]
