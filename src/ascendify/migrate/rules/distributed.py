"""Distributed rules: NCCL backends, DataParallel, visible-device variables."""

from __future__ import annotations

import ast

from ..dataflow import is_backend_name
from ..model import MANUAL, UNSUPPORTED, Edit
from ..portable import device_type_block
from .base import NPU, PORTABLE, REPORT_ONLY, UNSAFE, Example, rule

_NCCL = {"nccl": "hccl", "NCCL": "HCCL"}
# calls that answer a backend name: `dist.get_backend() == "nccl"`, `dist.get_default_backend_for_device(acc) ==
# "nccl"` (device-generic code asking which backend the accelerator uses)
_BACKEND_CALLS = frozenset(f"torch.distributed.{mod}{fn}" for mod in ("", "distributed_c10d.")
                           for fn in ("get_backend", "get_default_backend_for_device"))


def _portable_backend(ctx) -> str:
    dev = ctx.device_type_expr()
    return f"{ctx.ref('torch.distributed.get_default_backend_for_device')}({dev})"


def _backend_text(ctx, node: ast.Constant) -> str | None:
    seg = ctx.seg(node)
    if len(seg) < 3 or seg[0] not in "'\"" or seg[1:-1] != node.value:
        return None
    if ctx.target == NPU:
        return seg[0] + _NCCL[node.value] + seg[-1]
    return _portable_backend(ctx)


@rule(
    "ASC301",
    "nccl-backend",
    'the `"nccl"` distributed backend',
    hooks=("backend_value", "compare"),
    tokens=('nccl',),
    doc="""
    ## What it does
    Rewrites `"nccl"` where it is used as a backend: `init_process_group("nccl")`, `backend="nccl"`, variables,
    argparse defaults and parameter defaults that flow there, and comparisons such as
    `dist.get_backend() == "nccl"` and, in device-generic code, `dist.get_default_backend_for_device(acc) ==
    "nccl"` (which asks whether the accelerator is a GPU).

    ## Why
    NCCL does not exist on Ascend; its counterpart is HCCL (`hccl`).

    ## Example
    `dist.init_process_group(backend="nccl")`

    ## Use instead
    `--to npu`: `backend="hccl"`. `--to portable`: `dist.get_default_backend_for_device(<device type>)`, which is
    `hccl` on NPU, `nccl` on CUDA and `gloo` on the CPU.

    ## Fix safety
    Safe.
    """,
    examples=[
        Example(
            'import torch.distributed as dist\ndist.init_process_group(backend="nccl")\n',
            'import torch.distributed as dist\nimport torch_npu\ndist.init_process_group(backend="hccl")\n',
        ),
        Example(
            'import torch.distributed as dist\nif dist.get_backend() == "nccl":\n    pass\n',
            'import torch.distributed as dist\nimport torch_npu\nif dist.get_backend() == "hccl":\n    pass\n',
        ),
        Example(
            'import torch\nimport torch.distributed as dist\ndist.init_process_group("nccl")\n',
            "import torch\nimport torch.distributed as dist\n" + device_type_block()
            + "dist.init_process_group(dist.get_default_backend_for_device(DEVICE_TYPE))\n",
            target=PORTABLE,
        ),
        Example(
            "import torch\nimport torch.distributed as dist\nacc = torch.accelerator.current_accelerator()\n"
            'if dist.get_default_backend_for_device(acc) == "nccl":\n    pass\n',
            "import torch\nimport torch_npu\nimport torch.distributed as dist\n"
            "acc = torch.accelerator.current_accelerator()\n"
            'if dist.get_default_backend_for_device(acc) == "hccl":\n    pass\n',
            note="device-generic code asking whether the accelerator's backend is NCCL",
        ),
        Example('log("nccl timeout")\n', None),
    ],
)
def nccl_backend(ctx, node: ast.AST) -> None:
    if isinstance(node, ast.Compare):
        if len(node.ops) != 1:
            return
        for lit, other in ((node.comparators[0], node.left), (node.left, node.comparators[0])):
            if _is_nccl(lit) and _is_backend_expr(ctx, other):
                if not ctx.claim(lit):
                    return
                text = _backend_text(ctx, lit)
                ctx.change(node, [ctx.replace(lit, text) if text else None], api="backend comparison")
                return
        return
    if id(node) in ctx.in_fstring or not _is_nccl(node) or not ctx.claim(node):
        return
    text = _backend_text(ctx, node)
    ctx.change(node, [ctx.replace(node, text) if text else None], api=repr(node.value),
               message=f"backend {node.value!r} -> {text}")


