"""Device rules: ``.cuda()``, ``.is_cuda``, device strings, device-type comparisons."""

from __future__ import annotations

import ast
import re
from bisect import bisect_left, bisect_right

from ascendify.device.apis import is_device_string

from ..dataflow import is_device_name
from ..flags import own_name_ids
from ..imports import dotted_parts
from ..model import CHANGE, MANUAL, REPORT, Edit
from ..portable import device_type_block
from ..spans import Spans
from .base import NPU, PORTABLE, Example, rule

DT_BLOCK = device_type_block()


def _portable_device(ctx) -> str:
    return ctx.device_type_expr()


@rule(
    "ASC101",
    "cuda-method",
    "`.cuda()` moves a tensor or module to the CUDA device",
    hooks=("call",),
    tokens=('cuda',),
    doc="""
    ## What it does
    Rewrites `x.cuda()`, `x.cuda(i)` and `x.cuda(non_blocking=True)` on tensors and modules.

    ## Why
    `.cuda()` fails where there is no CUDA device. torch_npu adds `.npu()` with the same arguments; device-agnostic
    code moves with `.to(device)`.

    ## Example
    `model.cuda()`, `x.cuda(non_blocking=True)`, `storage.cuda(local_rank)`

    ## Use instead
    `--to npu`: `model.npu()`. `--to portable`: `model.to(<current accelerator or "cpu">)`.

    ## Fix safety
    Safe: the receiver of a `.cuda(...)` call is a tensor, a module or a storage in PyTorch code. A method called
    `cuda` on a module object (`torch.cuda`) is not touched.
    """,
    examples=[
        Example("model.cuda()\nx = x.cuda(non_blocking=True)\n", "model.npu()\nx = x.npu(non_blocking=True)\n"),
        Example("y = x.cuda(1)\n", "y = x.npu(1)\n"),
        Example(
            "import torch\nx = x.cuda(non_blocking=True)\n",
            "import torch\n" + DT_BLOCK + "x = x.to(DEVICE_TYPE, non_blocking=True)\n",
            target=PORTABLE,
        ),
        Example("cuda = get_flag()\nprint(cuda)\n", None),
    ],
    emits_npu=("torch.Tensor.npu",),
)
def cuda_method(ctx, call: ast.Call) -> None:
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr != "cuda" or ctx.qname(func) is not None:
        return
    a, b = ctx.span(func)
    if ctx.src.text[b - 4 : b] != "cuda":
        return ctx.change(call, [None], api=".cuda()")
    if ctx.target == NPU:
        ctx.change(call, [type_edit(b - 4, b, "npu")], api=".cuda()", message="`.cuda()` -> `.npu()`")
        return
    dev = _portable_device(ctx)
    edits = [type_edit(b - 4, b, "to")]
    if call.args and not isinstance(call.args[0], ast.Starred):
        idx = call.args[0]
        ia, ib = ctx.span(idx)
        edits.append(type_edit(ia, ib, f"{ctx.ref('torch.device')}({dev}, {ctx.hole_span(ia, ib)})"))
    elif any(kw.arg == "device" for kw in call.keywords):
        kw = next(k for k in call.keywords if k.arg == "device")
        ia, ib = ctx.span(kw.value)
        edits.append(type_edit(ia, ib, f"{ctx.ref('torch.device')}({dev}, {ctx.hole_span(ia, ib)})"))
    else:
        edits.append(ctx.insert_first_arg(call, dev))
    ctx.change(call, edits, api=".cuda()", message="`.cuda()` -> `.to(device)`")


def type_edit(a: int, b: int, text: str) -> Edit:
    return Edit(a, b, text)


