"""``torch.cuda``: imports, AMP, and every name of the namespace (renamed where torch_npu has it, else reported)."""

from __future__ import annotations

import ast
import re
from functools import cache

from ascendify.core import knowledge

from .. import portable as P
from ..model import MANUAL, UNSUPPORTED, Edit
from .base import NPU, PORTABLE, REGISTRY, REPORT_ONLY, Example, rule

AMP_NAMES = ("autocast", "GradScaler", "custom_fwd", "custom_bwd")

# Tips for torch.cuda names with no torch_npu equivalent.
NO_EQUIVALENT_TIPS = {
    "torch.cuda.nvtx": "use torch_npu.npu.mstx (e.g. the torch_npu.npu.mstx.annotate context manager) for profiler ranges",
    "torch.cuda.nccl": "use torch.distributed collectives with the hccl backend",
    "torch.cuda.get_arch_list": "there are no CUDA architectures on Ascend; use torch.npu.get_device_name()",
    "torch.cuda.get_gencode_flags": "there are no CUDA gencode flags on Ascend; drop the call",
    "torch.cuda.cudart": "the CUDA runtime is not available; use torch.npu APIs or drop the call",
    "torch.cuda.profiler": "use torch_npu.profiler (or torch.profiler with ProfilerActivity.NPU)",
    "torch.cuda.jiterator": "write the kernel with torch ops (or an Ascend C custom op)",
    "torch.cuda.tunable": "TunableOp is CUDA/ROCm only; drop the calls",
    "torch.cuda.comm": "use torch.distributed collectives (hccl)",
    "torch.cuda.memory_usage": "use torch.npu.utilization() or npu-smi",
    "torch.cuda.list_gpu_processes": "use npu-smi info",
    "torch.cuda.is_tf32_supported": "Ascend has HF32 instead: torch.npu.matmul.allow_hf32",
    "torch.cuda.has_half": "fp16 is supported on every Ascend training chip",
    "torch.cuda.caching_allocator_enable": "configure the NPU allocator with PYTORCH_NPU_ALLOC_CONF",
}


def _modules_equivalent(mod: str, target: str) -> str | None:
    """The module that replaces a ``torch.cuda`` module in an import statement, or None."""
    if mod == "torch.cuda.amp":
        return "torch.amp"
    if target == NPU and mod.startswith("torch.cuda"):
        new = "torch.npu" + mod[len("torch.cuda") :]
        return new if knowledge.npu_name_exists(new) else None
    return None


@cache
def npu_equivalent(qualified: str) -> str | None:
    """``torch.cuda.A.b`` -> ``torch.npu.A2.b`` through the longest mapped prefix; None if torch_npu lacks it."""
    parts = qualified.split(".")
    for i in range(len(parts), 2, -1):
        prefix = ".".join(parts[:i])
        if prefix in knowledge.cuda_to_npu_map():
            mapped = knowledge.cuda_to_npu(prefix)
            if mapped is None:
                return None
            new = ".".join([mapped, *parts[i:]])
            return new if knowledge.npu_name_exists(new) else None
    new = "torch.npu" + qualified[len("torch.cuda") :]
    return new if knowledge.npu_name_exists(new) else None


@cache
def no_equivalent_prefix(qualified: str) -> str:
    parts = qualified.split(".")
    for i in range(3, len(parts) + 1):
        prefix = ".".join(parts[:i])
        if prefix in knowledge.cuda_to_npu_map() and knowledge.cuda_to_npu(prefix) is None:
            return prefix
    return qualified


