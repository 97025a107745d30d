"""Backend flags: cuDNN switches, TF32 -> HF32, SDPA kernel selectors."""

from __future__ import annotations

import ast

from ..model import MANUAL, UNSUPPORTED
from .base import NPU, REPORT_ONLY, Example, rule

# TF32 switch -> HF32 switch of torch_npu (objects torch.npu.matmul / torch.npu.conv carry the property
# ``allow_hf32``: see shared/reference/README.md, "TF32's analogue is HF32").
HF32 = {
    "torch.backends.cuda.matmul.allow_tf32": "torch.npu.matmul.allow_hf32",
    "torch.backends.cudnn.allow_tf32": "torch.npu.conv.allow_hf32",
}
# Attributes set on torch_npu objects that the static API list cannot see (properties); their owner must exist.
NPU_PROPERTIES = frozenset(HF32.values())

CUDNN_TIPS = {
    "torch.backends.cudnn.benchmark": "no effect on Ascend (operator tuning is done by CANN); remove or keep",
    "torch.backends.cudnn.deterministic": "use torch.use_deterministic_algorithms(True) (and HCCL_DETERMINISTIC=true)",
    "torch.backends.cudnn.enabled": "no effect on Ascend",
    "torch.backends.cudnn.benchmark_limit": "no effect on Ascend",
}


@rule(
    "ASC401",
    "tf32-to-hf32",
    "TF32 switches (`allow_tf32`)",
    hooks=("chain",),
    tokens=('tf32',),
    doc="""
    ## What it does
    Rewrites `torch.backends.cuda.matmul.allow_tf32` and `torch.backends.cudnn.allow_tf32` to torch_npu's HF32
    switches for `--to npu`. For `--to portable` they are kept (they are harmless on other devices) and listed.

    ## Why
    Ascend's reduced-precision float32 mode is HF32, switched by `torch.npu.matmul.allow_hf32` and
    `torch.npu.conv.allow_hf32`; the TF32 flags do nothing there.

    ## Example
    `torch.backends.cuda.matmul.allow_tf32 = True`

    ## Use instead
    `torch.npu.matmul.allow_hf32 = True`

    ## Fix safety
    Safe.
    """,
    examples=[
        Example(
            "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\ntorch.backends.cudnn.allow_tf32 = True\n",
            "import torch\nimport torch_npu\ntorch.npu.matmul.allow_hf32 = True\ntorch.npu.conv.allow_hf32 = True\n",
        )
    ],
    emits_npu=tuple(HF32.values()),
)
def tf32(ctx, node: ast.AST) -> None:
    q = ctx.qname(node)
    if q not in HF32 or not ctx.claim(node):
        return
    if ctx.target == NPU:
        ctx.change(node, [ctx.chain_edit(node, HF32[q])], api=q, message=f"TF32 -> HF32: {HF32[q]}")
    else:
        ctx.report(node, api=q, severity=MANUAL, reason="TF32 has no effect on Ascend",
                   tip=f"on Ascend set {HF32[q]} (torch_npu) for the same trade-off")


@rule(
    "ASC402",
    "cudnn-flags",
    "`torch.backends.cudnn` switches",
    safety=REPORT_ONLY,
    hooks=("chain",),
    tokens=('cudnn',),
    doc="""
    ## What it does
    Lists `torch.backends.cudnn.benchmark`, `.deterministic`, `.enabled` and friends.

    ## Why
    cuDNN does not exist on Ascend: the flags are accepted and ignored, so a run that relied on
    `deterministic = True` is silently non-deterministic.

    ## Example
    `torch.backends.cudnn.deterministic = True`

    ## Use instead
    `torch.use_deterministic_algorithms(True)`; `benchmark` has no counterpart (CANN tunes operators itself).

    ## Fix safety
    Report only: the lines are harmless and kept.
    """,
    examples=[Example("import torch\ntorch.backends.cudnn.benchmark = True\n", None)],
)
def cudnn_flags(ctx, node: ast.AST) -> None:
    q = ctx.qname(node)
    if not q or not q.startswith("torch.backends.cudnn") or not ctx.claim(node):
        return
    tip = CUDNN_TIPS.get(q, "cuDNN does not exist on Ascend: remove or keep (no effect)")
    ctx.report(node, api=q, severity=MANUAL, reason="cuDNN flag: no effect on Ascend", tip=tip)