@rule(
    "ASC102",
    "is-cuda",
    "`x.is_cuda` asks whether a tensor is on the CUDA device",
    hooks=("attribute",),
    tokens=('is_cuda',),
    doc="""
    ## What it does
    Rewrites the `is_cuda` property of tensors.

    ## Why
    On Ascend a tensor on the device answers `is_npu`; `is_cuda` is always False there, so code paths that
    depend on it silently take the CPU branch.

    ## Example
    `if x.is_cuda: ...`

    ## Use instead
    `--to npu`: `x.is_npu`. `--to portable`: `not x.is_cpu` ("is it on the accelerator?": the branch it
    gates is skipped on the CPU; parenthesised only where an operator needs it, and `not x.is_cuda` reads
    `x.is_cpu`), except as the test of an `assert`, which states where the data must live:
    `assert x.device.type == DEVICE_TYPE` (the program's device), so the assertion holds on the CPU too.
    A file that defines an `is_cuda` of its own (`self.is_cuda = ...`, a method or class attribute) gets no
    rename at all (each read is listed): renaming only the reads would break its attribute.

    ## Fix safety
    Safe.
    """,
    examples=[
        Example("if x.is_cuda:\n    pass\n", "if x.is_npu:\n    pass\n"),
        Example("ok = x.is_cuda and y\n", "ok = not x.is_cpu and y\n", target=PORTABLE),
        Example("if not x.is_cuda:\n    x = x.to(dev)\n", "if x.is_cpu:\n    x = x.to(dev)\n", target=PORTABLE,
                note="`not x.is_cuda` reads `x.is_cpu`, never `not (not x.is_cpu)`"),
        Example("same = x.is_cuda == y.is_cuda\n", "same = (not x.is_cpu) == (not y.is_cpu)\n", target=PORTABLE),
        Example("class Batch:\n    def __init__(self):\n        self.is_cuda = False\n\n"
                "    def check(self, x):\n        return self.is_cuda and x.is_cuda\n", None,
                note="the file's own `is_cuda` attribute: renamed nowhere rather than only where it is read"),
        Example('import torch\nassert x.is_cuda, "on the GPU"\n',
                "import torch\n" + DT_BLOCK + 'assert x.device.type == DEVICE_TYPE, "on the GPU"\n', target=PORTABLE),
    ],
    emits_npu=("torch.Tensor.is_npu",),
)
def is_cuda(ctx, node: ast.Attribute) -> None:
    if node.attr != "is_cuda" or ctx.qname(node) is not None or id(node) in own_name_ids(ctx):
        return  # not a tensor's, or the script's own flag (`args.is_cuda`, see flags.py)
    if _own_is_cuda(ctx):  # renaming only the reads would break the file's own attribute: rename none
        ctx.report(node, api=".is_cuda", severity=MANUAL,
                   reason="this file defines its own `is_cuda` (an attribute or method), so no `.is_cuda` in it "
                          "is renamed",
                   tip="rename the tensor checks by hand (`x.is_npu`, or `not x.is_cpu` for any accelerator)")
        return
    a, b = ctx.span(node)
    if ctx.src.text[b - 7 : b] != "is_cuda":
        return ctx.change(node, [None], api=".is_cuda")
    if ctx.target == NPU:
        ctx.change(node, [type_edit(b - 7, b, "is_npu")], api=".is_cuda")
        return
    va, vb = ctx.span(node.value)
    p = ctx.parent(node)
    if isinstance(p, ast.Assert) and p.test is node:  # states where the data lives: the program's device
        text = f"{ctx.hole_span(va, vb)}.device.type == {ctx.device_type_expr()}"
    elif isinstance(p, ast.UnaryOp) and isinstance(p.op, ast.Not):  # `not x.is_cuda`: `x.is_cpu`
        pa, pb = ctx.span(p)
        ctx.change(node, [type_edit(pa, pb, f"{ctx.hole_span(va, vb)}.is_cpu")], api=".is_cuda")
        return
    elif _bare_not_ok(node, p):  # gates accelerator-only work
        text = f"not {ctx.hole_span(va, vb)}.is_cpu"
    else:
        text = f"(not {ctx.hole_span(va, vb)}.is_cpu)"
    ctx.change(node, [type_edit(a, b, text)], api=".is_cuda")


# Where `not x` needs no parentheses: a whole condition, value, argument or element (the operators that bind
# tighter than `not`, attribute access and calls need them)
_LOOSE_PARENTS = (ast.If, ast.While, ast.IfExp, ast.BoolOp, ast.Return, ast.Assign, ast.AnnAssign, ast.keyword,
                  ast.List, ast.Tuple, ast.Set, ast.FormattedValue, ast.Expr, ast.comprehension, ast.Lambda,
                  ast.NamedExpr, ast.Dict)


def _bare_not_ok(node: ast.AST, p: ast.AST | None) -> bool:
    if isinstance(p, ast.Call):
        return node is not p.func
    return isinstance(p, _LOOSE_PARENTS)


