"""``ascendify advise --apply OUT``: the fused-operator findings rewritten in a copy of the project, and proven.

For each finding ``--apply`` can act on, the code at the finding's line is matched with ``ast`` and rewritten with
migrate's machinery (exact text edits over the original text, ``ascendify.migrate.model.Edit`` and
``engine.apply_edits``: everything outside the edits stays byte for byte; a rewrite that would not parse is
dropped and said):

* **ADV401 RMSNorm**: the ``forward`` of the ``nn.Module`` class holding the computation returns
  ``torch_npu.npu_rms_norm(x, self.<weight>, epsilon=<eps>)[0]`` (the weight: the class's one parameter, or the
  one the computation multiplies by; eps: the term added under the square root);
* **ADV402 rotary**: each ``A * C + rotate(A) * S`` at the line becomes ``torch_npu.npu_rotary_mul(A, C', S')``
  (C and S cast to A's dtype and given A's rank by leading unit dimensions, as the kernel requires; interleaved
  and complex forms are left as advice);
* **ADV404 attention**: the statements ``s = q @ kᵀ * scale`` [``s = s.masked_fill(m, -inf)``] ``s = softmax(s)``
  [``s = dropout(s)``] and the ``s @ v`` that follows become one ``F.scaled_dot_product_attention(q, k, v,
  attn_mask=~m, dropout_p=..., scale=...)``;
* **ADV405 optimizer**: ``foreach=False`` becomes ``fused=True`` (AdamW, SGD: torch_npu has their fused kernels;
  Adam: ``foreach=True``, its fused kernel falls back to the CPU).

``import torch_npu`` is added where a rewrite needs it. The project is copied to OUT (``.git``, caches and
virtual environments left out), the rewritten files written there, with ``OUT/advise-apply.diff`` (unified, from
the project's folder) and ``OUT/advise-apply.json``. Then the proof:

1. **lockstep**: the model the program called (captured during the advise run, with its first batch) against a
   copy whose rewritten classes are the new ones (the rewritten files' definitions, loaded without running their
   top-level code), ``precision.lockstep.compare_models`` on the emulated NPU: same outputs within each call's
   limit;
2. **ops per step**: the program run again from OUT under the tracer for the same steps: the median ops per step
   before and after, and the findings that are gone.
"""

from __future__ import annotations

import ast
import difflib
import os
import shutil
import sys
from dataclasses import dataclass, field
from typing import Any

from ascendify.migrate.model import Edit
from ascendify.migrate.source import SourceFile

