"""Profiling, custom CUDA code and CUDA-only libraries."""

from __future__ import annotations

import ast

from ..model import MANUAL, UNSUPPORTED
from .base import NPU, REPORT_ONLY, Example, rule


@rule(
    "ASC501",
    "profiler-cuda",
    "CUDA activities of `torch.profiler` / `use_cuda=` of the autograd profiler",
    hooks=("chain", "call"),
    doc="""
    ## What it does
    Rewrites `torch.profiler.ProfilerActivity.CUDA` to `ProfilerActivity.NPU` for `--to npu`, and
    `prof.key_averages().table(sort_by="cuda_time_total")` to the device-neutral `"device_time_total"`; reports
    `use_cuda=True` / `use_device="cuda"` arguments of `torch.autograd.profiler.profile` and, for `--to portable`,
    the CUDA activity.

    ## Why
    The CUDA activity records nothing on Ascend: the trace has no device timeline.

    ## Example
    `torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])`

    ## Use instead
    `ProfilerActivity.NPU` (registered by torch_npu), or `torch_npu.profiler.profile` for CANN-level traces.

    ## Fix safety
    Safe.
    """,
    examples=[
        Example(
            "from torch.profiler import ProfilerActivity\nacts = [ProfilerActivity.CUDA]\n",
            "from torch.profiler import ProfilerActivity\nimport torch_npu\nacts = [ProfilerActivity.NPU]\n",
        ),
        Example('print(prof.key_averages().table(sort_by="cuda_time_total"))\n',
                'print(prof.key_averages().table(sort_by="device_time_total"))\n', target="portable"),
    ],
    emits_npu=("torch.profiler.ProfilerActivity.NPU",),
)
def profiler_cuda(ctx, node: ast.AST) -> None:
    if isinstance(node, ast.Call):
        q = ctx.qname(node.func)
        if isinstance(node.func, ast.Attribute) and node.func.attr == "table":
            for kw in node.keywords:
                v = kw.value
                if kw.arg == "sort_by" and isinstance(v, ast.Constant) and v.value in _CUDA_SORT_KEYS:
                    seg = ctx.seg(v)
                    new = seg.replace("cuda_", "device_")
                    if ctx.claim(v):
                        ctx.change(v, [ctx.replace(v, new)] if seg[1:-1] == v.value else [None],
                                   api=f"sort_by={v.value!r}", message="profiler table sorted by CUDA time")
        if q and q.startswith("torch.autograd.profiler") or q and q.startswith("torch.profiler"):
            for kw in node.keywords:
                if kw.arg == "use_cuda" or (kw.arg == "use_device" and isinstance(kw.value, ast.Constant)
                                            and kw.value.value == "cuda"):
                    if ctx.claim(kw.value):
                        ctx.report(node, api=f"{q}({kw.arg}=...)", severity=MANUAL,
                                   reason="profiles CUDA kernels only",
                                   tip='use use_device="npu" (torch_npu) or activities=[...NPU]')
        return
    q = ctx.qname(node)
    if q != "torch.profiler.ProfilerActivity.CUDA" or not ctx.claim(node):
        return
    if ctx.target == NPU:
        a, b = ctx.span(node)
        if ctx.src.text[b - 4 : b] == "CUDA":
            from ..model import Edit

            ctx.change(node, [Edit(b - 4, b, "NPU")], api=q)
        else:
            ctx.change(node, [None], api=q)
    else:
        ctx.report(node, api=q, severity=MANUAL, reason="the CUDA activity records nothing on other devices",
                   tip="choose activities from torch.profiler.supported_activities()")


def _enclosing_def(ctx, node):
    p = ctx.parent(node)
    while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)):
        p = ctx.parent(p)
    return p


def _decorated_by(ctx, fn, prefixes) -> bool:
    while fn is not None:
        for d in fn.decorator_list:
            q = ctx.qname(getattr(d, "func", d))
            if q and any(q == p or q.startswith(p + ".") for p in prefixes):
                return True
        fn = _enclosing_def(ctx, fn)
    return False


_CUDA_SORT_KEYS = frozenset({"cuda_time_total", "self_cuda_time_total", "cuda_time", "self_cuda_time",
                             "cuda_memory_usage", "self_cuda_memory_usage"})