def _own_is_cuda(ctx) -> bool:
    """The file defines an ``is_cuda`` of its own: ``obj.is_cuda = ...``, or a method or class attribute."""
    cached = ctx.__dict__.get("_own_is_cuda")
    if cached is None:
        cached = False
        for n in ctx.index.order:
            if isinstance(n, ast.Attribute):
                own = n.attr == "is_cuda" and not isinstance(n.ctx, ast.Load)
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                own = n.name == "is_cuda" and isinstance(ctx.parent(n), ast.ClassDef)
            elif isinstance(n, ast.Name):
                own = n.id == "is_cuda" and isinstance(n.ctx, ast.Store) and isinstance(
                    ctx.parent(ctx.parent(n)), ast.ClassDef)
            else:
                continue
            if own:
                cached = True
                break
        ctx.__dict__["_own_is_cuda"] = cached
    return cached


_FSTR_HEAD = re.compile(r"^([rRbBuU]?[fF][rR]?)(['\"]{1,3})cuda:")


@rule(
    "ASC103",
    "device-string",
    'a `"cuda"` / `"cuda:N"` string used as a device',
    hooks=("device_value",),
    doc="""
    ## What it does
    Rewrites device strings where they are used as a device: arguments of device-taking APIs (`.to()`,
    `torch.device()`, `device=`, `device_type=`, `map_location=` values), and values that flow there through a
    variable (`device = "cuda"` ... `x.to(device)`), an attribute (`self.device = "cuda"`), an argparse default
    (`add_argument("--device", default="cuda")`), an environment default (`os.environ.get("DEVICE", "cuda")`),
    a parameter default (`def f(device="cuda")`), the return value
    of a function named for devices, and f-strings such as `f"cuda:{local_rank}"`. Integer device ids in
    `device=N` and `.to(N)` (a CUDA device index in CUDA code) become explicit devices.

    ## Why
    `"cuda"` names a device that does not exist on Ascend. Tools that replace every `cuda` in every string also
    break file names and log messages (`torch.load("ckpt_cuda.pt")`); this rule only touches device positions.

    ## Example
    `torch.device("cuda", local_rank)`, `x.to("cuda:0")`, `device = "cuda" if torch.cuda.is_available() else "cpu"`

    ## Use instead
    `--to npu`: `"npu"`, `"npu:0"`, `f"npu:{local_rank}"`. `--to portable`: `DEVICE_TYPE` (`DEVICE_TYPE + ":0"`,
    `DEVICE_TYPE + f":{local_rank}"`), defined once after the file's imports as the current accelerator's type,
    else `"cpu"`: `DEVICE_TYPE = (torch.accelerator.current_accelerator(check_available=True) or
    torch.device("cpu")).type`.

    ## Fix safety
    Safe. Keys of a `map_location` dict are left as they are: they name where the checkpoint was saved.
    """,
    examples=[
        Example('import torch\nx = x.to("cuda:0")\ndev = torch.device("cuda", 1)\n',
                'import torch\nx = x.to("npu:0")\ndev = torch.device("npu", 1)\n'),
        Example(
            'import torch\ndevice = "cuda"\nx = torch.zeros(2, device=device)\n',
            'import torch\nimport torch_npu\ndevice = "npu"\nx = torch.zeros(2, device=device)\n',
        ),
        Example('p.add_argument("--device", default="cuda")\n', 'p.add_argument("--device", default="npu")\n'),
        Example('import os\nimport torch\ndev = os.environ.get("DEVICE", "cuda")\nx = torch.zeros(2, device=dev)\n',
                'import os\nimport torch\nimport torch_npu\ndev = os.environ.get("DEVICE", "npu")\n'
                'x = torch.zeros(2, device=dev)\n'),
        Example('x = y.to(f"cuda:{rank}")\n', 'x = y.to(f"npu:{rank}")\n'),
        Example(
            'import torch\nsd = torch.load("ckpt_cuda.pt", map_location={"cuda:0": "cuda:1"})\n',
            'import torch\nimport torch_npu\nsd = torch.load("ckpt_cuda.pt", map_location={"cuda:0": "npu:1"})\n',
        ),
        Example('print("running on cuda")\nname = "cuda"\nopen("model_cuda.pt")\n', None),
        Example("import torch\nx = torch.zeros(2, device=0)\ny = x.to(1)\n",
                'import torch\nx = torch.zeros(2, device="npu:0")\ny = x.to("npu:1")\n'),
        Example(
            'import torch\nx = x.to("cuda")\n',
            "import torch\n" + DT_BLOCK + "x = x.to(DEVICE_TYPE)\n",
            target=PORTABLE,
        ),
    ],
)
def device_string(ctx, node: ast.AST) -> None:
    if id(node) in ctx.in_fstring or not ctx.claim(node):
        return
    if isinstance(node, ast.Constant) and type(node.value) is int:
        p = ctx.parent(node)
        if not ((isinstance(p, ast.keyword) and p.arg == "device") or (
                isinstance(p, ast.Call) and isinstance(p.func, ast.Attribute) and p.func.attr == "to"
                and p.args and p.args[0] is node)):
            return
        if ctx.target == NPU:
            text = f'"npu:{node.value}"'
        else:
            text = f"{ctx.ref('torch.device')}({ctx.device_type_expr()}, {node.value})"
        ctx.change(node, [ctx.replace(node, text)], api=f"device={node.value}",
                   message="an integer device id means a CUDA device in CUDA code: name the device")
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        if not is_device_string(node.value, "cuda"):
            return
        seg = ctx.seg(node)
        q = seg[-1:]
        if seg[:1] not in "'\"" or seg[1 : len(seg) - 1] != node.value or q != seg[:1]:
            return ctx.change(node, [None], api=repr(node.value))
        text = ctx.device_literal(node.value)
        if ctx.target == NPU:
            text = q + text[1:-1] + q
        elif _needs_parens(ctx, node) and " + " in text:
            text = f"({text})"
        ctx.change(node, [ctx.replace(node, text)], api=repr(node.value), message=f"device {seg} -> {text}")
    elif isinstance(node, ast.JoinedStr):
        seg = ctx.seg(node)
        m = _FSTR_HEAD.match(seg)
        if not m:
            return
        a, _ = ctx.span(node)
        if ctx.target == NPU:
            start = a + m.end() - len("cuda:")
            ctx.change(node, [type_edit(start, start + 4, "npu")], api='f"cuda:..."')
        else:
            b = a + m.end()
            text = f"{ctx.device_type_expr()} + {m.group(1)}{m.group(2)}:"
            edits = [type_edit(a, b, text)]
            if _needs_parens(ctx, node):
                edits = [type_edit(a, b, "(" + text), type_edit(ctx.span(node)[1], ctx.span(node)[1], ")")]
            ctx.change(node, edits, api='f"cuda:..."')
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant):
        left = node.left.value
        if isinstance(left, str) and left.startswith("cuda:"):
            if ctx.target == NPU:
                a, _ = ctx.span(node.left)
                seg = ctx.seg(node.left)
                if seg[1:6] == "cuda:":
                    ctx.change(node, [type_edit(a + 1, a + 5, "npu")], api='"cuda:%d"')
            else:
                ctx.report(node, api='"cuda:%d" % i', severity=MANUAL, reason="device string built with %",
                           tip='use torch.device(<device type>, i)')