IGNORE = {".git", "__pycache__", ".venv", "venv", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", "node_modules"}
APPLICABLE = ("ADV401", "ADV402", "ADV404", "ADV405")


@dataclass
class FileEdits:
    path: str  # absolute, in the project
    rel: str
    src: SourceFile
    tree: ast.Module
    edits: list[Edit] = field(default_factory=list)
    needs_torch_npu: bool = False
    needs_functional: bool = False
    done: list[dict[str, Any]] = field(default_factory=list)  # {"rule", "line", "what"}


@dataclass
class Plan:
    files: dict[str, FileEdits] = field(default_factory=dict)
    skipped: list[dict[str, Any]] = field(default_factory=list)  # {"rule", "where", "why"}

    def changed(self) -> list[FileEdits]:
        return [f for f in self.files.values() if f.edits]


# -- planning --------------------------------------------------------------------------------------------------


def plan(findings: list, project: str) -> Plan:
    """The edits for ``findings`` (``model.Finding``) whose files lie in ``project``."""
    p = Plan()
    for f in findings:
        if f.rule not in APPLICABLE:
            continue
        path = _resolve(f.path, project) or _resolve(f.file, project)
        if path is None:
            p.skipped.append({"rule": f.rule, "where": f.where, "why": "the file is not in the project"})
            continue
        fe = p.files.get(path)
        if fe is None:
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
                src = SourceFile.from_bytes(data)
                tree = ast.parse(src.text)
            except (OSError, SyntaxError, ValueError) as e:
                p.skipped.append({"rule": f.rule, "where": f.where, "why": f"cannot read it: {e}"})
                continue
            fe = p.files[path] = FileEdits(path, os.path.relpath(path, project), src, tree)
        why = _RULES[f.rule](fe, f)
        if why:
            p.skipped.append({"rule": f.rule, "where": f.where, "why": why})
    return p


def _resolve(file: str | None, project: str) -> str | None:
    if not file:
        return None
    for cand in (file, os.path.join(project, file), os.path.join(os.getcwd(), file)):
        a = os.path.abspath(cand)
        if os.path.isfile(a) and (a == project or a.startswith(project + os.sep)):
            return a
    return None


def _nodes_at(tree: ast.AST, line: int, kind: type) -> list[ast.AST]:
    return [n for n in ast.walk(tree) if isinstance(n, kind) and n.lineno <= line <= (n.end_lineno or n.lineno)]


def _seg(fe: FileEdits, node: ast.AST) -> str:
    return fe.src.segment(node)


def _replace(fe: FileEdits, node: ast.AST, text: str) -> None:
    a, b = fe.src.span(node)
    fe.edits.append(Edit(a, b, text))


def _overlaps(fe: FileEdits, node: ast.AST) -> bool:
    a, b = fe.src.span(node)
    return any(not (e.end <= a or b <= e.start) for e in fe.edits)


# -- RMSNorm ------------------------------------------------------------------------------------------------


def _rms_norm(fe: FileEdits, f) -> str | None:
    classes = [c for c in _nodes_at(fe.tree, f.line, ast.ClassDef)]
    if not classes:
        return "the computation is not inside an nn.Module class"
    cls = min(classes, key=lambda c: (c.end_lineno or 0) - c.lineno)  # the innermost
    fwd = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if fwd is None or len(fwd.args.args) < 2:
        return f"class {cls.name} has no forward(self, x)"
    x = fwd.args.args[1].arg
    weight = _the_parameter(cls)
    if weight is None:
        return f"class {cls.name}: no single nn.Parameter to use as the weight"
    eps = _eps_near(fe, cls, f.line)
    if eps is None:
        return f"class {cls.name}: no '+ eps' under the square root at line {f.line}"
    if _overlaps(fe, fwd):
        return "overlaps another rewrite"
    body_start = fwd.body[0]
    if isinstance(body_start, ast.Expr) and isinstance(getattr(body_start, "value", None), ast.Constant):
        first = fwd.body[1] if len(fwd.body) > 1 else None  # keep the docstring
    else:
        first = body_start
    if first is None:
        return f"class {cls.name}: forward has no body"
    a = fe.src.span(first)[0]
    b = fe.src.span(fwd.body[-1])[1]
    fe.edits.append(Edit(a, b, f"return torch_npu.npu_rms_norm({x}, self.{weight}, epsilon={eps})[0]"))
    fe.needs_torch_npu = True
    fe.done.append({"rule": f.rule, "line": fwd.lineno, "what": f"{cls.name}.forward -> torch_npu.npu_rms_norm"})
    return None


def _the_parameter(cls: ast.ClassDef) -> str | None:
    names = []
    for n in ast.walk(cls):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
            fn = n.value.func
            fname = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            if fname == "Parameter":
                for t in n.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        names.append(t.attr)
    if len(names) == 1:
        return names[0]
    return "weight" if "weight" in names else None


def _eps_near(fe: FileEdits, cls: ast.ClassDef, line: int) -> str | None:
    """The term added under rsqrt/sqrt: ``self.eps``, ``1e-6``..., in the class (the finding's line first)."""
    calls = [n for n in ast.walk(cls) if isinstance(n, ast.Call) and _callee(n) in ("rsqrt", "sqrt")]
    calls.sort(key=lambda n: (not (n.lineno <= line <= (n.end_lineno or n.lineno)), n.lineno))
    for c in calls:
        for arg in c.args[:1]:
            for n in ast.walk(arg):
                if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add):
                    for side in (n.right, n.left):
                        if _is_eps(side):
                            return _seg(fe, side)
    return None