def _lib_rule(id, name, summary, prefixes, reason, tip, why, example, instead, exclude=()):
    doc = f"""
    ## What it does
    Lists imports and uses of {summary}.

    ## Why
    {why}

    ## Example
    `{example}`

    ## Use instead
    {instead}

    ## Fix safety
    Report only: the replacement changes numerics or APIs and needs a person.
    """

    @rule(id, name, summary, safety=REPORT_ONLY, hooks=("import", "chain"), doc=doc,
          examples=[Example(example + "\n", None)])
    def check(ctx, node: ast.AST) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for m in mods:
                if any(m == p or m.startswith(p + ".") for p in prefixes):
                    ctx.report(node, api=m, severity=UNSUPPORTED, reason=reason, tip=tip)
                    return
            return
        q = ctx.qname(node)
        if not q or ctx.is_claimed(node) or q in exclude:
            return
        if not any(q == p or q.startswith(p + ".") for p in prefixes):
            return
        ctx.claim(node)
        fn = _enclosing_def(ctx, node)
        if fn is not None and node in fn.decorator_list or fn is not None and node in [
                getattr(d, "func", None) for d in fn.decorator_list]:
            ctx.report(node, api=q, severity=UNSUPPORTED, reason=f"{reason}: kernel `{fn.name}`", tip=tip)
        elif fn is not None and _decorated_by(ctx, fn, prefixes):
            return  # inside a kernel: the kernel's row covers it
        else:
            ctx.report(node, api=q, severity=UNSUPPORTED, reason=reason, tip=tip)

    return check


_lib_rule(
    "ASC602", "triton-kernel", "Triton kernels (`triton`, `@triton.jit`)", ("triton",),
    "Triton kernels are compiled for NVIDIA GPUs",
    "use torch ops (torch.compile on NPU), triton-ascend, or an Ascend C custom op",
    "Upstream Triton targets NVIDIA/AMD GPUs; Ascend needs the separate triton-ascend backend.",
    "import triton", "torch ops, `torch.compile`, or triton-ascend.",
)
_lib_rule(
    "ASC603", "flash-attn", "the `flash_attn` package", ("flash_attn",),
    "flash-attn is a CUDA-only package",
    "use torch.nn.functional.scaled_dot_product_attention, or torch_npu.npu_fusion_attention on Ascend",
    "flash-attn ships CUDA kernels only.",
    "from flash_attn import flash_attn_func",
    "`F.scaled_dot_product_attention(q, k, v, is_causal=True)` or `torch_npu.npu_fusion_attention`.",
)
_lib_rule(
    "ASC604", "xformers", "the `xformers` package", ("xformers",),
    "xformers' memory-efficient kernels are CUDA-only",
    "use torch.nn.functional.scaled_dot_product_attention (fused on Ascend)",
    "xformers ships CUDA kernels only.",
    "import xformers.ops as xops", "`F.scaled_dot_product_attention`.",
)
_lib_rule(
    "ASC605", "bitsandbytes", "the `bitsandbytes` package", ("bitsandbytes",),
    "bitsandbytes' quantized kernels and 8-bit optimizers are CUDA-only",
    "use torch.optim (or torch_npu.optim.NpuFused*) and torch_npu's quantization ops (npu_quant_matmul)",
    "bitsandbytes ships CUDA kernels only.",
    "import bitsandbytes as bnb", "`torch.optim.AdamW`, `torch_npu.optim.NpuFusedAdamW`.",
)
_lib_rule(
    "ASC606", "apex-import", "NVIDIA apex (`apex.amp`, `apex.parallel`, `amp_C`, fused kernels)",
    ("apex", "amp_C", "fused_layer_norm_cuda", "fused_adam_cuda"),
    "apex does not work on Ascend",
    "use torch.amp for mixed precision, torch DDP, torch_npu.optim.NpuFused* optimizers (see ASC607)",
    "apex is built against CUDA; torch_npu ships its own fused optimizers.",
    "from apex import amp", "`torch.amp.autocast` and `torch.amp.GradScaler`.",
    exclude=("apex.optimizers.FusedAdam", "apex.optimizers.FusedLAMB", "apex.optimizers.FusedSGD",
             "apex.optimizers.FusedAdagrad"),
)