def _is_nccl(n: ast.AST) -> bool:
    return isinstance(n, ast.Constant) and n.value in _NCCL


def _is_backend_expr(ctx, n: ast.AST) -> bool:
    if isinstance(n, ast.Call):
        q = ctx.qname(n.func)
        return q in _BACKEND_CALLS
    if isinstance(n, ast.Name):
        return is_backend_name(n.id) or ctx.roles.get(n) == "backend"
    if isinstance(n, ast.Attribute):
        return is_backend_name(n.attr)
    return False


@rule(
    "ASC302",
    "nccl-api",
    "`is_nccl_available()` and `Backend.NCCL`",
    hooks=("chain",),
    tokens=('nccl',),
    doc="""
    ## What it does
    Rewrites `torch.distributed.is_nccl_available()` and `torch.distributed.Backend.NCCL`.

    ## Why
    Both are False/meaningless on Ascend, where the collective library is HCCL.

    ## Example
    `if dist.is_nccl_available(): ...`

    ## Use instead
    `--to npu`: `dist.is_hccl_available()`, `dist.Backend.HCCL`. `--to portable`: reported (ask
    `dist.get_default_backend_for_device(device)`).

    ## Fix safety
    Safe.
    """,
    examples=[
        Example(
            "import torch.distributed as dist\nok = dist.is_nccl_available()\n",
            "import torch.distributed as dist\nimport torch_npu\nok = dist.is_hccl_available()\n",
        )
    ],
    emits_npu=("torch.distributed.is_hccl_available", "torch.distributed.Backend.HCCL"),
)
def nccl_api(ctx, node: ast.AST) -> None:
    q = ctx.qname(node)
    mapping = {
        "torch.distributed.is_nccl_available": "torch.distributed.is_hccl_available",
        "torch.distributed.Backend.NCCL": "torch.distributed.Backend.HCCL",
    }
    if q not in mapping or not ctx.claim(node):
        return
    if ctx.target == NPU:
        ctx.change(node, [ctx.chain_edit(node, mapping[q])], api=q)
    else:
        ctx.report(node, api=q, severity=MANUAL, reason=f"{q} is specific to NCCL",
                   tip="use dist.get_default_backend_for_device(device) / dist.is_backend_available(name)")


@rule(
    "ASC303",
    "data-parallel",
    "`nn.DataParallel` is unsupported on Ascend",
    safety=UNSAFE,
    hooks=("call",),
    tokens=('dataparallel', 'data_parallel'),
    doc="""
    ## What it does
    Reports `torch.nn.DataParallel(model, ...)`; with `--unsafe` rewrites it to
    `(torch.nn.parallel.DistributedDataParallel(model) if torch.distributed.is_initialized() else model)`
    (device arguments dropped): DDP where a process group exists (a `torchrun` launch that initialised one),
    else the model itself on its one device, so the output runs either way.

    ## Why
    torch_npu does not implement single-process multi-device DataParallel. DistributedDataParallel (one process
    per device, launched by `torchrun`) is the supported replacement, and faster on CUDA too.

    ## Example
    `model = nn.DataParallel(model, device_ids=[0, 1])`

    ## Use instead
    `model = DistributedDataParallel(model, device_ids=[local_rank])` after `init_process_group()`.

    ## Fix safety
    Unsafe: DDP needs an initialised process group and a `torchrun` launch; the rest of the script must be
    adapted (samplers, rank-0 logging).
    """,
    examples=[
        Example("import torch.nn as nn\nm = nn.DataParallel(m)\n", None),
        Example(
            "import torch.nn as nn\nm = nn.DataParallel(m, device_ids=[0, 1])\n",
            "import torch.nn as nn\nimport torch\nimport torch_npu\nm = (nn.parallel.DistributedDataParallel(m)\n"
            "     if torch.distributed.is_initialized() else m)\n",
            unsafe=True,
        ),
    ],
)
def data_parallel(ctx, call: ast.Call) -> None:
    q = ctx.qname(call.func)
    if q not in ("torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel"):
        return
    ctx.claim(call.func)
    if q == "torch.nn.parallel.data_parallel" or not call.args:
        ctx.report(call, api=q, severity=UNSUPPORTED, reason="DataParallel is not supported by torch_npu",
                   tip="use DistributedDataParallel with one process per device (torchrun)")
        return
    a, b = ctx.span(call)
    ma, mb = ctx.span(call.args[0])
    arg = ctx.hole_span(ma, mb)
    ddp = ctx.ref("torch.nn.parallel.DistributedDataParallel")
    new = f"({ddp}({arg}) if {ctx.ref('torch.distributed.is_initialized')}() else {arg})"
    ctx.change(call, [Edit(a, b, new)], api=q, message="DataParallel is not supported on Ascend: use DDP")


