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


def npu_rms_norm_backward(dy, self, gamma, rstd):
    """``(dx, dgamma)`` of ``y = x * rstd * gamma`` over the trailing ``gamma.dim()`` axes:
    ``dx = rstd * (dy * gamma - x * rstd**2 * mean(dy * gamma * x))``, ``dgamma = sum(dy * x * rstd)`` over the
    leading axes (float32; dx in x's dtype, dgamma float32)."""
    op = "npu_rms_norm_backward"
    dtype_in(self, FLOATS, op, "self")
    dtype_in(dy, FLOATS, op, "dy")
    dtype_in(gamma, FLOATS, op, "gamma")
    same_device(op, dy, self=self, gamma=gamma, rstd=rstd)
    check(dy.shape == self.shape, op, f"dy {tuple(dy.shape)} must have the shape of self {tuple(self.shape)}")
    nd = gamma.dim()
    check(tuple(gamma.shape) == tuple(self.shape[self.dim() - nd:]), op,
          f"the shape of gamma {tuple(gamma.shape)} must equal the last {nd} dim(s) of self {tuple(self.shape)}")
    ct = _compute(self)
    x, g, w, r = self.to(ct), dy.to(ct), gamma.to(ct), rstd.to(ct)
    dims = tuple(range(self.dim() - nd, self.dim()))
    gw = g * w
    dx = r * (gw - x * r.pow(2) * (gw * x).mean(dims, keepdim=True))
    dgamma = (g * x * r).sum(tuple(range(self.dim() - nd)))
    return dx.to(self.dtype), dgamma.to(torch.float32 if ct == torch.float32 else ct)


def _add_rms(op, x1, x2, gamma, beta, epsilon):
    for arg, t in (("x1", x1), ("x2", x2), ("gamma", gamma)):
        dtype_in(t, FLOATS, op, arg)
    same_device(op, x1, x2=x2, gamma=gamma, beta=beta)
    check(x1.shape == x2.shape, op, f"x1 {tuple(x1.shape)} and x2 {tuple(x2.shape)} must have the same shape")
    check(x2.dtype == x1.dtype and gamma.dtype == x1.dtype, op, "x1, x2 and gamma must have the same dtype")
    s = x1.float() + x2.float()
    y, _ = _rms(op, s, gamma, float(epsilon))
    if beta is not None:
        y = y + beta.float()
    return y, s.to(x1.dtype)


def npu_add_rms_norm_quant(x1, x2, gamma, scales1, zero_points1, beta=None, scales2=None, zero_points2=None, *,
                           axis=-1, epsilon=1e-06, div_mode=True, dst_type=None):
    """``(y1, y2, x)``: ``x = x1 + x2``, ``y = rmsnorm(x) * gamma + beta`` (float32), quantised to int8 with
    ``round(y / scales + zero_points)`` (``div_mode`` True) or ``round(y * scales + zero_points)``; ``y2`` only
    with ``scales2`` (else zeros)."""
    op = "npu_add_rms_norm_quant"
    check(axis == -1, op, f"axis should be -1, but got {axis}.")
    from ascendify.emulator.fused import _dtypes

    fmt = _dtypes.name(dst_type, "int8")
    check(fmt == "int8", op, f"dst_type other than int8 ({fmt}) is not emulated")
    y, x = _add_rms(op, x1, x2, gamma, beta, epsilon)

    def q(scales, zero_points):
        v = y / scales.float() if div_mode else y * scales.float()
        if zero_points is not None:
            v = v + zero_points.float()
        return torch.round(v).clamp(-128, 127).to(torch.int8)

    y1 = q(scales1, zero_points1)
    y2 = q(scales2, zero_points2) if scales2 is not None else torch.zeros_like(y1)
    return y1, y2, x