@rule(
    "ASC201",
    "cuda-import",
    "an import from `torch.cuda`",
    hooks=("import",),
    tokens=('cuda',),
    doc="""
    ## What it does
    Rewrites `from torch.cuda.amp import autocast, GradScaler` to `from torch.amp import ...` (both targets; the
    call sites get an explicit device type from ASC202), and for `--to npu` `from torch.cuda import X` to
    `from torch.npu import X` when torch_npu has every imported name (`as` keeps the local name where torch_npu
    spells it differently, e.g. `NPUGraph as CUDAGraph`). `import torch.cuda` becomes `import torch`.

    ## Why
    The names then resolve to the NPU (or device-agnostic) implementation without touching each use.

    ## Example
    `from torch.cuda.amp import autocast`

    ## Use instead
    `from torch.amp import autocast` and `autocast("npu")`.

    ## Fix safety
    Safe. Imports with a name torch_npu does not have are reported, and their uses too.
    """,
    examples=[
        Example("from torch.cuda.amp import autocast, GradScaler\n", "from torch.amp import autocast, GradScaler\n"),
        Example("from torch.cuda import Event, CUDAGraph\n", "from torch.npu import Event, NPUGraph as CUDAGraph\n"),
        Example("import torch.cuda\n", "import torch\n"),
        Example("import torch.cuda.amp as A\nwith A.autocast():\n    pass\n",
                'import torch.amp as A\nwith A.autocast("npu"):\n    pass\n'),
    ],
    emits_npu=("torch.npu.Event", "torch.npu.NPUGraph"),
)
def cuda_import(ctx, node: ast.AST) -> None:
    if isinstance(node, ast.Import):
        for a in node.names:
            if a.name == "torch.cuda.amp" and a.asname and hasattr(a, "lineno"):
                aa, ab = ctx.span(a)
                ok = ctx.src.text[aa : aa + len(a.name)] == a.name
                ctx.change(node, [Edit(aa, aa + len(a.name), "torch.amp") if ok else None], api=a.name)
                ctx.rewritten_locals.add(a.asname)
            elif a.name == "torch.cuda" or a.name.startswith("torch.cuda."):
                if a.asname is None and len(node.names) == 1 and ctx.seg(node).split() == ["import", a.name]:
                    a0, b0 = ctx.span(node)
                    ctx.change(node, [Edit(a0, b0, "import torch")], api=a.name)
                else:
                    ctx.report(node, api=a.name, severity=MANUAL, reason="imports a torch.cuda module",
                               tip="import torch and use the converted names")
        return
    mod = node.module or ""
    if node.level or not (mod == "torch.cuda" or mod.startswith("torch.cuda.") or mod == "torch"):
        return
    if mod == "torch":
        for a in node.names:
            if a.name == "cuda":
                ctx.report(node, api="torch.cuda", severity=MANUAL,
                           reason="`from torch import cuda`: its uses are converted one by one",
                           tip="the import is harmless; remove it once nothing uses it")
        return
    new_mod = _modules_equivalent(mod, ctx.target)
    renames: list[str] = []
    for a in node.names:
        q = f"{mod}.{a.name}"
        if mod == "torch.cuda.amp":
            renames.append(a.name)
            continue
        if mod == "torch.cuda" and a.name == "amp":
            if len(node.names) > 1:
                return ctx.report(node, api=q, severity=MANUAL, reason="imports torch.cuda.amp with other names",
                                  tip="import amp from torch (`from torch import amp`) on its own line")
            renames.append(a.name)
            new_mod = "torch"
            continue
        if ctx.target != NPU:
            return ctx.report(node, api=q, severity=MANUAL, reason="imports a name from torch.cuda",
                              tip="its uses are converted one by one; remove the import once unused")
        eq = npu_equivalent(q)
        if eq is None:
            return ctx.report(node, api=q, severity=UNSUPPORTED, reason=f"torch_npu has no {q}",
                              tip=NO_EQUIVALENT_TIPS.get(no_equivalent_prefix(q), "remove the import"))
        renames.append(eq.rsplit(".", 1)[1])
    if mod == "torch.cuda" and ctx.target != NPU:
        new_mod = "torch"  # only `from torch.cuda import amp` gets here
    if new_mod is None:
        return ctx.report(node, api=mod, reason=f"torch_npu has no module {mod}")
    edits = [_module_edit(ctx, node, new_mod)]
    for a, new_name in zip(node.names, renames, strict=True):
        if new_name != a.name:
            edits.append(_alias_edit(ctx, node, a, new_name))
    for a in node.names:
        ctx.rewritten_locals.add(a.asname or a.name)
    ctx.change(node, edits, api=mod, message=f"`from {mod} import` -> `from {new_mod} import`")


def _module_edit(ctx, node: ast.ImportFrom, new_mod: str) -> Edit | None:
    a, b = ctx.span(node)
    seg = ctx.src.text[a:b]
    m = re.match(r"from\s+", seg)
    if not m:
        return None
    rest = seg[m.end() :]
    parts = node.module.split(".")
    pat = r"\s*\.\s*".join(map(re.escape, parts))
    mm = re.match(pat, rest)
    if not mm:
        return None
    return Edit(a + m.end(), a + m.end() + mm.end(), new_mod)