@rule(
    "ASC304",
    "cuda-visible-devices",
    "the `CUDA_VISIBLE_DEVICES` environment variable",
    hooks=("string",),
    tokens=('cuda_visible_devices',),
    doc="""
    ## What it does
    Rewrites the string `"CUDA_VISIBLE_DEVICES"` (the variable's name, e.g. in `os.environ[...]`) for `--to npu`;
    reports it for `--to portable`.

    ## Why
    Ascend ignores `CUDA_VISIBLE_DEVICES`; device selection uses `ASCEND_RT_VISIBLE_DEVICES` (ids ascending).

    ## Example
    `os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"`

    ## Use instead
    `os.environ["ASCEND_RT_VISIBLE_DEVICES"] = "0,1"`

    ## Fix safety
    Safe: only a string that is exactly the variable's name changes; messages that mention it do not.
    """,
    examples=[
        Example(
            'import os\nos.environ["CUDA_VISIBLE_DEVICES"] = "0"\n',
            'import os\nimport torch_npu\nos.environ["ASCEND_RT_VISIBLE_DEVICES"] = "0"\n',
        ),
        Example('print("set CUDA_VISIBLE_DEVICES first")\n', None),
    ],
)
def cuda_visible_devices(ctx, node: ast.Constant) -> None:
    if node.value != "CUDA_VISIBLE_DEVICES" or id(node) in ctx.in_fstring or not ctx.claim(node):
        return
    if ctx.target == PORTABLE:
        ctx.report(node, api="CUDA_VISIBLE_DEVICES", severity=MANUAL, reason="selects CUDA devices only",
                   tip="on Ascend set ASCEND_RT_VISIBLE_DEVICES as well")
        return
    seg = ctx.seg(node)
    if seg[1:-1] != node.value:
        return ctx.change(node, [None], api="CUDA_VISIBLE_DEVICES")
    ctx.change(node, [ctx.replace(node, seg[0] + "ASCEND_RT_VISIBLE_DEVICES" + seg[-1])], api="CUDA_VISIBLE_DEVICES")


# -- HCCL's rules (data/hccl_rules.json) that a call shows statically ----------------------------------------------

_REDUCING = {
    "torch.distributed.all_reduce": "allreduce", "torch.distributed.reduce": "reduce",
    "torch.distributed.reduce_scatter": "reduce_scatter",
    "torch.distributed.reduce_scatter_tensor": "_reduce_scatter_base",
    "torch.distributed.all_reduce_coalesced": "allreduce_coalesced",
}
_F64 = {"torch.float64": "at::kDouble", "torch.double": "at::kDouble", "torch.complex128": "at::kDouble"}


def _hccl_rule(rule_id: str) -> dict:
    from ascendify.core import knowledge

    return next(r for r in knowledge.load("hccl_rules")["rules"] if r["id"] == rule_id)


