"""torch_npu's fused optimizers and Adam kernels.

- ``torch_npu.optim.NpuFused{AdamW,Adam,SGD,Adadelta,RMSprop}``: the update rule of the ``torch.optim`` optimizer
  of the same name (torch_npu's docs say so: "核心功能和torch.optim.X兼容"), with torch_npu's signatures and
  defaults (NpuFusedAdamW's ``weight_decay`` is 1e-2; NpuFusedSGD needs ``lr``). On an NPU they also flatten the
  parameters into one buffer, an implementation detail with no effect on the values;
- ``npu_apply_adam_w`` / ``npu_apply_adam``: one Adam(W) step written into ``out=(var, m, v)`` (what DeepSpeed's
  NPU FusedAdam and MindSpeed call). ``npu_apply_adam_w`` takes ``beta1_power = beta1 ** (step - 1)`` (it
  multiplies by beta1 itself), ``npu_apply_adam`` takes ``beta1 ** step`` (TensorFlow's ApplyAdam), as Huawei's
  golden functions (msprobe ``bench_functions``) compute them.
"""

from __future__ import annotations

import torch

from ascendify.emulator.fused._check import FLOATS, check, dtype_in, same_device


class NpuFusedAdamW(torch.optim.AdamW):
    """torch_npu.optim.NpuFusedAdamW: ``torch.optim.AdamW``'s update."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)


class NpuFusedAdam(torch.optim.Adam):
    """torch_npu.optim.NpuFusedAdam: ``torch.optim.Adam``'s update."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)


class NpuFusedSGD(torch.optim.SGD):
    """torch_npu.optim.NpuFusedSGD: ``torch.optim.SGD``'s update (``lr`` is required)."""

    def __init__(self, params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False):
        super().__init__(params, lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                         nesterov=nesterov)


class NpuFusedAdadelta(torch.optim.Adadelta):
    """torch_npu.optim.NpuFusedAdadelta: ``torch.optim.Adadelta``'s update."""

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0):
        super().__init__(params, lr=lr, rho=rho, eps=eps, weight_decay=weight_decay)


class NpuFusedRMSprop(torch.optim.RMSprop):
    """torch_npu.optim.NpuFusedRMSprop: ``torch.optim.RMSprop``'s update."""

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False):
        super().__init__(params, lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                         centered=centered)


OPTIMIZERS = {c.__name__: c for c in (NpuFusedAdamW, NpuFusedAdam, NpuFusedSGD, NpuFusedAdadelta, NpuFusedRMSprop)}
for _c in OPTIMIZERS.values():
    _c.__module__ = "torch_npu.optim"


def _out(op: str, out, grad):
    check(out is not None and len(out) == 3, op, "out=(var, m, v) is required: the step updates them in place")
    var, m, v = out
    for arg, t in (("var", var), ("m", m), ("v", v), ("grad", grad)):
        dtype_in(t, FLOATS, op, arg)
        check(t.shape == var.shape, op, f"{arg} of shape {tuple(t.shape)} must have var's shape {tuple(var.shape)}")
    same_device(op, var, m=m, v=v, grad=grad)
    return var, m, v


def _scalar(x) -> float:
    return float(x.item() if isinstance(x, torch.Tensor) else x)


@torch.no_grad()
def npu_apply_adam_w(beta1_power, beta2_power, lr, weight_decay, beta1, beta2, epsilon, grad, max_grad_norm, amsgrad,
                     maximize, *, out=None):
    """One AdamW step into ``out=(var, m, v)``; with ``amsgrad`` the running maximum of v is ``max_grad_norm``
    (updated in place). Returns ``out``."""
    op = "npu_apply_adam_w"
    var, m, v = _out(op, out, grad)
    b1, b2, lr_, wd, eps = (_scalar(x) for x in (beta1, beta2, lr, weight_decay, epsilon))
    b1p = _scalar(beta1_power) * b1
    b2p = _scalar(beta2_power) * b2
    g = -grad if maximize else grad
    var.mul_(1 - lr_ * wd)
    m.mul_(b1).add_(g, alpha=1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    if amsgrad:
        check(max_grad_norm is not None, op, "amsgrad needs max_grad_norm (the running maximum of v)")
        torch.maximum(max_grad_norm, v, out=max_grad_norm)
        second = max_grad_norm
    else:
        second = v
    denom = (second / (1 - b2p)).sqrt_().add_(eps)
    var.addcdiv_(m, denom, value=-lr_ / (1 - b1p))
    return var, m, v


@torch.no_grad()
def npu_apply_adam(beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad, use_locking, use_nesterov, *,
                   out=None):
    """One Adam step (TensorFlow's ApplyAdam) into ``out=(var, m, v)``. Returns ``out``."""
    op = "npu_apply_adam"
    var, m, v = _out(op, out, grad)
    b1, b2, lr_, eps = (_scalar(x) for x in (beta1, beta2, lr, epsilon))
    lr_t = lr_ * (1 - _scalar(beta2_power)) ** 0.5 / (1 - _scalar(beta1_power))
    m.add_((grad - m) * (1 - b1))
    v.add_((grad * grad - v) * (1 - b2))
    num = m * b1 + grad * (1 - b1) if use_nesterov else m
    var.sub_(lr_t * num / (v.sqrt() + eps))
    return var, m, v