def _needs_parens(ctx, node: ast.AST) -> bool:
    p = ctx.parent(node)
    return isinstance(p, (ast.Attribute, ast.Subscript, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Call)) and not (
        isinstance(p, ast.Call) and node is not p.func
    )


@rule(
    "ASC104",
    "device-type-compare",
    '`device.type == "cuda"` decides whether the code runs on the accelerator',
    hooks=("compare", "call"),
    tokens=('cuda',),
    doc="""
    ## What it does
    Rewrites comparisons of a device's type (or a device-named variable) with `"cuda"`: `x.device.type == "cuda"`,
    `device.type != "cuda"`, `args.device == "cuda"`, `"cuda" in str(device)`, `device.startswith("cuda")`,
    `device_type in {"cuda"}` (`--to npu`; `--to portable` lists a membership test).

    ## Why
    On Ascend the device type is `"npu"`: the comparison is always False and the accelerator branch (pinned
    copies, synchronisation, AMP) is silently skipped.

    ## Example
    `if device.type == "cuda": torch.cuda.synchronize()`

    ## Use instead
    `--to npu`: `device.type == "npu"`. `--to portable`: `device.type != "cpu"` (the accelerator branch),
    `"cuda" in device` becomes `"cpu" not in device` and `device.startswith("cuda")` becomes
    `not device.startswith("cpu")`, except for an `if device.type == "cuda":` whose body only
    sets `torch.backends.cuda`/`cudnn` switches: that branch is CUDA-specific on purpose and is kept (and
    listed).

    ## Fix safety
    Safe. The test changes with the value it tests: in `device_type = "cuda" if "cuda" in device else "cpu"`
    the device string becomes the current accelerator's type, so the test must stop asking for "cuda" too (a
    half-rewritten line picks the CPU on every other accelerator: no autocast, no fused optimizer). A test
    that cannot be rewritten (`device.type == "cuda:0"`) is listed, and the conditional expression around it
    is left as it is, listed too.
    """,
    examples=[
        Example('if device.type == "cuda":\n    pass\n', 'if device.type == "npu":\n    pass\n'),
        Example('on_gpu = x.device.type != "cuda"\n', 'on_gpu = x.device.type == "cpu"\n', target=PORTABLE),
        Example("import torch\ndevice = 'cuda'\ndevice_type = 'cuda' if 'cuda' in device else 'cpu'\n",
                "import torch\n" + DT_BLOCK + "device = DEVICE_TYPE\n"
                "device_type = DEVICE_TYPE if 'cpu' not in device else 'cpu'\n", target=PORTABLE,
                note="both sides of the line change: the device type follows the device"),
        Example("device_type = 'cuda' if 'cuda' in device else 'cpu'\n",
                "device_type = 'npu' if 'npu' in device else 'cpu'\n"),
        Example('if "cuda" == dev.type:\n    pass\n', 'if "cpu" != dev.type:\n    pass\n', target=PORTABLE),
        Example("on_gpu = device.startswith('cuda')\n", "on_gpu = not device.startswith('cpu')\n", target=PORTABLE),
        Example("if not str(device).startswith('cuda'):\n    pass\n", "if str(device).startswith('cpu'):\n    pass\n",
                target=PORTABLE),
        Example("on_gpu = device.startswith('cuda')\n", "on_gpu = device.startswith('npu')\n"),
        Example('import torch\ndevice_type = "cuda" if device.type == "cuda:0" else "cpu"\n', None,
                target=PORTABLE, note="a test that cannot be rewritten keeps its line whole (both listed)"),
        Example("assert device_type in {'cuda'}, 'GPU required'\n", "assert device_type in {'npu'}, 'GPU required'\n",
                note="a membership test names the NPU where it names CUDA"),
        Example("if device in ('cuda', 'mps'):\n    pass\n", "if device in ('npu', 'mps'):\n    pass\n"),
        Example("if device in ('cuda', 'mps'):\n    pass\n", None, target=PORTABLE,
                note="listed: which accelerators it means is the author's choice"),
        Example('if mode == "cuda":\n    pass\n', None),
        Example('import torch\nif device.type == "cuda":\n    torch.backends.cudnn.benchmark = True\n', None,
                target=PORTABLE, note="CUDA-only switches stay behind the CUDA test"),
    ],
)
def device_type_compare(ctx, node: ast.Compare | ast.Call) -> None:
    if isinstance(node, ast.Call):
        return _startswith_cuda(ctx, node)
    if len(node.ops) != 1:
        return
    left, right, op = node.left, node.comparators[0], node.ops[0]
    lit, other = (right, left) if _is_cuda_const(right) else (left, right) if _is_cuda_const(left) else (None, None)
    if lit is None and isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Set, ast.Tuple, ast.List)):
        return _cuda_in_collection(ctx, node, left, right)
    if lit is None or not _is_device_expr(ctx, other, op):
        return
    if not ctx.claim(lit):
        return
    seg = ctx.seg(lit)
    if len(seg) < 6 or seg[1:-1] != lit.value:
        return ctx.change(node, [None], api="device comparison")
    if ctx.target == NPU:
        new = seg[0] + "npu" + (lit.value[4:]) + seg[-1]
        ctx.change(node, [ctx.replace(lit, new)], api="device comparison")
        return
    if isinstance(op, ast.Eq) and _guards_cuda_switches_only(ctx, node):
        ctx.report(node, api="device comparison", severity=MANUAL,
                   reason='kept: the branch only sets CUDA backend switches (torch.backends.cuda / cudnn)',
                   tip="other devices have their own defaults; nothing to convert")
        return
    flipped = _flipped_operator(ctx, node, lit) if lit.value == "cuda" else None
    if flipped is not None:
        la, lb = ctx.span(left)
        ra, rb = ctx.span(right)
        cpu = seg[0] + "cpu" + seg[-1]
        if lit is right:  # `device.type == "cuda"` -> `device.type != "cpu"`
            edit = type_edit(lb, rb, flipped + cpu)
        else:  # `"cuda" in device` -> `"cpu" not in device`, `"cuda" == x` -> `"cpu" != x`
            edit = type_edit(la, ra, cpu + flipped)
        ctx.change(node, [edit], api="device comparison")
    else:
        ctx.report(node, api="device comparison", severity=MANUAL, reason="compares a device with \"cuda\"",
                   tip='compare with "cpu" instead: `device.type != "cpu"` means "on the accelerator"')