def _alias_edit(ctx, node: ast.ImportFrom, alias: ast.alias, new_name: str) -> Edit | None:
    if not hasattr(alias, "lineno"):
        return None
    aa, ab = ctx.span(alias)
    if alias.asname:
        seg = ctx.src.text[aa:ab]
        return Edit(aa, aa + len(alias.name), new_name) if seg.startswith(alias.name) else None
    return Edit(aa, ab, f"{new_name} as {alias.name}")


def _amp_name(q: str | None) -> str | None:
    if q and q.startswith("torch.cuda.amp."):
        name = q[len("torch.cuda.amp.") :]
        return name if name in AMP_NAMES else None
    return None


def _device_arg(ctx) -> str:
    return '"npu"' if ctx.target == NPU else ctx.device_type_expr()


@rule(
    "ASC202",
    "cuda-amp",
    "`torch.cuda.amp` autocast / GradScaler / custom_fwd / custom_bwd",
    hooks=("call", "chain"),
    tokens=('amp', 'autocast', 'gradscaler', 'custom_fwd', 'custom_bwd'),
    doc="""
    ## What it does
    Rewrites `torch.cuda.amp.autocast(...)`, `GradScaler(...)`, `custom_fwd`/`custom_bwd` (under any alias or
    from-import) to `torch.amp` with an explicit device type, and `torch.amp.GradScaler()` without a device
    (its default is `"cuda"`).

    ## Why
    `torch.cuda.amp` is deprecated and CUDA-only. `torch.amp` takes the device type as its first argument.
    torch.cuda's autocast takes `enabled` first, so positional arguments become keywords.

    ## Example
    `with torch.cuda.amp.autocast(dtype=torch.float16):`, `scaler = GradScaler()`

    ## Use instead
    `torch.amp.autocast("npu", dtype=torch.float16)`, `GradScaler("npu")`; `--to portable` passes the current
    accelerator's type, and where the CUDA code relied on CUDA's default autocast dtype (float16:
    `torch.cuda.amp.autocast()`, `torch.autocast("cuda")` without `dtype`) it writes `dtype=torch.float16`, as
    the default differs per device (bfloat16 on the CPU).

    ## Fix safety
    Safe.
    """,
    examples=[
        Example(
            "import torch\nwith torch.cuda.amp.autocast(dtype=torch.float16):\n    pass\n",
            'import torch\nimport torch_npu\nwith torch.amp.autocast("npu", dtype=torch.float16):\n    pass\n',
        ),
        Example(
            "from torch.cuda.amp import autocast, GradScaler\nscaler = GradScaler()\nwith autocast(True):\n    pass\n",
            'from torch.amp import autocast, GradScaler\nimport torch_npu\nscaler = GradScaler("npu")\n'
            'with autocast("npu", enabled=True):\n    pass\n',
        ),
        Example(
            "import torch\nwith torch.cuda.amp.autocast():\n    pass\n",
            "import torch\n" + P.device_type_block()
            + "with torch.amp.autocast(DEVICE_TYPE, dtype=torch.float16):\n    pass\n",
            target=PORTABLE,
        ),
        Example(
            'import torch\nwith torch.autocast(device_type="cuda", enabled=amp):\n    pass\n',
            "import torch\n" + P.device_type_block()
            + "with torch.autocast(device_type=DEVICE_TYPE, enabled=amp, dtype=torch.float16):\n    pass\n",
            target=PORTABLE,
        ),
        Example(
            "import torch\nscaler = torch.amp.GradScaler()\n",
            "import torch\n" + P.device_type_block() + "scaler = torch.amp.GradScaler(DEVICE_TYPE)\n",
            target=PORTABLE,
        ),
        Example(
            "from torch.cuda.amp import custom_fwd\n@custom_fwd\ndef f(x):\n    return x\n",
            'from torch.amp import custom_fwd\nimport torch_npu\n@custom_fwd(device_type="npu")\n'
            "def f(x):\n    return x\n",
        ),
    ],
)
def cuda_amp(ctx, node: ast.AST) -> None:
    if isinstance(node, ast.Call):
        q = ctx.qname(node.func)
        name = _amp_name(q)
        if name is None:
            if q in ("torch.amp.GradScaler", "torch.amp.grad_scaler.GradScaler") and not node.args and not any(
                k.arg == "device" for k in node.keywords
            ):
                ctx.claim(node.func)
                ctx.change(node, [ctx.insert_first_arg(node, _device_arg(ctx))], api=q,
                           message="GradScaler's default device is \"cuda\": pass the device")
            elif q in AUTOCAST_NAMES and ctx.target == PORTABLE:
                _cuda_autocast_dtype(ctx, node, q)
            return
        ctx.claim(node.func)
        edits = _rename_amp(ctx, node.func, name)
        dev = _device_arg(ctx)
        if name in ("custom_fwd", "custom_bwd"):
            edits.append(ctx.insert_first_arg(node, f"device_type={dev}"))
        elif name == "autocast" and ctx.target == PORTABLE and _no_dtype(node, 1):
            edits.append(ctx.insert_first_arg(node, f"{dev}, dtype={ctx.ref('torch')}.float16"))
        else:
            edits.append(ctx.insert_first_arg(node, dev))
            if name == "autocast":
                for arg, kw in zip(node.args, ("enabled", "dtype", "cache_enabled"), strict=False):
                    a, _ = ctx.span(arg)
                    edits.append(Edit(a, a, f"{kw}="))
        ctx.change(node, edits, api=q, message=f"{q} -> torch.amp.{name}({dev}, ...)")
    else:
        q = ctx.qname(node)
        name = _amp_name(q)
        if name is None or ctx.is_claimed(node):
            return
        ctx.claim(node)
        parent = ctx.parent(node)
        if name in ("custom_fwd", "custom_bwd") and _is_decorator(parent, node):
            edits = _rename_amp(ctx, node, name)
            _, b = ctx.span(node)
            edits.append(Edit(b, b, f"(device_type={_device_arg(ctx)})"))
            ctx.change(node, edits, api=q)
        elif _is_plain_amp_ref(ctx, node):
            return  # the import is rewritten; a bare reference keeps working
        else:
            ctx.report(node, api=q, severity=MANUAL, reason=f"{q} used without a call",
                       tip=f"use torch.amp.{name} with an explicit device type")