def _is_eps(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, float) and 0 < node.value < 1e-2:
        return True
    return isinstance(node, ast.Attribute) and "eps" in node.attr.lower()


def _callee(call: ast.Call) -> str:
    fn = call.func
    return fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")


# -- rotary -------------------------------------------------------------------------------------------------


def _rotary(fe: FileEdits, f) -> str | None:
    mode = (f.evidence or {}).get("mode", "half")
    if mode != "half":
        return f"rotary_mode {mode!r}: left as advice (the rewrite handles the rotate_half form)"
    found = 0
    for node in ast.walk(fe.tree):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)):
            continue
        if not (node.lineno <= f.line <= (node.end_lineno or node.lineno)):
            continue
        m = _rope_parts(fe, node)
        if m is None or _overlaps(fe, node):
            continue
        x, c, s = m
        fix = (f"torch_npu.npu_rotary_mul({x}, {_bcast(c, x)}, {_bcast(s, x)})")
        _replace(fe, node, fix)
        found += 1
    if not found:
        return f"no 'x * cos + rotate_half(x) * sin' expression at line {f.line}"
    fe.needs_torch_npu = True
    fe.done.append({"rule": f.rule, "line": f.line, "what": f"{found} rotary expression(s) -> torch_npu.npu_rotary_mul"})
    return None


def _bcast(t: str, like: str) -> str:
    """``t`` in ``like``'s dtype with leading unit dimensions up to its rank (what npu_rotary_mul requires)."""
    return f"{t}.to({like}.dtype)[(None,) * ({like}.dim() - {t}.dim())]"


def _rope_parts(fe: FileEdits, node: ast.BinOp) -> tuple[str, str, str] | None:
    """``A * C + R(A) * S`` (either order of the sum and of each product) -> ``(A, C, S)``."""
    terms = [node.left, node.right]
    if not all(isinstance(t, ast.BinOp) and isinstance(t.op, ast.Mult) for t in terms):
        return None
    plain = rotated = None
    for t in terms:
        for a, b in ((t.left, t.right), (t.right, t.left)):
            if isinstance(a, ast.Call) and len(a.args) == 1 and isinstance(a.args[0], (ast.Name, ast.Attribute)):
                rotated = (_seg(fe, a.args[0]), _seg(fe, b), t)
    if rotated is None:
        return None
    x, s, rt = rotated
    other = terms[1] if terms[0] is rt else terms[0]
    for a, b in ((other.left, other.right), (other.right, other.left)):
        if isinstance(a, (ast.Name, ast.Attribute)) and _seg(fe, a) == x:
            plain = _seg(fe, b)
    if plain is None:
        return None
    return x, plain, s


# -- attention ----------------------------------------------------------------------------------------------


def _attention(fe: FileEdits, f) -> str | None:
    funcs = _nodes_at(fe.tree, f.line, ast.FunctionDef)
    if not funcs:
        return "not inside a function"
    fn = min(funcs, key=lambda n: (n.end_lineno or 0) - n.lineno)
    for body in _bodies(fn):
        for i, st in enumerate(body):
            if st.lineno <= f.line <= (st.end_lineno or st.lineno):
                why = _attention_at(fe, body, i, f)
                return why
    return f"no statement at line {f.line}"


def _bodies(node: ast.AST):
    for n in ast.walk(node):
        for name in ("body", "orelse", "finalbody"):
            b = getattr(n, name, None)
            if isinstance(b, list) and b and isinstance(b[0], ast.stmt):
                yield b


def _assign_to(st: ast.stmt) -> tuple[str, ast.AST] | None:
    if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
        return st.targets[0].id, st.value
    return None