def _cuda_in_collection(ctx, node: ast.Compare, left: ast.AST, coll: ast.Set | ast.Tuple | ast.List) -> None:
    """``device_type in {"cuda"}``, ``device in ("cuda", "mps")``: ``--to npu`` names the NPU in the collection;
    ``--to portable`` lists it (which of the other accelerators it means is the author's choice)."""
    lits = [e for e in coll.elts if _is_cuda_const(e)]
    if not lits or not _is_device_expr(ctx, left, ast.Eq()) or not all(ctx.claim(e) for e in lits):
        return
    if ctx.target == NPU:
        edits = []
        for e in lits:
            seg = ctx.seg(e)
            if len(seg) < 6 or seg[1:-1] != e.value:
                return ctx.change(node, [None], api="device comparison")
            edits.append(ctx.replace(e, seg[0] + "npu" + e.value[4:] + seg[-1]))
        ctx.change(node, edits, api="device comparison")
        return
    ctx.report(node, api="device comparison", severity=MANUAL,
               reason='tests whether a device is one of a collection that names "cuda"',
               tip='name the accelerators it means, or compare with "cpu": `device.type != "cpu"`')


def _startswith_cuda(ctx, call: ast.Call) -> None:
    """``device.startswith("cuda")``: ``.startswith("npu")``; portable ``not device.startswith("cpu")``."""
    f = call.func
    if not (isinstance(f, ast.Attribute) and f.attr == "startswith" and len(call.args) == 1 and not call.keywords):
        return
    lit = call.args[0]
    if not (isinstance(lit, ast.Constant) and lit.value == "cuda") or not _is_device_expr(ctx, f.value, ast.Eq()):
        return
    if not ctx.claim(lit):
        return
    seg = ctx.seg(lit)
    if seg[1:-1] != "cuda":
        return ctx.change(call, [None], api="device comparison")
    if ctx.target == NPU:
        ctx.change(call, [ctx.replace(lit, seg[0] + "npu" + seg[-1])], api="device comparison")
        return
    cpu = ctx.replace(lit, seg[0] + "cpu" + seg[-1])
    p = ctx.parent(call)
    if isinstance(p, ast.UnaryOp) and isinstance(p.op, ast.Not):  # `not d.startswith("cuda")`: on the CPU
        a, b = ctx.span(p)
        ca, _ = ctx.span(call)
        ctx.change(call, [Edit(a, ca, ""), cpu], api="device comparison")
        return
    a, b = ctx.span(call)
    ctx.change(call, [Edit(a, a, "not " if _bare_not_ok(call, p) else "(not "), cpu]
               + ([] if _bare_not_ok(call, p) else [Edit(b, b, ")")]), api="device comparison")


