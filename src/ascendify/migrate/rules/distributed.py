"""Distributed rules: NCCL backends, DataParallel, visible-device variables."""

from __future__ import annotations

import ast

from ..dataflow import is_backend_name
from ..model import MANUAL, UNSUPPORTED, Edit
from ..portable import device_type_block
from .base import NPU, PORTABLE, UNSAFE, Example, rule

_NCCL = {"nccl": "hccl", "NCCL": "HCCL"}


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
    `dist.get_backend() == "nccl"`.

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
        return q in ("torch.distributed.get_backend", "torch.distributed.distributed_c10d.get_backend")
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