AUTOCAST_NAMES = ("torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast")


def _no_dtype(call: ast.Call, position: int) -> bool:
    """``call`` passes no dtype (as keyword, at ``position``, or through ``*args``/``**kwargs``)."""
    return (len(call.args) <= position and not any(isinstance(a, ast.Starred) for a in call.args)
            and not any(k.arg in ("dtype", None) for k in call.keywords))


def _cuda_autocast_dtype(ctx, call: ast.Call, q: str) -> None:
    """``torch.autocast("cuda")`` without a dtype means float16; portable code says so (the CPU's default is bf16)."""
    dev = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "device_type"), None)
    if not (isinstance(dev, ast.Constant) and dev.value == "cuda") or not _no_dtype(call, 1):
        return
    a, b = ctx.span(call)
    close = b - 1
    if ctx.src.text[close] != ")":
        return ctx.change(call, [None], api=q)
    head = ctx.src.text[a:close].rstrip()
    sep = " " if head.endswith(",") else ", "
    ctx.change(call, [Edit(close, close, f"{sep}dtype={ctx.ref('torch')}.float16")], api=q,
               message='autocast on "cuda" defaults to float16: keep the dtype on every device')


def _is_decorator(parent, node) -> bool:
    return isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) and node in parent.decorator_list


def _is_plain_amp_ref(ctx, node) -> bool:
    root = node
    while isinstance(root, ast.Attribute):
        root = root.value
    return isinstance(root, ast.Name) and root.id in ctx.rewritten_locals and ctx.qname(node).endswith("GradScaler")


def _rename_amp(ctx, func: ast.AST, name: str) -> list:
    root = func
    while isinstance(root, ast.Attribute):
        root = root.value
    if isinstance(root, ast.Name) and root.id in ctx.rewritten_locals:
        return []
    return [ctx.chain_edit(func, f"torch.amp.{name}")]