_NOT_IN = re.compile(r"\bnot\s+in\b")
_IN = re.compile(r"\bin\b")


def _flipped_operator(ctx, node: ast.Compare, lit: ast.Constant) -> str | None:
    """The text between the two operands of ``node`` with the operator negated (``==`` and ``!=``, ``in`` and
    ``not in``), for a comparison with ``"cpu"`` in place of ``"cuda"``; None where it cannot be flipped."""
    op = node.ops[0]
    left, right = node.left, node.comparators[0]
    mid = ctx.src.text[ctx.span(left)[1] : ctx.span(right)[0]]
    if isinstance(op, (ast.In, ast.NotIn)) and lit is not left:
        return None  # `device in "cuda"`: not a device test
    pattern, text = {ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="), ast.In: (_IN, "not in"),
                     ast.NotIn: (_NOT_IN, "in")}.get(type(op), (None, None))
    if pattern is None:
        return None
    if isinstance(pattern, str):
        return mid.replace(pattern, text) if mid.count(pattern) == 1 else None
    new, n = pattern.subn(text, mid)
    return new if n == 1 else None


def keep_device_tests_whole(ctx) -> None:
    """A device test left as it is keeps its branches as they are: in ``"cuda" if <test> else "cpu"`` a
    rewritten ``"cuda"`` beside a test that still asks for ``"cuda"`` (one no rule could convert:
    ``device.type == "cuda:0"``, ``device.endswith("cuda")``) would pick the CPU on every accelerator. The
    changes inside such a conditional expression become manual rows, so the line is left whole, and listed.
    Run by the engine after the rules (any rule's change may sit in a branch)."""
    tests = [node for node in ctx.index.order if type(node) is ast.IfExp]
    if not tests:
        return
    changes = [f for f in ctx.findings if f.kind == CHANGE and f.edits]
    spans = Spans((e.start, e.end) for f in changes for e in f.edits)
    # the changes by where their edits start and end, to find those inside a branch by a binary search
    reach = sorted((min(e.start for e in f.edits), max(e.end for e in f.edits), i) for i, f in enumerate(changes))
    firsts = [a for a, _, _ in reach]
    for node in tests:
        stale = [c for c in ast.walk(node.test) if isinstance(c, ast.Constant) and isinstance(c.value, str)
                 and is_device_string(c.value, "cuda") and not spans.contains(*ctx.span(c))]
        if not stale:
            continue
        branches = [ctx.span(node.body), ctx.span(node.orelse)]
        lo, hi = min(a for a, _ in branches), max(b for _, b in branches)
        for _, last, i in reach[bisect_left(firsts, lo):bisect_right(firsts, hi)]:
            f = changes[i]
            if last <= hi and f.kind == CHANGE and f.edits and all(
                    any(a <= e.start and e.end <= b for a, b in branches) for e in f.edits):
                f.kind, f.severity = REPORT, MANUAL
                f.message = (f"`{f.api}` left as it is: the device test beside it (`{ctx.seg(node.test)}`) still "
                             "asks for CUDA, and a half-rewritten line would choose the CPU on the accelerator: "
                             "convert the line by hand")
                f.tip, f.edits, f.after = f.after, [], ""