def _attention_at(fe: FileEdits, body: list[ast.stmt], i: int, f) -> str | None:
    sm = _assign_to(body[i])
    if sm is None or not isinstance(sm[1], ast.Call) or _callee(sm[1]) != "softmax":
        return f"line {f.line} is not 'scores = softmax(scores, dim=-1)'"
    name = sm[0]

    def uses(st: ast.stmt) -> bool:
        return any(isinstance(x, ast.Name) and x.id == name for x in ast.walk(st))

    def back(j: int) -> int:  # the previous statement that touches the scores (others stay where they are)
        j -= 1
        while j >= 0 and not uses(body[j]):
            j -= 1
        return j

    drop = [i]
    j = back(i)
    mask_expr = additive = None
    st = _assign_to(body[j]) if j >= 0 else None
    if st and st[0] == name and isinstance(st[1], ast.Call) and _callee(st[1]) in ("masked_fill", "masked_fill_"):
        call = st[1]
        if len(call.args) >= 1:
            mask_expr = _seg(fe, call.args[0])
        drop.append(j)
        j = back(j)
        st = _assign_to(body[j]) if j >= 0 else None
    elif st and st[0] == name and isinstance(st[1], ast.BinOp) and isinstance(st[1].op, ast.Add):
        additive = _seg(fe, st[1].right)
        drop.append(j)
        j = back(j)
        st = _assign_to(body[j]) if j >= 0 else None
    if j >= 0 and (not st or st[0] != name):
        return f"line {body[j].lineno} uses '{name}' between the attention's steps: left as it is"
    if not st:
        return "no 'scores = q @ k.transpose(-2, -1) * scale' before the softmax"
    qk = _scores(fe, st[1])
    if qk is None:
        return "the scores are not 'q @ k.transpose(-2, -1)' (scaled)"
    drop.append(j)
    q, k, scale = qk
    start = j
    # forward: dropout, then the product with v
    n = i + 1
    dropout = None
    st = _assign_to(body[n]) if n < len(body) else None
    if st and st[0] == name and isinstance(st[1], ast.Call) and st[1].args and _seg(fe, st[1].args[0]) == name:
        callee = st[1].func
        if isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Attribute):  # self.attn_dropout(att)
            dropout = f"{_seg(fe, callee)}.p if self.training else 0.0"
        elif _callee(st[1]) == "dropout":
            p = next((_seg(fe, kw.value) for kw in st[1].keywords if kw.arg == "p"), None)
            p = p or (_seg(fe, st[1].args[1]) if len(st[1].args) > 1 else "0.5")
            dropout = f"{p} if self.training else 0.0"
        elif isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name) and callee.value.id == "self":
            dropout = f"{_seg(fe, callee)}.p if self.training else 0.0"
        else:
            return "the softmax is followed by a call that is not a dropout"
        drop.append(n)
        n += 1
    if n >= len(body):
        return "no 'scores @ v' after the softmax"
    pv = None
    for node in ast.walk(body[n]):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult) and _seg(fe, node.left) == name:
            pv = node
            break
    if pv is None:
        return "no 'scores @ v' right after the softmax"
    if sum(isinstance(x, ast.Name) and x.id == name for x in ast.walk(body[n])) > 1:
        return f"line {body[n].lineno} uses '{name}' besides 'scores @ v': left as it is"
    # the scores must not be used after that statement
    for later in body[n + 1:]:
        if any(isinstance(x, ast.Name) and x.id == name for x in ast.walk(later)):
            return f"'{name}' is used after the attention (returned or logged): left as it is"
    v = _seg(fe, pv.right)
    args = [q, k, v]
    if mask_expr is not None:
        args.append(f"attn_mask=~({mask_expr})")
    elif additive is not None:
        args.append(f"attn_mask={additive}")
    if dropout is not None:
        args.append(f"dropout_p={dropout}")
    args.append(f"scale={scale}")
    func = _functional_name(fe)
    call = f"{func}.scaled_dot_product_attention({', '.join(args)})"
    if any(_overlaps(fe, body[d]) for d in drop) or _overlaps(fe, pv):
        return "overlaps another rewrite"
    for d in sorted(drop):  # each statement of the old computation goes, with its line
        a, b = fe.src.span(body[d])
        line_start = fe.src.text.rfind("\n", 0, a) + 1
        nl = fe.src.text.find("\n", b)
        fe.edits.append(Edit(line_start, nl + 1 if nl >= 0 else b, ""))
    _replace(fe, pv, call)
    fe.done.append({"rule": f.rule, "line": body[start].lineno,
                    "what": f"softmax(QKᵀ)V (lines {body[start].lineno}-{body[n].lineno}) -> "
                            f"{func}.scaled_dot_product_attention"})
    return None