@rule(
    "ASC203",
    "cuda-api",
    "a `torch.cuda` API with an NPU / device-agnostic equivalent",
    hooks=("chain",),
    tokens=('cuda',),
    doc="""
    ## What it does
    Rewrites every name of `torch.cuda` that has an equivalent (through `import torch as th`, `from torch import
    cuda`...): streams, events, memory statistics, RNG, `CUDAGraph`, device selection, legacy tensor types.

    ## Why
    `torch.cuda.*` talks to the CUDA runtime; on Ascend the same services live in `torch.npu` (torch_npu), and
    in device-agnostic code in `torch.accelerator`, `torch.Stream`/`torch.Event`.

    ## Example
    `torch.cuda.synchronize()`, `torch.cuda.max_memory_allocated(device)`, `torch.cuda.CUDAGraph()`

    ## Use instead
    `--to npu`: `torch.npu.synchronize()`, `torch.npu.NPUGraph()` (only names that exist in torch_npu).
    `--to portable`: `torch.accelerator.synchronize()` guarded by `torch.accelerator.is_available()` where the
    call needs an accelerator, so the code also runs on the CPU (not where it already sits in an accelerator
    branch: `if device.type == "cuda":` becomes `if device.type != "cpu":`, which is guard enough).

    ## Fix safety
    Safe. Names without an equivalent are reported by ASC204, never invented.
    """,
    examples=[
        Example("import torch as th\nth.cuda.synchronize()\n", "import torch as th\nimport torch_npu\nth.npu.synchronize()\n"),
        Example("import torch\ng = torch.cuda.CUDAGraph()\n", "import torch\nimport torch_npu\ng = torch.npu.NPUGraph()\n"),
        Example(
            "import torch\nn = torch.cuda.device_count()\n",
            "import torch\nn = torch.accelerator.device_count()\n",
            target=PORTABLE,
        ),
        Example(
            "import torch\ntorch.cuda.synchronize()\n",
            "import torch\nif torch.accelerator.is_available():\n    torch.accelerator.synchronize()\n",
            target=PORTABLE,
        ),
        Example(
            'import torch\nif device.type == "cuda":\n    torch.cuda.synchronize()\n',
            'import torch\nif device.type != "cpu":\n    torch.accelerator.synchronize()\n',
            target=PORTABLE, note="already in an accelerator branch: no second guard",
        ),
        Example("cuda = Namespace()\ncuda.synchronize()\n", None),
    ],
)
def cuda_api(ctx, node: ast.AST) -> None:
    q = ctx.qname(node)
    if not q or not (q == "torch.cuda" or q.startswith("torch.cuda.")) or ctx.is_claimed(node):
        return
    if q.startswith("torch.cuda.amp"):
        return  # ASC202
    root = node
    while isinstance(root, ast.Attribute):
        root = root.value
    if isinstance(root, ast.Name) and root.id in ctx.rewritten_locals:
        ctx.claim(node)
        return
    if q == "torch.cuda":
        return
    if ctx.target == NPU:
        new = npu_equivalent(q)
        if new is None:
            return  # ASC204 reports it
        ctx.claim(node)
        ctx.change(node, [ctx.chain_edit(node, new)], api=q, message=f"{q} -> {new}")
        return
    _portable(ctx, node, q)


def _portable(ctx, node: ast.AST, q: str) -> None:
    name = q[len("torch.cuda.") :]
    entry = P.CUDA_TO_PORTABLE.get(name)
    call = ctx.parent(node)
    is_call = isinstance(call, ast.Call) and call.func is node
    if entry is None:
        if name not in P.DEVICE_MODULE_DEFAULTS or not is_call:
            return  # ASC204 reports it
        entry = ("get_device_module()." + name, P.DEVICE_MODULE_DEFAULTS[name])
    new, guard = entry
    ctx.claim(node)
    torch = ctx.ref("torch")
    if name in P.STREAM_EVENT_FALLBACK and is_call:
        return _stream_or_event(ctx, node, call, q, name, torch)
    if guard is P.NOGUARD or not is_call or ctx.accelerator_guarded(call):  # (inside an accelerator branch
        ctx.change(node, [ctx.chain_edit(node, "torch." + new)], api=q, message=f"{q} -> torch.{new}")  # already)
        return
    ca, cb = ctx.span(call)
    fa, fb = ctx.span(node)
    if ctx.chain_edit(node, "torch." + new) is None:
        return ctx.change(node, [None], api=q)
    new_call = ctx.ref("torch." + new) + ctx.hole_span(fb, cb)
    cond = P.accel_available(torch)
    stmt = ctx.parent(call)
    if isinstance(stmt, ast.Expr) and _alone_on_lines(ctx, stmt):
        indent = ctx.src.line_text(stmt.lineno)[: stmt.col_offset]
        nl = ctx.src.newline
        text = f"if {cond}:{nl}{indent}    {new_call}"
        ctx.change(call, [Edit(ca, cb, text)], api=q, message=f"{q} -> torch.{new}, run when an accelerator is present")
    else:
        text = f"({new_call} if {cond} else {guard})"
        ctx.change(call, [Edit(ca, cb, text)], api=q, message=f"{q} -> torch.{new} (guarded)")


