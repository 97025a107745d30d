"""NVIDIA apex's CUDA-only pieces -> torch: fused norms (ASC610) and ``apex.amp`` (ASC611).

apex's fused optimizers are ASC607's (``optimizers.py``); the rest of apex (``apex.parallel``, ``amp_C``...)
stays listed by ASC606.
"""

from __future__ import annotations

import ast

from ..model import MANUAL
from .base import PORTABLE, SAFE, UNSAFE, Example, rule

# apex class -> (torch class, parameters in apex's order, apex's eps default written out when the torch
# class's default differs)
APEX_NORMS = {
    "FusedLayerNorm": ("torch.nn.LayerNorm", None),
    "FusedRMSNorm": ("torch.nn.RMSNorm", "1e-5"),  # nn.RMSNorm's eps default is None (the dtype's eps)
}
_NORM_MODULES = ("apex.normalization", "apex.normalization.fused_layer_norm")
_NORM_PARAMS = ("normalized_shape", "eps", "elementwise_affine", "memory_efficient")


@rule(
    "ASC610",
    "apex-fused-norm",
    "apex `FusedLayerNorm` / `FusedRMSNorm` modules",
    safety=SAFE,
    hooks=("call",),
    tokens=("apex",),
    doc="""
    ## What it does
    Rewrites `apex.normalization.FusedLayerNorm(shape, eps, elementwise_affine)` to `torch.nn.LayerNorm` and
    `FusedRMSNorm(...)` to `torch.nn.RMSNorm` (with apex's default `eps=1e-5` written out: `nn.RMSNorm`'s
    default is the dtype's machine epsilon), on both targets. `memory_efficient=` is dropped (it only
    trades memory for recomputation in apex's backward). Uses other than a call (`isinstance`, a subclass)
    stay listed by ASC606.

    ## Why
    apex's fused norms are CUDA kernels. The torch modules compute the same function with the same
    parameters (`weight`, `bias`: checkpoints load unchanged) and are fused on Ascend by torch_npu;
    `torch_npu.npu_rms_norm(x, weight, eps)[0]` is the functional NPU kernel behind RMSNorm if a call
    site wants it, `nn.RMSNorm` is chosen because it is exact and runs on every device.

    ## Example
    `self.norm = FusedRMSNorm(hidden, eps=1e-6)`

    ## Use instead
    `self.norm = torch.nn.RMSNorm(hidden, eps=1e-6)`

    ## Fix safety
    Safe: same math and parameter names. (apex's MixedFused* variants keep fp32 weights for half inputs and
    are listed instead.)
    """,
    examples=[
        Example("import torch\nfrom apex.normalization import FusedLayerNorm\nln = FusedLayerNorm(64, eps=1e-6)\n",
                "import torch\nln = torch.nn.LayerNorm(64, eps=1e-6)\n"),
        Example("import torch.nn as nn\nimport apex\nn = apex.normalization.FusedRMSNorm([8, 64], "
                "memory_efficient=True)\n",
                "import torch.nn as nn\nn = nn.RMSNorm([8, 64], eps=1e-5)\n", target=PORTABLE),
        Example("from apex.normalization import MixedFusedLayerNorm\nln = MixedFusedLayerNorm(64)\n", None),
    ],
)
def apex_fused_norm(ctx, call: ast.Call) -> None:
    f = call.func
    q = ctx.qname(f)  # the rule only runs on files that mention apex
    if q is None:
        return
    module, _, name = q.rpartition(".")
    if name not in APEX_NORMS or module not in _NORM_MODULES or not ctx.claim(f):
        return
    new, eps_default = APEX_NORMS[name]
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords) or len(
            call.args) > len(_NORM_PARAMS) or any(k.arg not in _NORM_PARAMS for k in call.keywords):
        ctx.report(call, api=q, severity=MANUAL, reason="left as it was: arguments apex's signature does not "
                   "explain (*args, **kwargs or unknown keywords)", tip=f"use {new}")
        return
    bound = dict(zip(_NORM_PARAMS, call.args, strict=False))
    bound.update({k.arg: k.value for k in call.keywords})
    if "normalized_shape" not in bound:
        ctx.report(call, api=q, severity=MANUAL, reason="left as it was: no normalized_shape", tip=f"use {new}")
        return
    parts = [ctx.hole(bound["normalized_shape"])]
    if "eps" in bound:
        parts.append(f"eps={ctx.hole(bound['eps'])}")
    elif eps_default:
        parts.append(f"eps={eps_default}")
    if "elementwise_affine" in bound:
        parts.append(f"elementwise_affine={ctx.hole(bound['elementwise_affine'])}")
    ctx.change(call, [ctx.replace(call, f"{ctx.ref(new)}({', '.join(parts)})")], api=q, message=f"{q} -> {new}")


OPT_LEVELS = {
    "O0": "pure fp32: nothing to add",
    "O1": "mixed precision: wrap the forward pass and the loss in `with torch.amp.autocast(device_type, "
          "dtype=torch.float16):`, create `scaler = torch.amp.GradScaler(device_type)` and replace the "
          "scale_loss block by `scaler.scale(loss).backward()`, `optimizer.step()` by `scaler.step(optimizer); "
          "scaler.update()`",
    "O2": "\"almost fp16\" (fp16 weights, fp32 master weights): torch has no master-weight mode; use O1's "
          "autocast + GradScaler recipe (or bfloat16 autocast without a scaler, which Ascend's A2 chips run "
          "natively)",
    "O3": "pure fp16: `model.half()` (no loss scaling); O1's recipe is the numerically safer choice",
}