def _scores(fe: FileEdits, e: ast.AST) -> tuple[str, str, str] | None:
    """``(q @ k.transpose(-2, -1)) * s`` / ``/ s`` / ``torch.matmul(q, k.transpose(...))`` -> ``(q, k, scale)``."""
    scale = "1.0"
    if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Mult, ast.Div)):
        mm, other = (e.left, e.right)
        if not _is_qk(mm) and _is_qk(e.right) and isinstance(e.op, ast.Mult):
            mm, other = e.right, e.left
        scale = _seg(fe, other) if isinstance(e.op, ast.Mult) else f"1.0 / ({_seg(fe, other)})"
        e = mm
    parts = _is_qk(e)
    if not parts:
        return None
    q, kt = parts
    k = kt.func.value if isinstance(kt, ast.Call) else kt.value  # k.transpose(...) / k.mT
    return _seg(fe, q), _seg(fe, k), scale


def _is_qk(e: ast.AST):
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.MatMult):
        q, kt = e.left, e.right
    elif isinstance(e, ast.Call) and _callee(e) == "matmul" and len(e.args) == 2:
        q, kt = e.args
    else:
        return None
    if isinstance(kt, ast.Call) and isinstance(kt.func, ast.Attribute) and kt.func.attr in ("transpose", "permute"):
        return q, kt
    if isinstance(kt, ast.Attribute) and kt.attr in ("mT", "T"):
        return q, kt
    return None


def _functional_name(fe: FileEdits) -> str:
    """How the file names torch.nn.functional (``F``), or ``torch.nn.functional``."""
    for n in fe.tree.body:
        if isinstance(n, ast.Import):
            for a in n.names:
                if a.name == "torch.nn.functional" and a.asname:
                    return a.asname
        if isinstance(n, ast.ImportFrom) and n.module == "torch.nn":
            for a in n.names:
                if a.name == "functional":
                    return a.asname or "functional"
    return "torch.nn.functional"


# -- optimizer ----------------------------------------------------------------------------------------------


def _optimizer(fe: FileEdits, f) -> str | None:
    cls = (f.evidence or {}).get("optimizer")
    calls = [n for n in _nodes_at(fe.tree, f.line, ast.Call) if _callee(n) == cls]
    if not calls:
        return f"no {cls}(...) call at line {f.line}"
    call = calls[0]
    kw = {k.arg: k for k in call.keywords}
    want = ("foreach", "True") if cls == "Adam" else ("fused", "True")
    if "foreach" in kw and want[0] == "fused":
        _replace(fe, kw["foreach"], "fused=True")
    elif "foreach" in kw:
        _replace(fe, kw["foreach"].value, "True")
    elif want[0] not in kw:
        a, b = fe.src.span(call)
        close = fe.src.text.rfind(")", a, b)
        sep = ", " if (call.args or call.keywords) else ""
        fe.edits.append(Edit(close, close, f"{sep}{want[0]}={want[1]}"))
    else:
        return f"{cls} already has {want[0]}=..."
    fe.done.append({"rule": f.rule, "line": call.lineno, "what": f"{cls}(..., {want[0]}={want[1]})"})
    return None


_RULES = {"ADV401": _rms_norm, "ADV402": _rotary, "ADV404": _attention, "ADV405": _optimizer}


# -- writing ------------------------------------------------------------------------------------------------