def npu_add_rms_norm_dynamic_quant(x1, x2, gamma, *, smooth_scale1=None, smooth_scale2=None, beta=None,
                                   epsilon=1e-6, output_mask=None, y_dtype=None):
    """``(y1, y2, x, scale1, scale2)``: ``x = x1 + x2``, ``y = rmsnorm(x) * gamma + beta``; per row
    ``scale_i = max|y * smooth_i| / 127``, ``y_i = round(y * smooth_i / scale_i)`` (int8, or int4 packed eight per
    int32 for ``torch.quint4x2``: / 7). Which of y1, y2 come out follows ``output_mask``, else y1 always and y2
    when both smooth scales are given; an output not computed is an empty tensor."""
    op = "npu_add_rms_norm_dynamic_quant"
    from ascendify.emulator.fused import _dtypes

    fmt = "int4" if _dtypes.name(y_dtype, "int8") == "quint4x2" else _dtypes.name(y_dtype, "int8")
    check(fmt in ("int8", "int4"), op, f"y_dtype other than int8 or quint4x2 ({fmt}) is not emulated")
    if output_mask is None:
        out1, out2 = True, smooth_scale1 is not None and smooth_scale2 is not None
    else:
        out1, out2 = bool(output_mask[0]), bool(output_mask[1])
        check(out1 or out2, op, "When the output_mask is not empty, at least one of y1 and y2 must be output.")
    y, x = _add_rms(op, x1, x2, gamma, beta, epsilon)
    qmax = 7.0 if fmt == "int4" else 127.0

    def q(smooth):
        v = y * smooth.float() if smooth is not None else y
        scale = v.abs().amax(-1, keepdim=True) / qmax
        r = torch.where(scale > 0, v / torch.where(scale > 0, scale, 1.0), torch.zeros_like(v))
        r = _dtypes.to_int(op, r, fmt)
        return (_dtypes.pack_int4(r) if fmt == "int4" else r), scale.squeeze(-1)

    empty_y = torch.empty(0, dtype=torch.int32 if fmt == "int4" else torch.int8, device=x1.device)
    empty_s = torch.empty(0, dtype=torch.float32, device=x1.device)
    y1, s1 = q(smooth_scale1) if out1 else (empty_y, empty_s)
    y2, s2 = q(smooth_scale2) if out2 else (empty_y, empty_s)
    return y1, y2, x, s1, s2


def _rms_mx(op, xf, gamma, beta, epsilon, scale_alg, round_mode, dst_type):
    """(y MX-quantised along the last axis, mxscale, rstd float32) of ``rmsnorm(xf) * gamma + beta`` (xf float32)."""
    from ascendify.emulator.fused import _dtypes
    from ascendify.emulator.fused.mx import encode, paired, quantize_along, target

    fmt = target(op, dst_type)
    y, rstd = _rms(op, xf, gamma, float(epsilon))
    if beta is not None:
        y = y + beta.float()
    v, e = quantize_along(op, y, xf.dim() - 1, 32, fmt, scale_alg, 0.0, round_mode)
    return encode(op, v, fmt, round_mode), paired(_dtypes.e8m0_bits(e), xf.dim() - 1), rstd


def npu_rms_norm_dynamic_mx_quant(x, gamma, *, beta=None, epsilon=1e-06, scale_alg=0, round_mode="rint",
                                  dst_type=296):
    """``(y, mxscale, rstd)``: ``rmsnorm(x) * gamma + beta`` (float32) MX-quantised along the last axis in
    blocks of 32, as :func:`ascendify.emulator.fused.mx.npu_dynamic_mx_quant` does. Ascend 950."""
    op = "npu_rms_norm_dynamic_mx_quant"
    dtype_in(x, (torch.float16, torch.bfloat16), op, "x")
    same_device(op, x, gamma=gamma, beta=beta)
    return _rms_mx(op, x.float(), gamma, beta, epsilon, scale_alg, round_mode, dst_type)


def npu_add_rms_norm_dynamic_mx_quant(x1, x2, gamma, *, beta=None, epsilon=1e-06, scale_alg=0, round_mode="rint",
                                      dst_type=296):
    """``(y, x, mxscale, rstd)``: ``x = x1 + x2`` (x1's dtype), then as :func:`npu_rms_norm_dynamic_mx_quant` on
    the float32 sum (CANN aclnnAddRmsNormDynamicMxQuant). Ascend 950."""
    op = "npu_add_rms_norm_dynamic_mx_quant"
    dtype_in(x1, (torch.float16, torch.bfloat16), op, "x1")
    same_device(op, x1, x2=x2, gamma=gamma, beta=beta)
    check(x1.shape == x2.shape and x1.dtype == x2.dtype, op, "x1 and x2 must have the same shape and dtype")
    s = x1.float() + x2.float()
    y, mxscale, rstd = _rms_mx(op, s, gamma, beta, epsilon, scale_alg, round_mode, dst_type)
    return y, s.to(x1.dtype), mxscale, rstd
