"""``npu_rms_norm`` and ``npu_add_rms_norm``: RMSNorm over the trailing ``gamma.dim()`` axes.

``rstd = rsqrt(mean(x^2) + eps)``, ``y = x * rstd * gamma``, accumulated in float32 (as the kernel does) and
returned in x's dtype; ``rstd`` is float32 with the normalised axes kept as size 1. Gradients reach x and gamma
(and x1, x2) through autograd; ``rstd`` carries none, like the NPU's, whose backward takes only dy.
"""

from __future__ import annotations

import torch

from ascendify.emulator.fused._check import FLOATS, check, chip, dtype_in, fail, on_npu, same_device

# (x dtype, gamma dtype) pairs each product family takes (torch_npu-npu_rms_norm.md)
_PAIRS_A2 = {(torch.float16, torch.float32), (torch.bfloat16, torch.float32), (torch.float16, torch.float16),
             (torch.bfloat16, torch.bfloat16), (torch.float32, torch.float32)}
_PAIRS_OLD = {(torch.float16, torch.float16), (torch.float32, torch.float32)}


def _compute(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _rms(op: str, x: torch.Tensor, gamma: torch.Tensor, epsilon: float):
    nd = gamma.dim()
    check(0 < nd < x.dim() or (nd == x.dim() == 1), op,
          f"gamma must have fewer dims than self ({x.dim()}), but got {nd}")
    check(tuple(gamma.shape) == tuple(x.shape[x.dim() - nd:]), op,
          f"the shape of gamma {tuple(gamma.shape)} must equal the last {nd} dim(s) of self {tuple(x.shape)}")
    ct = _compute(x)
    xf = x.to(ct)
    dims = tuple(range(x.dim() - nd, x.dim()))
    rstd = torch.rsqrt(xf.pow(2).mean(dims, keepdim=True) + epsilon)
    y = (xf * rstd * gamma.to(ct)).to(x.dtype)
    return y, rstd.detach().to(torch.float32 if ct == torch.float32 else ct)


def npu_rms_norm(self, gamma, epsilon=1e-06):
    op = "npu_rms_norm"
    dtype_in(self, FLOATS, op, "self")
    dtype_in(gamma, FLOATS, op, "gamma")
    same_device(op, self, gamma=gamma)
    check(2 <= self.dim() <= 8 or not on_npu(self), op, f"self must have 2 to 8 dims, but got {self.dim()}")
    if on_npu(self):
        pairs = _PAIRS_OLD if chip() in ("training", "inference") else _PAIRS_A2
        if (self.dtype, gamma.dtype) not in pairs:
            fail(op, f"the dtype combination of self ({self.dtype}) and gamma ({gamma.dtype}) is not supported on "
                     f"this product (supported: {sorted((str(a), str(b)) for a, b in pairs)})")
        if chip() == "inference":
            check(self.shape[-1] * self.element_size() >= 32, op,
                  "the last dim of self and gamma must be at least 32 bytes on Atlas inference products")
    return _rms(op, self, gamma, float(epsilon))


def npu_add_rms_norm(x1, x2, gamma, epsilon=1e-06):
    """``(y, rstd, x)`` with ``x = x1 + x2`` (x1's dtype) and ``y`` the RMSNorm of the float32 sum."""
    op = "npu_add_rms_norm"
    for arg, t in (("x1", x1), ("x2", x2), ("gamma", gamma)):
        dtype_in(t, FLOATS, op, arg)
        check(t.numel() > 0, op, f"{arg} must not be an empty tensor")
    same_device(op, x1, x2=x2, gamma=gamma)
    check(x2.dtype == x1.dtype and gamma.dtype == x1.dtype, op,
          f"x1, x2 and gamma must have the same dtype, but got {x1.dtype}, {x2.dtype} and {gamma.dtype}")
    check(x1.shape == x2.shape, op, f"x1 {tuple(x1.shape)} and x2 {tuple(x2.shape)} must have the same shape")
    check(1 <= x1.dim() <= 8, op, f"x1 must have 1 to 8 dims, but got {x1.dim()}")
    if on_npu(x1) and chip() == "inference":
        check(x1.dtype != torch.bfloat16, op, "bfloat16 is not supported on Atlas inference products")
    ct = _compute(x1)
    s = x1.to(ct) + x2.to(ct)
    y, rstd = _rms(op, s, gamma, float(epsilon))
    return y.to(x1.dtype), rstd, s.to(x1.dtype)