def _kwarg(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _visible_float64(ctx, node: ast.AST | None) -> bool:
    """``torch.zeros(..., dtype=torch.float64)``, ``x.double()``, ``x.to(torch.float64)`` written in the call."""
    if not isinstance(node, ast.Call):
        return False
    dt = _kwarg(node, "dtype")
    if dt is not None and ctx.qname(dt) in _F64:
        return True
    if isinstance(node.func, ast.Attribute):
        if node.func.attr == "double" and not node.args:
            return True
        if node.func.attr == "to" and any(ctx.qname(a) in _F64 for a in node.args):
            return True
    return False


@rule(
    "ASC305",
    "hccl-rules",
    "a collective that HCCL refuses (ReduceOp, dtype, recv without a source)",
    safety=REPORT_ONLY,
    hooks=("call",),
    category="api",
    doc="""
    ## What it does
    Reports `torch.distributed` calls that break one of HCCL's rules (`ascendify/data/hccl_rules.json`) where the
    call itself shows it: `op=ReduceOp.BAND/BOR/BXOR` (refused by torch_npu), `op=ReduceOp.PRODUCT` (HCCL's
    prod does not take int16 or bf16 on Atlas A2/A3), a float64 tensor written in a reducing collective
    (`dist.all_reduce(x.double())`: HCCL reduces int8/16/32/64, fp16, fp32, bf16), `dist.recv(t)` without
    `src`, and `dist.gather` (run as an all_gather by torch_npu: every rank receives every tensor).

    ## Why
    On the NPU these fail at run time ("Cannot use ReduceOp.BAND with HCCL", "HCCL allreduce: Unsupported
    data type at::kDouble", "ProcessGroupHCCL does not support recv"), often deep into a job.

    ## Example
    `dist.all_reduce(flags, op=dist.ReduceOp.BOR)`

    ## Use instead
    BAND/BOR: `MIN`/`MAX` on 0/1 integer tensors; PRODUCT on bf16/int16: reduce in float32 (or sum of logs);
    float64: reduce in float32; `recv(t, src=...)`; `gather`: `all_gather` (what runs anyway) or
    `gather_object` for small data. `ascendify emulate --fidelity error` runs the same checks on every call.

    ## Fix safety
    Report only.
    """,
    examples=[
        Example("import torch.distributed as dist\ndist.all_reduce(flags, op=dist.ReduceOp.BOR)\n", None),
        Example("import torch.distributed as dist\nfrom torch.distributed import ReduceOp\n"
                "dist.all_reduce(x, op=ReduceOp.PRODUCT)\n", None),
        Example("import torch.distributed as dist\ndist.all_reduce(loss.double())\n", None),
        Example("import torch.distributed as dist\ndist.recv(buf)\n", None),
    ],
)
def hccl_rules(ctx, call: ast.Call) -> None:
    q = ctx.qname(call.func)
    if q in _REDUCING:
        op = _kwarg(call, "op")
        if op is None and q == "torch.distributed.all_reduce" and len(call.args) > 1:
            op = call.args[1]
        name = (ctx.qname(op) or "").rsplit(".", 1)[-1] if op is not None else ""
        bitwise = _hccl_rule("reduce_op.bitwise")
        if name in bitwise["refused_ops"]:
            ctx.report(call, api=f"{q}(op=ReduceOp.{name})", severity=UNSUPPORTED,
                       reason=bitwise["message"].format(reduce_op=name) + " (torch_npu refuses it)",
                       tip="on 0/1 integer tensors BAND is MIN and BOR is MAX; BXOR: SUM then % 2")
        elif name == "PRODUCT":
            prod = _hccl_rule("reduce_op.prod_dtypes")
            ctx.report(call, api=f"{q}(op=ReduceOp.PRODUCT)", severity=MANUAL,
                       reason="HCCL's prod reduction refuses " + " and ".join(prod["refused_dtypes"])
                              + " on Atlas A2/A3 (error code 5)",
                       tip="make sure the tensor is float16/float32/int32/int64, or reduce in float32")
        if any(_visible_float64(ctx, a) for a in call.args[:2]):  # the tensor (and the input of *_scatter)
            fn = _REDUCING[q]
            ctx.report(call, api=q, severity=UNSUPPORTED,
                       reason=f"HCCL {fn}: Unsupported data type at::kDouble (HCCL reduces int8/16/32/64, "
                              "fp16, fp32, bf16)",
                       tip="reduce in float32 and convert afterwards")
    elif q in ("torch.distributed.recv", "torch.distributed.irecv"):
        if len(call.args) < 2 and _kwarg(call, "src") is None and _kwarg(call, "group_src") is None:
            ctx.report(call, api=q, severity=UNSUPPORTED, reason=_hccl_rule("collective.recv_anysource")["message"]
                       + " without a source rank", tip="pass src=<rank>")
    elif q == "torch.distributed.gather":
        ctx.report(call, api=q, severity=MANUAL, reason=_hccl_rule("collective.gather")["message"],
                   tip="every rank receives every tensor (world_size x the memory); use all_gather, or "
                       "gather_object for small data")