@rule(
    "ASC611",
    "apex-amp",
    "`apex.amp.initialize` / `amp.scale_loss` / `amp.master_params` mixed precision",
    safety=UNSAFE,
    hooks=("call",),
    tokens=("amp",),
    doc="""
    ## What it does
    Takes apex.amp out of the training loop, on both targets:
    `model, optimizer = amp.initialize(model, optimizer, opt_level=...)` becomes
    `model, optimizer = (model, optimizer)`, `with amp.scale_loss(loss, optimizer) as scaled_loss:` becomes
    `with contextlib.nullcontext(loss) as scaled_loss:` and `amp.master_params(optimizer)` the optimizer's
    parameters. The code then trains in fp32 (apex's O0). The finding's tip says how to get the opt level's
    mixed precision back with `torch.amp`:
    - O1 (patch functions to fp16 where safe): `with torch.amp.autocast(device_type, dtype=torch.float16):`
      around forward + loss, and a `torch.amp.GradScaler(device_type)`: `scaler.scale(loss).backward()`,
      `scaler.step(optimizer)`, `scaler.update()`;
    - O2 (fp16 model, fp32 master weights): torch has no master-weight mode; O1's recipe, or bf16 autocast
      without a scaler;
    - O3 (pure fp16): `model.half()`.
    `amp.state_dict()` / `load_state_dict` (the loss scaler's state) stay listed by ASC606.

    ## Why
    apex.amp is CUDA-only (and deprecated upstream in favour of `torch.amp`). Where autocast goes (which code
    is the forward pass) is not visible to a rewrite, so the rewrite gives fp32 and the tip the recipe.

    ## Example
    `model, optimizer = amp.initialize(model, optimizer, opt_level="O1")`

    ## Use instead
    `model, optimizer = (model, optimizer)` and `torch.amp.autocast` + `torch.amp.GradScaler` where the
    forward pass is.

    ## Fix safety
    Unsafe: the result trains in fp32 (slower, more memory, at least as accurate) until autocast is added.
    """,
    examples=[
        Example("import torch\nfrom apex import amp\nmodel, opt = amp.initialize(model, opt, opt_level='O1')\n"
                "with amp.scale_loss(loss, opt) as scaled:\n    scaled.backward()\n",
                "import torch\nimport contextlib\nmodel, opt = (model, opt)\n"
                "with contextlib.nullcontext(loss) as scaled:\n    scaled.backward()\n", unsafe=True),
        Example("import torch\nfrom apex import amp\ntorch.nn.utils.clip_grad_norm_(amp.master_params(opt), 1.0)\n",
                "import torch\ntorch.nn.utils.clip_grad_norm_((p for g in opt.param_groups\n"
                "                                for p in g['params']), 1.0)\n", unsafe=True, target=PORTABLE),
        Example("from apex import amp\nmodel = amp.initialize(model, opt_level='O2')\n", None),
    ],
)
def apex_amp(ctx, call: ast.Call) -> None:
    f = call.func
    q = ctx.qname(f)
    name = q.rpartition(".")[2] if q else ""
    if q not in ("apex.amp.initialize", "apex.amp.scale_loss", "apex.amp.master_params") or not ctx.claim(f):
        return
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        ctx.report(call, api=q, severity=MANUAL, reason="left as it was: *args/**kwargs", tip="use torch.amp")
        return
    kws = {k.arg: k.value for k in call.keywords}
    if name == "initialize":
        models = call.args[0] if call.args else kws.get("models")
        opts = call.args[1] if len(call.args) > 1 else kws.get("optimizers")
        level = kws.get("opt_level", call.args[2] if len(call.args) > 2 else None)
        level_text = level.value if isinstance(level, ast.Constant) and level.value in OPT_LEVELS else (
            "O1" if level is None else None)
        if models is None:
            ctx.report(call, api=q, severity=MANUAL, reason="left as it was: no models argument", tip="use torch.amp")
            return
        text = f"({ctx.hole(models)}, {ctx.hole(opts)})" if opts is not None and not (
            isinstance(opts, ast.Constant) and opts.value is None) else ctx.hole(models)
        how = OPT_LEVELS[level_text] if level_text else "opt_level is computed: " + OPT_LEVELS["O1"]
        message = f"apex.amp.initialize(opt_level={level_text or '?'}) removed: fp32 now; {how}"
    elif name == "scale_loss":
        loss = call.args[0] if call.args else kws.get("loss")
        if loss is None:
            ctx.report(call, api=q, severity=MANUAL, reason="left as it was: no loss argument", tip="use torch.amp")
            return
        text = f"{ctx.ref('contextlib.nullcontext')}({ctx.hole(loss)})"
        message = ("amp.scale_loss -> the loss unscaled (fp32 training); with autocast fp16 use "
                   "torch.amp.GradScaler: scaler.scale(loss).backward(), scaler.step(optimizer), scaler.update()")
    else:
        opt = call.args[0] if call.args else kws.get("optimizer")
        if opt is None or len(call.args) > 1 or len(kws) > (0 if call.args else 1):
            ctx.report(call, api=q, severity=MANUAL, reason="left as it was: unexpected arguments",
                       tip="iterate optimizer.param_groups")
            return
        text = f"(p for g in {_atom(ctx, opt)}.param_groups for p in g['params'])"
        message = "amp.master_params(optimizer) -> the optimizer's parameters (fp32: they are the master weights)"
    ctx.change(call, [ctx.replace(call, text)], api=q, message=message)


def _atom(ctx, node: ast.AST) -> str:
    text = ctx.hole(node)
    return text if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)) else f"({text})"