CPP_EXT = {
    "torch.utils.cpp_extension.load": "JIT-compiles C++/CUDA sources",
    "torch.utils.cpp_extension.load_inline": "JIT-compiles C++/CUDA sources",
    "torch.utils.cpp_extension.CUDAExtension": "builds CUDA kernels",
    "torch.utils.cpp_extension.BuildExtension": "builds C++/CUDA extensions",
    "torch.utils.cpp_extension.CUDA_HOME": "locates the CUDA toolkit",
}


@rule(
    "ASC601",
    "cpp-extension",
    "C++/CUDA extensions built with `torch.utils.cpp_extension`",
    safety=REPORT_ONLY,
    hooks=("chain",),
    doc="""
    ## What it does
    Lists `torch.utils.cpp_extension.load`, `load_inline`, `CUDAExtension`, `BuildExtension`, `CUDA_HOME`.
    The `.cu`/`.cpp` files of the project are scanned for `PYBIND11_MODULE`/`TORCH_LIBRARY` and their ops listed
    in `cuda_ops.csv`.

    ## Why
    CUDA kernels do not run on Ascend. Each op needs an NPU implementation: composed torch ops, a torch_npu
    fused op, or an Ascend C kernel registered for the `PrivateUse1` (NPU) key.

    ## Example
    `CUDAExtension("fused_gelu", ["fused_gelu.cpp", "fused_gelu_kernel.cu"])`

    ## Use instead
    Pure-torch fallbacks, torch_npu ops (`torch_npu.npu_*`), or an Ascend C custom op built with
    `torch_npu.utils.cpp_extension.NpuExtension`.

    ## Fix safety
    Report only.
    """,
    examples=[Example("from torch.utils.cpp_extension import load\next = load('x', ['x.cu'])\n", None)],
)
def cpp_extension(ctx, node: ast.AST) -> None:
    q = ctx.qname(node)
    if q in CPP_EXT and ctx.claim(node):
        ctx.report(node, api=q, severity=UNSUPPORTED, reason=f"{CPP_EXT[q]}: CUDA code does not run on Ascend",
                   tip="port each op (see cuda_ops.csv): torch ops, torch_npu.npu_* ops or an Ascend C op")


@rule(
    "ASC502",
    "nvtx-range",
    "`with torch.cuda.nvtx.range(msg):` annotates a range for Nsight",
    hooks=("call",),
    doc="""
    ## What it does
    Rewrites the NVTX range context manager `torch.cuda.nvtx.range(msg)` to
    `torch.autograd.profiler.record_function(msg)`, which shows in every PyTorch profiler (torch_npu's too).
    `range_push`/`range_pop` pairs are listed by ASC204 (they cannot be paired safely without control flow
    analysis).

    ## Why
    torch_npu has no NVTX: `torch.cuda.nvtx.*` fails on Ascend ("NVTX functions not installed").

    ## Example
    `with torch.cuda.nvtx.range("forward"): y = model(x)`

    ## Use instead
    `with torch.autograd.profiler.record_function("forward"): y = model(x)` (or `torch_npu.npu.mstx` for
    msprof timelines).

    ## Fix safety
    Safe: both are annotations with no effect on results. Calls with format arguments are listed instead.
    """,
    examples=[
        Example('import torch\nwith torch.cuda.nvtx.range("fwd"):\n    pass\n',
                'import torch\nwith torch.autograd.profiler.record_function("fwd"):\n    pass\n'),
        Example('import torch\nwith torch.cuda.nvtx.range("step {}", 3):\n    pass\n', None),
    ],
)
def nvtx_range(ctx, call: ast.Call) -> None:
    q = ctx.qname(call.func)
    if q != "torch.cuda.nvtx.range" or len(call.args) != 1 or call.keywords:
        return
    p = ctx.parent(call)
    if not isinstance(p, ast.withitem):
        return
    ctx.claim(call.func)
    ctx.change(call, [ctx.chain_edit(call.func, "torch.autograd.profiler.record_function")], api=q,
               message="NVTX range -> torch.autograd.profiler.record_function")
