"""Performance advice (advice.csv): what runs, but runs slower on Ascend than it needs to."""

from __future__ import annotations

import ast
import re

from ..flags import own_cuda_flags
from .base import NPU, REPORT_ONLY, TARGETS, Example, rule

_FUSED = {
    "torch.optim.Adam": "torch_npu.optim.NpuFusedAdam",
    "torch.optim.AdamW": "torch_npu.optim.NpuFusedAdamW",
    "torch.optim.SGD": "torch_npu.optim.NpuFusedSGD",
    "torch.optim.RMSprop": "torch_npu.optim.NpuFusedRMSprop",
    "torch.optim.Adadelta": "torch_npu.optim.NpuFusedAdadelta",
}


def _in_loop(ctx, node) -> bool:
    p = ctx.parent(node)
    while p is not None:
        if isinstance(p, (ast.For, ast.While, ast.AsyncFor)):
            return True
        if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return False
        p = ctx.parent(p)
    return False


@rule(
    "ASC801",
    "blocking-copy",
    "host-to-device copies in a loop without `non_blocking=True`",
    safety=REPORT_ONLY,
    targets=TARGETS,
    hooks=("call",),
    category="advice",
    doc="""
    ## What it does
    Advises on `.to(device)` / `.cuda()` calls inside loops that do not pass `non_blocking=True`.

    ## Why
    A blocking copy stalls the host until the device has the data; with pinned host memory and
    `non_blocking=True` the copy overlaps with compute (on Ascend as on CUDA).

    ## Example
    `for x, y in loader: x = x.to(device)`

    ## Use instead
    `x = x.to(device, non_blocking=True)` with `DataLoader(..., pin_memory=True)`.

    ## Fix safety
    Advice only.
    """,
    examples=[Example("for x in loader:\n    x = x.to(device)\n", None)],
)
def blocking_copy(ctx, call: ast.Call) -> None:
    f = call.func
    if not isinstance(f, ast.Attribute) or f.attr not in ("to", "cuda") or ctx.qname(f) is not None:
        return
    if f.attr == "to" and not call.args and not any(k.arg == "device" for k in call.keywords):
        return
    if f.attr == "to" and call.args and isinstance(call.args[0], ast.Attribute) and call.args[0].attr in (
            "float32", "float16", "bfloat16", "float64", "int64", "long", "half", "float"):
        return
    if any(k.arg == "non_blocking" for k in call.keywords) or not _in_loop(ctx, call):
        return
    ctx.advise(call, api=f".{f.attr}()", message="blocking host-to-device copy inside a loop",
               tip="pass non_blocking=True and load batches with pin_memory=True")


@rule(
    "ASC802",
    "dataloader-settings",
    "`DataLoader` without worker processes or pinned memory",
    safety=REPORT_ONLY,
    hooks=("call",),
    tokens=('dataloader',),
    category="advice",
    doc="""
    ## What it does
    Advises on `torch.utils.data.DataLoader(...)` calls that leave `num_workers` at 0 or `pin_memory` off.

    ## Why
    Batch preparation on the main process starves a fast device; pinned memory makes copies asynchronous.
    Note the official support list: `num_workers` must stay 0 when the dataset itself yields NPU tensors.

    ## Example
    `DataLoader(ds, batch_size=64)`

    ## Use instead
    `DataLoader(ds, batch_size=64, num_workers=8, pin_memory=True, persistent_workers=True)`

    ## Fix safety
    Advice only.
    """,
    examples=[Example("from torch.utils.data import DataLoader\nl = DataLoader(ds)\n", None)],
)
def dataloader(ctx, call: ast.Call) -> None:
    if ctx.qname(call.func) not in ("torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"):
        return
    kws = {k.arg: k.value for k in call.keywords}
    missing = []
    nw = kws.get("num_workers")
    if nw is None or isinstance(nw, ast.Constant) and nw.value == 0:
        missing.append("num_workers > 0")
    pm = kws.get("pin_memory")
    if pm is None or isinstance(pm, ast.Constant) and pm.value is False:
        missing.append("pin_memory=True")
    if missing:
        ctx.advise(call, api="torch.utils.data.DataLoader", message="DataLoader without " + " and ".join(missing),
                   tip="set " + ", ".join(missing) + " (keep num_workers=0 if the dataset returns NPU tensors)")


@rule(
    "ASC803",
    "fused-optimizer",
    "optimizers with a fused torch_npu counterpart",
    safety=REPORT_ONLY,
    hooks=("call",),
    tokens=('optim',),
    category="advice",
    emits_npu=tuple(_FUSED.values()),
    doc="""
    ## What it does
    Advises on `torch.optim.Adam/AdamW/SGD/RMSprop/Adadelta` for `--to npu`.

    ## Why
    torch_npu's fused optimizers update all parameters in a few kernels instead of one per tensor, which is
    markedly faster for models with many parameter tensors.

    ## Example
    `torch.optim.AdamW(model.parameters(), lr=1e-3)`

    ## Use instead
    `torch_npu.optim.NpuFusedAdamW(model.parameters(), lr=1e-3)`

    ## Fix safety
    Advice only (the fused optimizers combine parameters into flat buffers; check checkpoint compatibility).
    """,
    examples=[Example("import torch\nopt = torch.optim.AdamW(ps)\n", None)],
)
def fused_optimizer(ctx, call: ast.Call) -> None:
    q = ctx.qname(call.func)
    if q in _FUSED and ctx.target == NPU:
        ctx.advise(call, api=q, message=f"{q} runs one kernel per parameter tensor",
                   tip=f"use {_FUSED[q]} (same arguments)")