def render(fe: FileEdits) -> str:
    """The rewritten text of one file (``import torch_npu`` added after the last top-level torch import)."""
    from ascendify.migrate.engine import apply_edits

    edits = list(fe.edits)
    if fe.needs_torch_npu and not _imports(fe.tree, "torch_npu"):
        anchor = None
        for n in fe.tree.body:
            if isinstance(n, ast.Import) and any(a.name == "torch" or a.name.startswith("torch.") for a in n.names):
                anchor = n
            elif isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "torch":
                anchor = n
        if anchor is not None:
            end = fe.src.span(anchor)[1]
            edits.append(Edit(end, end, fe.src.newline + "import torch_npu"))
        else:
            edits.append(Edit(0, 0, "import torch_npu" + fe.src.newline))
    from ascendify.migrate.layout import wrap_long_lines

    return wrap_long_lines(apply_edits(fe.src.text, edits), fe.src.text)


def _imports(tree: ast.Module, name: str) -> bool:
    for n in tree.body:
        if isinstance(n, ast.Import) and any(a.name == name for a in n.names):
            return True
        if isinstance(n, ast.ImportFrom) and n.module == name:
            return True
    return False


def copy_project(project: str, out: str) -> None:
    def ignore(folder, names):
        return [n for n in names if n in IGNORE or n.endswith(".pyc")]

    shutil.copytree(project, out, ignore=ignore, symlinks=True, dirs_exist_ok=True)


def write(p: Plan, project: str, out: str) -> tuple[list[str], str]:
    """Copy the project to ``out`` and write the rewritten files; returns ``(files written, unified diff)``.
    A file whose rewrite does not parse is left as it was (and said in ``p.skipped``)."""
    from ascendify.core.fileio import write_atomic

    copy_project(project, out)
    written, diffs = [], []
    for fe in p.changed():
        new = render(fe)
        try:
            ast.parse(new)
        except SyntaxError as e:
            p.skipped.append({"rule": ",".join(d["rule"] for d in fe.done), "where": fe.rel,
                              "why": f"the rewrite does not parse ({e.msg}, line {e.lineno}): left as it was"})
            fe.done.clear()
            continue
        dst = os.path.join(out, fe.rel)
        write_atomic(dst, fe.src.encode(new))
        written.append(dst)
        a = fe.src.text.splitlines(keepends=True)
        b = new.splitlines(keepends=True)
        diffs.append("".join(difflib.unified_diff(a, b, f"a/{fe.rel}", f"b/{fe.rel}")))
    return written, "".join(diffs)


# -- the proof ----------------------------------------------------------------------------------------------


def load_definitions(path: str, name: str) -> dict[str, Any]:
    """The imports, functions, classes and plain assignments of ``path``, executed as module ``name`` without
    the rest of its top-level code (a training script's loop does not run)."""
    import types

    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    keep = []
    for n in tree.body:
        if isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            keep.append(n)
        elif isinstance(n, (ast.Assign, ast.AnnAssign)) and not any(isinstance(x, ast.Call) for x in ast.walk(n)):
            keep.append(n)
    mod = types.ModuleType(name)
    mod.__file__ = path
    sys.modules[name] = mod
    code = compile(ast.Module(body=keep, type_ignores=[]), path, "exec")
    exec(code, mod.__dict__)  # noqa: S102 (the user's own definitions, as their program runs them)
    return mod.__dict__


def swap_classes(model, rewritten: dict[str, str], project: str) -> tuple[Any, list[str]]:
    """A deep copy of ``model`` whose modules of a rewritten file's classes are instances of the rewritten class
    (same attributes, the new code): ``rewritten`` maps a project file to its rewritten copy."""
    target = copy_model(model)
    spaces: dict[str, dict[str, Any]] = {}
    swapped = []
    for m in target.modules():
        cls = type(m)
        src = _defined_in(cls)
        new_file = rewritten.get(src) if src else None
        if new_file is None:
            continue
        ns = spaces.get(new_file)
        if ns is None:
            ns = spaces[new_file] = load_definitions(new_file, f"_ascendify_advise_apply_{len(spaces)}")
        new_cls = ns.get(cls.__qualname__)
        if isinstance(new_cls, type):
            m.__class__ = new_cls
            if cls.__qualname__ not in swapped:
                swapped.append(cls.__qualname__)
    return target, swapped


