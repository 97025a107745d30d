"""apex fused optimizers -> torch_npu fused optimizers (npu) or native torch optimizers (portable)."""

from __future__ import annotations

import ast

from ..model import MANUAL
from .base import NPU, UNSAFE, Example, rule

# apex name -> (torch_npu optimizer, native torch optimizer or None)
APEX_OPTIMIZERS = {
    "apex.optimizers.FusedAdam": ("torch_npu.optim.NpuFusedAdamW", "torch.optim.AdamW"),
    "apex.optimizers.FusedLAMB": ("torch_npu.optim.NpuFusedLamb", None),
    "apex.optimizers.FusedSGD": ("torch_npu.optim.NpuFusedSGD", "torch.optim.SGD"),
    "apex.optimizers.FusedNovoGrad": (None, None),
    "apex.optimizers.FusedAdagrad": (None, "torch.optim.Adagrad"),
}


@rule(
    "ASC607",
    "apex-fused-optimizer",
    "apex fused optimizers (`FusedAdam`, `FusedLAMB`, `FusedSGD`)",
    safety=UNSAFE,
    hooks=("chain",),
    tokens=('apex',),
    doc="""
    ## What it does
    Rewrites `apex.optimizers.FusedAdam` / `FusedLAMB` / `FusedSGD` to `torch_npu.optim.NpuFusedAdamW` /
    `NpuFusedLamb` / `NpuFusedSGD` (`--to npu`) or to `torch.optim.AdamW` / `SGD` (`--to portable`).

    ## Why
    apex's fused kernels are CUDA-only. torch_npu ships fused optimizers with the same update rules; native
    torch optimizers work everywhere.

    ## Example
    `opt = FusedAdam(model.parameters(), lr=1e-3)`

    ## Use instead
    `opt = torch_npu.optim.NpuFusedAdamW(model.parameters(), lr=1e-3)`

    ## Fix safety
    Unsafe: apex-only keyword arguments (`adam_w_mode`, `set_grad_none`, `bias_correction`, ...) are dropped
    (the call is rebuilt, so comments inside it are lost); `FusedAdam` defaults to AdamW behaviour
    (`adam_w_mode=True`), so the replacement is AdamW, or Adam for `adam_w_mode=False`.
    """,
    examples=[
        Example(
            "from apex.optimizers import FusedAdam\nopt = FusedAdam(params, lr=1e-3)\n",
            "from apex.optimizers import FusedAdam\nimport torch_npu\nopt = torch_npu.optim.NpuFusedAdamW(params, lr=1e-3)\n",
            unsafe=True,
        ),
        Example(
            "from apex.optimizers import FusedAdam\nopt = FusedAdam(ps, lr=1e-3, adam_w_mode=False)\n",
            "import torch\nfrom apex.optimizers import FusedAdam\nopt = torch.optim.Adam(ps, lr=1e-3)\n",
            target="portable", unsafe=True,
        ),
    ],
    emits_npu=tuple(v[0] for v in APEX_OPTIMIZERS.values() if v[0]),
)
def apex_optimizer(ctx, node: ast.AST) -> None:
    q = ctx.qname(node)
    if q not in APEX_OPTIMIZERS or ctx.is_claimed(node):
        return
    p = ctx.parent(node)
    if not (isinstance(p, ast.Call) and p.func is node):
        return
    ctx.claim(node)
    npu, native = APEX_OPTIMIZERS[q]
    kws = {k.arg: k.value for k in p.keywords if k.arg}
    mode = kws.get("adam_w_mode")
    if q == "apex.optimizers.FusedAdam" and isinstance(mode, ast.Constant) and mode.value is False:
        npu, native = "torch_npu.optim.NpuFusedAdam", "torch.optim.Adam"
    elif q == "apex.optimizers.FusedAdam" and mode is not None and not isinstance(mode, ast.Constant):
        ctx.report(node, api=q, severity=MANUAL, reason="adam_w_mode is computed: Adam or AdamW?",
                   tip="use torch_npu.optim.NpuFusedAdamW (adam_w_mode=True) or NpuFusedAdam")
        return
    new = npu if ctx.target == NPU else native
    if new is None:
        ctx.report(node, api=q, severity=MANUAL, reason=f"{q} has no replacement on this target",
                   tip="use torch.optim.AdamW or a torch_npu.optim.NpuFused* optimizer")
        return
    if any(isinstance(a, ast.Starred) for a in p.args) or any(k.arg is None for k in p.keywords):
        edits = [ctx.chain_edit(node, new)]
    else:  # rebuild the call without apex-only keywords
        args = [ctx.hole(a) for a in p.args] + [f"{k.arg}={ctx.hole(k.value)}" for k in p.keywords
                                              if k.arg not in _APEX_ONLY_KWARGS]
        edits = [ctx.replace(p, f"{ctx.ref(new)}({', '.join(args)})")]
    ctx.change(p, edits, api=q, message=f"{q} -> {new}")


# keyword arguments of apex optimizers that torch_npu / torch optimizers do not take
_APEX_ONLY_KWARGS = frozenset({"adam_w_mode", "set_grad_none", "bias_correction", "capturable", "master_weights",
                               "materialize_master_grads", "grad_averaging", "use_nvlamb", "max_grad_norm",
                               "wd_after_momentum"})