@rule(
    "ASC804",
    "ddp-bucket",
    "`DistributedDataParallel` with the default gradient bucket size",
    safety=REPORT_ONLY,
    hooks=("call",),
    tokens=('distributeddataparallel',),
    category="advice",
    doc="""
    ## What it does
    Advises on `DistributedDataParallel(...)` without `bucket_cap_mb`.

    ## Why
    HCCL all-reduce favours larger buckets than NCCL's 25 MB default; tuning `bucket_cap_mb` (and
    `gradient_as_bucket_view=True`) reduces the number of collectives.

    ## Example
    `DDP(model, device_ids=[rank])`

    ## Use instead
    `DDP(model, device_ids=[rank], bucket_cap_mb=100, gradient_as_bucket_view=True)` (measure).

    ## Fix safety
    Advice only.
    """,
    examples=[Example("from torch.nn.parallel import DistributedDataParallel as DDP\nm = DDP(m)\n", None)],
)
def ddp_bucket(ctx, call: ast.Call) -> None:
    q = ctx.qname(call.func)
    if q not in ("torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel"):
        return
    if not any(k.arg == "bucket_cap_mb" for k in call.keywords):
        ctx.advise(call, api=q, message="DDP with the default 25 MB gradient buckets",
                   tip="try bucket_cap_mb=100 and gradient_as_bucket_view=True on Ascend")


@rule(
    "ASC805",
    "cuda-named-flag",
    "the script's own `--cuda` flag now chooses the NPU",
    safety=REPORT_ONLY,
    hooks=("module",),
    tokens=('cuda',),
    category="advice",
    doc="""
    ## What it does
    Gives a flag the script defines with CUDA in its name (`add_argument("--cuda", action="store_true")`,
    `--no-cuda`, `--use_cuda`) one advice row, at its definition. Its reads (`args.cuda`) are the user's
    names, not CUDA sites: they are neither converted nor listed for a person (ASC099 passes them by). A file
    that reads such an option without defining it (`args.cuda`, `opt.cuda`, `self.args.cuda`: the parser is
    elsewhere) gets one row at the first read.

    ## Why
    After the migration `torch.device("cuda" if args.cuda else "cpu")` reads `torch.device("npu" if args.cuda
    else "cpu")`: the flag works, but its name (and help text) now says the wrong device.

    ## Example
    `parser.add_argument("--cuda", action="store_true", help="use CUDA")`

    ## Use instead
    Rename it (`--npu`, or `--accel` for portable code), keeping the old spelling as an alias so existing
    command lines still work: `add_argument("--accel", "--cuda", dest="accel", action="store_true")`.

    ## Fix safety
    Advice only.
    """,
    examples=[
        Example('import argparse\nimport torch\np = argparse.ArgumentParser()\np.add_argument("--cuda", '
                'action="store_true")\nargs = p.parse_args()\n'
                'device = torch.device("cuda" if args.cuda else "cpu")\n',
                'import argparse\nimport torch\nimport torch_npu\np = argparse.ArgumentParser()\np.add_argument('
                '"--cuda", action="store_true")\nargs = p.parse_args()\n'
                'device = torch.device("npu" if args.cuda else "cpu")\n', fires=False,
                note="the device string is converted (ASC103); `args.cuda` is the script's own name"),
        Example("if opt.cuda:\n    model.cuda()\n", "if opt.cuda:\n    model.npu()\n", fires=False),
    ],
)
def cuda_named_flag(ctx, tree: ast.Module) -> None:
    target = "the NPU" if ctx.target == NPU else "the accelerator in use"
    flags, elsewhere = own_cuda_flags(ctx)
    word = "npu" if ctx.target == NPU else "accel"
    for flag in flags:
        reads = f" (read {len(flag.reads)} times as `{ctx.seg(flag.reads[0])}`)" if len(flag.reads) > 1 else \
            f" (read as `{ctx.seg(flag.reads[0])}`)" if flag.reads else ""
        option, dest = (re.sub("cuda", word, x, flags=re.I) for x in (flag.option, flag.dest))
        ctx.advise(flag.call, api=flag.option,
                   message=f"`{flag.option}` is the script's own flag{reads}, not a CUDA API: it now chooses "
                           f"{target}",
                   tip=f"consider renaming it, its reads and its help text, keeping `{flag.option}` as an alias: "
                       f"add_argument(\"{option}\", \"{flag.option}\", dest=\"{dest}\", ...)")
    if elsewhere and not flags:
        first = elsewhere[0]
        ctx.advise(first, api=ctx.seg(first),
                   message=f"`{ctx.seg(first)}` reads an option of the script's own, not a CUDA API: it now "
                           f"chooses {target}",
                   tip="consider renaming the flag where the parser defines it, keeping the old spelling as an "
                       "alias")