def copy_model(model):
    """A copy of ``model`` that holds its own submodules everywhere: a cloudpickle round trip (a lambda over the
    model's own submodules, minGPT's ``Block.mlpf``, then calls the copy's, which ``copy.deepcopy`` does not
    give); deepcopy where cloudpickle cannot take the model."""
    import copy

    try:
        import cloudpickle

        return cloudpickle.loads(cloudpickle.dumps(model))
    except Exception:  # noqa: BLE001 (no cloudpickle, or a model it cannot take)
        return copy.deepcopy(model)


def _defined_in(cls: type) -> str | None:
    """The file a class was defined in, from its methods' code (a class of a script run as ``__main__`` has no
    module to ask once the script is over)."""
    for v in vars(cls).values():
        code = getattr(getattr(v, "__func__", v), "__code__", None)
        if code is not None:
            return os.path.abspath(code.co_filename)
    return None


def lockstep(model, batch, rewritten: dict[str, str], project: str) -> dict[str, Any]:
    """compare_models(original, rewritten copy) on the captured batch: golden on the CPU in fp32, target on the
    (emulated) NPU; returns the verdict and the numbers."""
    import torch

    from ascendify.precision.compare_render import headline
    from ascendify.precision.lockstep import compare_models

    target, swapped = swap_classes(model, rewritten, project)
    golden = copy_model(model).to("cpu")
    dev = "npu" if hasattr(torch, "npu") and torch.npu.is_available() else "cpu"
    res = compare_models(golden, target, *batch, golden_device="cpu", target_device=dev, copy_weights=False,
                         backward=True)
    status, text = headline(res)
    return {"verdict": res.verdict, "status": status, "headline": text, "swapped_classes": swapped,
            "matched_calls": res.matched_count, "target_device": dev,
            "end_to_end": res.end_to_end}


def run_apply(args, result, prog, project: str, captured, who: str) -> int:
    """The whole of ``--apply``: plan, write, prove, report. Exit status 0 when the rewrite matches, 1 when the
    lockstep diverges, 2 when nothing could be rewritten."""
    from ascendify import report
    from ascendify.advise.runner import trace_program

    out = os.path.abspath(args.apply)
    project = os.path.abspath(project)
    todo = [f for f in result.findings + result.minor if f.rule in APPLICABLE]
    p = plan(todo, project)
    doc: dict[str, Any] = {"schema": "ascendify.advise.apply/1", "project": project, "out": out,
                           "program": prog.display(), "applied": [], "skipped": p.skipped}
    if not p.changed():
        why = "; ".join(f"{s['rule']} {s['where']}: {s['why']}" for s in p.skipped) or "no fused-operator finding"
        print(f"{who}: --apply: nothing to rewrite ({why})", file=sys.stderr)
        return 2
    written, diff = write(p, project, out)
    for fe in p.changed():
        for d in fe.done:
            doc["applied"].append({"file": fe.rel, **d})
    from ascendify.core.fileio import write_atomic

    write_atomic(os.path.join(out, "advise-apply.diff"), diff)
    rewritten = {fe.path: os.path.join(out, fe.rel) for fe in p.changed() if fe.done}
    print(f"{who}: --apply: {len(doc['applied'])} rewrite(s) in {len(rewritten)} file(s) of {out} "
          f"(diff: {os.path.join(out, 'advise-apply.diff')})", file=sys.stderr)
    code = 0
    if captured is not None:
        model, batch = captured
        try:
            doc["lockstep"] = lockstep(model, batch, rewritten, project)
        except Exception as e:  # noqa: BLE001 (the rewrite stays written; the proof says why it could not run)
            doc["lockstep"] = {"verdict": "not run", "headline": f"lockstep could not run: {type(e).__name__}: {e}"}
        if doc["lockstep"].get("verdict") == "divergence":
            code = 1
    else:
        doc["lockstep"] = {"verdict": "not run", "headline": "no model call with parameters was seen"}
    # the same program from the rewritten copy, the same steps: ops per step before and after
    doc["ops_per_step"] = _ops_compare(result, prog, project, out, args.steps, trace_program)
    report.write_json(os.path.join(out, "advise-apply.json"), doc)
    if not args.quiet:
        _print(doc, who)
    return code