SDPA = (
    "torch.backends.cuda.sdp_kernel",
    "torch.backends.cuda.enable_flash_sdp",
    "torch.backends.cuda.enable_math_sdp",
    "torch.backends.cuda.enable_mem_efficient_sdp",
    "torch.backends.cuda.enable_cudnn_sdp",
    "torch.backends.cuda.flash_sdp_enabled",
    "torch.backends.cuda.mem_efficient_sdp_enabled",
    "torch.backends.cuda.math_sdp_enabled",
    "torch.backends.cuda.cudnn_sdp_enabled",
    "torch.backends.cuda.preferred_linalg_library",
    "torch.backends.cuda.preferred_blas_library",
    "torch.nn.attention.sdpa_kernel",
    "torch.nn.attention.SDPBackend.FLASH_ATTENTION",
    "torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION",
    "torch.nn.attention.SDPBackend.CUDNN_ATTENTION",
)


@rule(
    "ASC403",
    "cuda-backend-selector",
    "SDPA kernel selectors and other `torch.backends.cuda` switches",
    safety=REPORT_ONLY,
    hooks=("chain",),
    tokens=('cuda', 'sdpa_kernel', 'sdpbackend'),
    doc="""
    ## What it does
    Lists `torch.backends.cuda.sdp_kernel(...)`, `enable_flash_sdp(...)`, `torch.nn.attention.sdpa_kernel` with
    CUDA-only backends, and other `torch.backends.cuda` switches.

    ## Why
    The official support list marks the `torch.backends.cuda` SDPA switches unsupported on Ascend; `sdpa_kernel`
    only selects among CUDA kernels. On Ascend `scaled_dot_product_attention` uses the fused NPU kernel.

    ## Example
    `with torch.backends.cuda.sdp_kernel(enable_flash=True): ...`

    ## Use instead
    Drop the selector (or keep `torch.nn.attention.sdpa_kernel` for CUDA only); to force the math path on Ascend
    call `torch_npu.npu.use_compatible_impl(True)`.

    ## Fix safety
    Report only.
    """,
    examples=[Example("import torch\nctx = torch.backends.cuda.sdp_kernel(enable_flash=True)\n", None)],
)
def backend_selector(ctx, node: ast.AST) -> None:
    q = ctx.qname(node)
    if not q or ctx.is_claimed(node) or _sets_fp16_reduction(ctx, node):
        return
    if q in SDPA or q.startswith("torch.backends.cuda.") and q not in HF32:
        ctx.claim(node)
        sev = UNSUPPORTED if q.startswith("torch.backends.cuda") else MANUAL
        ctx.report(node, api=q, severity=sev, reason="selects CUDA attention/linear-algebra kernels",
                   tip="on Ascend SDPA runs the fused NPU kernel; drop the selector or guard it for CUDA")


FP16_REDUCTION = "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction"


def _sets_fp16_reduction(ctx, node: ast.AST) -> bool:
    """``node`` is the target of an assignment to the cuBLAS fp16 reduction switch (ASC404's, not ASC403's)."""
    return (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
            and ctx.qname(node) == FP16_REDUCTION)


@rule(
    "ASC404",
    "fp16-reduced-reduction",
    "`torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction` set in code",
    safety=REPORT_ONLY,
    hooks=("chain",),
    tokens=("fp16_reduced_precision",),
    doc="""
    ## What it does
    Lists assignments to `torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction`.

    ## Why
    The flag lets cuBLAS reduce float16 matrix products in reduced precision. It is a cuBLAS switch: on Ascend
    the accumulation of float16 matmuls is chosen by CANN, and the flag is accepted and ignored, so the numerics
    the script asked for (either way) are not the ones it gets.

    ## Example
    `torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False`

    ## Use instead
    Nothing sets it on Ascend: drop the line or guard it for CUDA, and where accuracy matters compare the float16
    results against a float32 run on the NPU.

    ## Fix safety
    Report only: the line is harmless and kept.
    """,
    examples=[
        Example("import torch\ntorch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False\n", None),
        Example("import torch as th\nth.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True\n", None),
    ],
)
def fp16_reduced_reduction(ctx, node: ast.AST) -> None:
    if not _sets_fp16_reduction(ctx, node) or not ctx.claim(node):
        return
    ctx.report(node, api=FP16_REDUCTION, severity=MANUAL, reason="cuBLAS-only switch: ignored on Ascend",
               tip="drop it or guard it for CUDA; check float16 matmul accuracy against float32 on the NPU")