def _stream_or_event(ctx, node: ast.AST, call: ast.Call, q: str, name: str, torch: str) -> None:
    """``torch.cuda.Stream(...)``/``Event(...)``: torch.Stream/torch.Event on an accelerator, a CPU stand-in else."""
    if ctx.chain_edit(node, "torch." + name) is None:
        return ctx.change(node, [None], api=q)
    fallback = f"{torch}.{P.STREAM_EVENT_FALLBACK[name]}"
    if name == "Event" and not _timing_off(call):
        helper = ctx.helper(P.HOST_EVENT)
        if helper is None:
            return ctx.report(call, api=q, severity=MANUAL,
                              reason=f"a timing event has no CPU implementation and `{P.HOST_EVENT}` is taken here",
                              tip="on the CPU, time with time.perf_counter() instead of events")
        fallback = f"{helper}()"
    fa, fb = ctx.span(node)
    ca, cb = ctx.span(call)
    text = f"{ctx.ref('torch.' + name)}{ctx.hole_span(fb, cb)} if {P.accel_available(torch)} else {fallback}"
    ctx.change(call, [Edit(ca, cb, ctx.in_expression(call, text))], api=q,
               message=f"{q} -> torch.{name} on an accelerator, {fallback} on the CPU")


def _timing_off(call: ast.Call) -> bool:
    """The event is created without timing (no ``enable_timing``, or a constant False)."""
    values = [kw.value for kw in call.keywords if kw.arg == "enable_timing"] + call.args[:1]  # Event(enable_timing,..)
    if any(kw.arg is None for kw in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
        return False
    return all(isinstance(v, ast.Constant) and not v.value for v in values)


def _alone_on_lines(ctx, stmt: ast.stmt) -> bool:
    first = ctx.src.line_text(stmt.lineno)
    last = ctx.src.line_text(stmt.end_lineno)
    if first[: stmt.col_offset].strip() or not first.isascii() and first[: stmt.col_offset].strip():
        return False
    tail = last.encode("utf-8")[stmt.end_col_offset :].decode("utf-8", "replace").strip()
    return tail == "" or tail.startswith("#")


@rule(
    "ASC204",
    "cuda-api-without-equivalent",
    "a `torch.cuda` API with no equivalent on the target",
    safety=REPORT_ONLY,
    hooks=("chain",),
    tokens=('cuda',),
    doc="""
    ## What it does
    Lists uses of `torch.cuda` names that torch_npu does not have (`nvtx`, `nccl`, `get_arch_list`, `cudart`,
    `jiterator`, `tunable`, ...) or that have no device-agnostic spelling, with a tip.

    ## Why
    Renaming them (as some tools do: `torch.npu.nvtx`) produces code that fails at run time. A person has to
    choose the replacement.

    ## Example
    `torch.cuda.nvtx.range_push("fwd")`

    ## Use instead
    `torch_npu.npu.mstx` ranges (see the tip of each row).

    ## Fix safety
    Report only.
    """,
    examples=[Example('import torch\ntorch.cuda.nvtx.range_push("fwd")\n', None)],
)
def cuda_api_without_equivalent(ctx, node: ast.AST) -> None:
    q = ctx.qname(node)
    if not q or not q.startswith("torch.cuda.") or ctx.is_claimed(node) or q.startswith("torch.cuda.amp"):
        return
    if q.startswith("torch.cuda.nvtx.range_p") and ctx.options.enabled(REGISTRY["ASC503"]):
        from .profiling import paired_nvtx_calls

        if id(node) in paired_nvtx_calls(ctx):
            return  # ASC503 turns the pair into a `with` block (or lists it)
    ctx.claim(node)
    prefix = no_equivalent_prefix(q)
    if ctx.target == NPU:
        tip = NO_EQUIVALENT_TIPS.get(prefix, "look for an equivalent in torch.npu / torch_npu, or drop the call")
        ctx.report(node, api=q, severity=UNSUPPORTED, reason=f"torch_npu has no equivalent of {prefix}", tip=tip)
    else:
        eq = npu_equivalent(q)
        tip = (f"call it through the device module: torch.get_device_module(device).{q[len('torch.cuda.'):]}"
               if eq else NO_EQUIVALENT_TIPS.get(prefix, "no device-agnostic equivalent"))
        ctx.report(node, api=q, severity=UNSUPPORTED if not eq else MANUAL,
                   reason=f"{q} has no torch.accelerator equivalent", tip=tip)


@rule(
    "ASC205",
    "torch-version-cuda",
    "`torch.version.cuda` / `torch.backends.cuda.is_built()` inspect the CUDA build",
    safety=REPORT_ONLY,
    hooks=("chain",),
    tokens=('cuda',),
    doc="""
    ## What it does
    Lists checks of the CUDA build (`torch.version.cuda`, `torch.backends.cuda.is_built()`).

    ## Why
    They are None/False on an Ascend build: the code usually takes its CPU path.

    ## Example
    `if torch.version.cuda: ...`

    ## Use instead
    `torch.accelerator.is_available()`; the CANN version is `torch_npu.utils.get_cann_version()`.

    ## Fix safety
    Report only.
    """,
    examples=[Example("import torch\nprint(torch.version.cuda)\n", None)],
)
def torch_version_cuda(ctx, node: ast.AST) -> None:
    q = ctx.qname(node)
    if q in ("torch.version.cuda", "torch.backends.cuda.is_built", "torch.backends.cudnn.version",
             "torch.backends.cudnn.is_available") and ctx.claim(node):
        ctx.report(node, api=q, severity=MANUAL, reason=f"{q} describes the CUDA build (None/False on Ascend)",
                   tip="use torch.accelerator.is_available() to ask for an accelerator")


@rule(
    "ASC206",
    "cuda-tensor-type",
    "legacy typed constructors `torch.cuda.FloatTensor(...)` and friends",
    hooks=("call",),
    tokens=('cuda',),
    doc="""
    ## What it does
    Rewrites calls of `torch.cuda.<T>Tensor(data)` to `torch.tensor(data, dtype=..., device=...)` and
    `torch.cuda.<T>Tensor(n, m)` to `torch.empty(n, m, dtype=..., device=...)`, with device `"npu"` (`--to npu`)
    or the current accelerator (`--to portable`). Other uses of the names are renamed by ASC203 (npu).

    ## Why
    The legacy constructors are deprecated, built in C++ (invisible to static checks) and CUDA-flavoured; the
    factories with `dtype=`/`device=` work everywhere and keep the dtype explicit (ASC904 still lists float64).

    ## Example
    `total = torch.cuda.DoubleTensor([0.0])`

    ## Use instead
    `total = torch.tensor([0.0], dtype=torch.float64, device=<device>)`

    ## Fix safety
    Safe. Other argument shapes are listed for a person.
    """,
    examples=[
        Example(
            "import torch\nt = torch.cuda.FloatTensor([0.0])\n",
            "import torch\n" + P.device_type_block()
            + "t = torch.tensor([0.0], dtype=torch.float32, device=DEVICE_TYPE)\n",
            target=PORTABLE,
        ),
        Example(
            "import torch\nt = torch.cuda.LongTensor(4, 2)\n",
            'import torch\nt = torch.empty(4, 2, dtype=torch.int64, device="npu")\n',
        ),
    ],
)
def cuda_tensor_type(ctx, call: ast.Call) -> None:
    q = ctx.qname(call.func)
    if not q or not q.startswith("torch.cuda.") or q.count(".") != 2:
        return
    dtype = P.LEGACY_TENSOR_DTYPES.get(q.rsplit(".", 1)[1])
    if dtype is None or call.keywords:
        return
    ctx.claim(call.func)
    torch = ctx.ref("torch")
    args = call.args
    if len(args) == 1 and isinstance(args[0], (ast.List, ast.Tuple, ast.ListComp)):
        factory = "tensor"
    elif args and all(isinstance(a, (ast.Constant, ast.Name)) for a in args):
        factory = "empty"
    else:
        ctx.report(call, api=q, severity=MANUAL, reason=f"{q} exists only for CUDA",
                   tip=f"use {torch}.tensor(data, dtype={torch}.{dtype}, device=device)")
        return
    inner = ctx.hole_span(ctx.span(args[0])[0], ctx.span(args[-1])[1]) if args else ""
    device = '"npu"' if ctx.target == NPU else ctx.device_type_expr()
    text = f"{torch}.{factory}({inner}, dtype={torch}.{dtype}, device={device})"
    ctx.change(call, [ctx.replace(call, text)], api=q, message=f"{q} -> {torch}.{factory}(..., dtype=, device=)")