def _ops_compare(result, prog, project: str, out: str, steps: int, trace_program) -> dict[str, Any]:
    from ascendify.advise.analysis import analyze
    from ascendify.program import Program

    before = _median_ops(result)
    if prog.path is None or not os.path.abspath(prog.path).startswith(project + os.sep):
        return {"before": before, "after": None, "note": "the program is not a script in the project: not re-run"}
    new_path = os.path.join(out, os.path.relpath(os.path.abspath(prog.path), project))
    new_prog = Program.parse([*(["python"] if True else []), *prog.python_opts, new_path, *prog.args], check=True)
    _forget_modules(project, out)
    cwd = os.getcwd()
    rel_cwd = os.path.relpath(cwd, project)
    run_dir = os.path.join(out, rel_cwd) if not rel_cwd.startswith("..") else cwd
    saved_path = sys.path[:]
    # the project's folders on sys.path (PYTHONPATH=., an installed package's folder) stand for the copy's now
    sys.path[:] = [_moved(p, project, out) for p in sys.path]
    try:
        os.chdir(run_dir)
        code, trace, _ = trace_program(new_prog, steps=steps, root=run_dir)
    except Exception as e:  # noqa: BLE001
        return {"before": before, "after": None, "note": f"the rewritten program could not run: {e}"}
    finally:
        os.chdir(cwd)
        sys.path[:] = saved_path
        _forget_modules(out)
    after_result = analyze(trace, result.meta.get("device"))
    after = _median_ops(after_result)
    gone = sorted({f.rule for f in result.findings + result.minor if f.rule in APPLICABLE}
                  - {f.rule for f in after_result.findings + after_result.minor})
    return {"before": before, "after": after, "exit_code": code, "rules_gone": gone,
            "est_step_ms": {"before": _est_ms(result), "after": _est_ms(after_result)}}


def _est_ms(result) -> float | None:
    """The estimated step without the measured wait for data (host noise, the same code on both sides)."""
    e = result.estimate or {}
    if e.get("step_ms") is None:
        return None
    return round(e["step_ms"] - (e.get("data_wait_ms") or 0.0), 4)


def _moved(path: str, project: str, out: str) -> str:
    a = os.path.abspath(path or os.curdir)
    if a == project or a.startswith(project + os.sep):
        return os.path.join(out, os.path.relpath(a, project))
    return path


def _median_ops(result) -> int | None:
    want = set(result.meta.get("steps_analysed") or [])
    ops = sorted(s["ops"] for s in result.steps if s["step"] in want and s.get("ops") is not None)
    return ops[len(ops) // 2] if ops else None


def _forget_modules(*roots: str) -> None:
    """Drop the project's modules from ``sys.modules``: the rewritten copy's are imported afresh."""
    prefixes = tuple(os.path.abspath(r) + os.sep for r in roots)
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if f and os.path.abspath(f).startswith(prefixes):
            del sys.modules[name]


def _print(doc: dict[str, Any], who: str) -> None:
    w = lambda s="": print(s[:80])  # noqa: E731
    w()
    w(f"--apply: {len(doc['applied'])} rewrite(s), written to {doc['out']}")
    for a in doc["applied"]:
        w(f"  {a['rule']}  {a['file']}:{a['line']}  {a['what']}"[:80])
    for s in doc["skipped"]:
        w(f"  not rewritten: {s['rule']} {s['where']}: {s['why']}"[:80])
    ls = doc.get("lockstep") or {}
    w(f"  lockstep: {ls.get('headline', 'not run')}"[:80])
    ops = doc.get("ops_per_step") or {}
    if ops.get("after") is not None:
        w(f"  ops per step on the emulated NPU: {ops['before']:,} -> {ops['after']:,}; estimated step "
          f"{ops['est_step_ms']['before']} -> {ops['est_step_ms']['after']} ms")
    elif ops.get("note"):
        w(f"  ops per step: {ops['note']}"[:80])