def _guards_cuda_switches_only(ctx, compare: ast.Compare) -> bool:
    """``compare`` is the test of an ``if`` (no else) whose body only assigns ``torch.backends.cuda*`` /
    ``torch.backends.cudnn*`` switches: CUDA-specific on purpose, right as it is in portable code."""
    stmt = ctx.parent(compare)
    if not isinstance(stmt, ast.If) or stmt.test is not compare or stmt.orelse:
        return False
    for s in stmt.body:
        targets = s.targets if isinstance(s, ast.Assign) else [s.target] if isinstance(s, ast.AugAssign) else None
        if not targets:
            return False
        for t in targets:
            q = ctx.qname(t) or ""
            if not q.startswith(("torch.backends.cuda.", "torch.backends.cudnn.")):
                return False
    return True


def _is_cuda_const(n: ast.AST) -> bool:
    return isinstance(n, ast.Constant) and isinstance(n.value, str) and is_device_string(n.value, "cuda")


def _is_device_expr(ctx, n: ast.AST, op: ast.cmpop) -> bool:
    if isinstance(op, (ast.In, ast.NotIn)):
        n = n.args[0] if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "str" and n.args \
            else n
    if isinstance(n, ast.Attribute):
        return n.attr == "type" or is_device_name(n.attr)
    if isinstance(n, ast.Name):
        return is_device_name(n.id)
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "str" and n.args:
        return _is_device_expr(ctx, n.args[0], op)
    return ctx.roles.get(n) == "device"


@rule(
    "ASC105",
    "pin-memory-without-accelerator",
    "`x.pin_memory()` fails where no accelerator is available",
    targets=(PORTABLE,),
    hooks=("call",),
    tokens=('pin_memory',),
    doc="""
    ## What it does
    For `--to portable`, guards `x.pin_memory()` on a plain name or attribute:
    `x.pin_memory() if torch.accelerator.is_available() else x` (in parentheses where the position needs them).

    ## Why
    Pinned (page-locked) host memory belongs to an accelerator; torch raises "Cannot access accelerator device
    when none is available" on a machine without one, so the portable code would not run on the CPU.

    ## Example
    `batches.append(imgs.pin_memory())`

    ## Use instead
    `batches.append(imgs.pin_memory() if torch.accelerator.is_available() else imgs)`

    ## Fix safety
    Safe: only receivers without side effects (names, attributes) are rewritten; others are listed. Calls
    that already run only on an accelerator (inside `if torch.accelerator.is_available():`,
    `if device.type != "cpu":` or a variable assigned such a test) are left alone.
    """,
    examples=[
        Example(
            "import torch\nb.append(imgs.pin_memory())\n",
            "import torch\nb.append(imgs.pin_memory() if torch.accelerator.is_available() else imgs)\n",
            target=PORTABLE,
        ),
        Example(
            "import torch\nn = imgs.pin_memory().numel()\n",
            "import torch\nn = (imgs.pin_memory() if torch.accelerator.is_available() else imgs).numel()\n",
            target=PORTABLE,
        ),
        Example("import torch\nb = imgs.pin_memory()\n", None, target=NPU),
        Example('import torch\non_gpu = device.type != "cpu"\nb = imgs.pin_memory() if on_gpu else imgs\n', None,
                target=PORTABLE, note="already runs only on an accelerator"),
    ],
)
def pin_memory(ctx, call: ast.Call) -> None:
    f = call.func
    if not isinstance(f, ast.Attribute) or f.attr != "pin_memory" or call.args or call.keywords:
        return
    if ctx.qname(f) is not None:
        return
    if ctx.accelerator_guarded(call):
        return  # already runs only on an accelerator
    recv = f.value
    if dotted_parts(recv) is None:
        ctx.report(call, api=".pin_memory()", severity=MANUAL, reason="pin_memory() needs an accelerator",
                   tip="call it only when torch.accelerator.is_available()")
        return
    text = ctx.in_expression(call, f"{ctx.hole(call)} if {ctx.ref('torch')}.accelerator.is_available() "
                             f"else {ctx.hole(recv)}")
    ctx.change(call, [ctx.replace(call, text)], api=".pin_memory()")


@rule(
    "ASC106",
    "record-stream-without-accelerator",
    "`x.record_stream(s)` fails on the CPU",
    targets=(PORTABLE,),
    hooks=("call",),
    tokens=('record_stream',),
    doc="""
    ## What it does
    For `--to portable`, runs `x.record_stream(stream)` only where an accelerator is available: a statement
    becomes `if torch.accelerator.is_available(): x.record_stream(stream)`, an expression
    `(x.record_stream(stream) if torch.accelerator.is_available() else None)`.

    ## Why
    `Tensor.record_stream` tells an accelerator's caching allocator that another stream uses the memory. The CPU
    has no such allocator: torch raises "unknown parameter type" (with torch.cpu's stream stand-in) or
    "Could not run 'aten::record_stream' with arguments from the 'CPU' backend", so the portable code would not
    run on the CPU. On the CPU there is nothing to record.

    ## Example
    `x.record_stream(torch.cuda.current_stream())`

    ## Use instead
    `if torch.accelerator.is_available():` / `    x.record_stream(torch.get_device_module().current_stream())`

    ## Fix safety
    Safe: the call has no effect on results. Calls that already run only on an accelerator (see ASC105) are
    left alone.
    """,
    examples=[
        Example(
            "import torch\nfor x in xs:\n    x.record_stream(s)  # allocated on s\n",
            "import torch\nfor x in xs:\n    if torch.accelerator.is_available():\n"
            "        x.record_stream(s)  # allocated on s\n",
            target=PORTABLE,
        ),
        Example(
            "import torch\nok = x.record_stream(s) or True\n",
            "import torch\nok = (x.record_stream(s) if torch.accelerator.is_available() else None) or True\n",
            target=PORTABLE,
        ),
        Example("import torch\nx.record_stream(s)\n", None, target=NPU),
        Example('import torch\nif x.device.type != "cpu":\n    x.record_stream(s)\n', None, target=PORTABLE,
                note="already runs only on an accelerator"),
    ],
)
def record_stream(ctx, call: ast.Call) -> None:
    f = call.func
    if not isinstance(f, ast.Attribute) or f.attr != "record_stream" or ctx.qname(f) is not None:
        return
    p = ctx.parent(call)
    if ctx.accelerator_guarded(call):
        return  # already runs only on an accelerator
    guard = f"{ctx.ref('torch')}.accelerator.is_available()"
    if isinstance(p, ast.Expr) and _alone_on_lines(ctx, p):
        indent = ctx.src.line_text(p.lineno)[: p.col_offset]
        text = f"if {guard}:{ctx.src.newline}{indent}    {ctx.hole(call)}"
    else:
        text = ctx.in_expression(call, f"{ctx.hole(call)} if {guard} else None")
    ctx.change(call, [ctx.replace(call, text)], api=".record_stream()",
               message="record_stream() needs an accelerator: run it only where one is available")


def _alone_on_lines(ctx, stmt: ast.stmt) -> bool:
    """``stmt`` is the only statement on its lines (a comment may follow)."""
    first = ctx.src.line_text(stmt.lineno)
    if first[: stmt.col_offset].strip():
        return False
    tail = ctx.src.line_text(stmt.end_lineno).encode("utf-8")[stmt.end_col_offset :].decode("utf-8", "replace")
    return tail.strip() == "" or tail.strip().startswith("#")
