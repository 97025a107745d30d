"""Integer and float8 quantisation: ``npu_quantize``, ``npu_dynamic_quant``, ``npu_dynamic_block_quant``,
``npu_convert_weight_to_int4pack``, ``npu_trans_quant_param``.

Every value is computed in float32 and rounded once, so the results are bit for bit what the documented
formulas give:

- ``npu_quantize``: ``div_mode`` True: ``clamp(round(x / scales) + zero_points)`` (torch's
  ``quantize_per_channel`` along ``axis``, which op-plugin's test takes as the reference); False:
  ``clamp(round(x * scales + zero_points))`` along the last axis (or the second to last for ``axis`` -2);
  ``dtype`` ``torch.qint8`` gives int8, ``torch.quint8`` uint8, ``torch.int32`` int32, ``torch.quint4x2``
  int32 words of eight int4;
- ``npu_dynamic_quant``: per token (row), channel (the -2 axis) or tensor:
  ``scale = max|x * smooth_scales| / DTYPE_MAX``, ``y = round(x * smooth_scales / scale)`` (int8: 127, int4:
  7, float8 e4m3fn 448 / e5m2 57344, or ``dst_type_max``); with ``group_index`` (MoE) row block ``i`` takes
  ``smooth_scales[i]``; an all-zero row gives scale 0 and zeros;
- ``npu_dynamic_block_quant``: per block of ``row_block_size x col_block_size``:
  ``m = min(DTYPE_MAX / max|x|, 1 / min_scale)``, ``y = cast(x * m)``, ``scale = 1 / m``;
- ``npu_convert_weight_to_int4pack``: eight int4 values per int32, the first in bits 0-3;
- ``npu_trans_quant_param``: a float32 scale's top 19 bits (FP19; ``round_mode`` 1 rounds to nearest even
  first) in bits 0-31 of an int64, bit 46 set, the quantisation offset (int9) in bits 37-45.

No backward: inference operators (and the NPU has none).
"""

from __future__ import annotations

import torch

from ascendify.emulator.errors import NotEmulatedError
from ascendify.emulator.fused import _dtypes as D
from ascendify.emulator.fused._check import FLOATS, HALF, check, dtype_in, fail, on_950, same_device

_QUANTIZE_OUT = {"qint8": ("int8", -128, 127, torch.int8), "quint8": ("uint8", 0, 255, torch.uint8),
                 "int32": ("int32", -2**31, 2**31 - 1, torch.int32), "quint4x2": ("int4", -8, 7, torch.int32)}


def _per_axis(t: torch.Tensor, x: torch.Tensor, axis: int) -> torch.Tensor:
    """A 1-D per-channel tensor shaped to broadcast along ``axis`` of ``x`` (other shapes pass through)."""
    if t.dim() != 1 or x.dim() == 0:
        return t
    shape = [1] * x.dim()
    shape[axis] = t.shape[0]
    return t.reshape(shape)


def npu_quantize(self, scales, zero_points, dtype, axis=1, div_mode=True):
    op = "npu_quantize"
    dtype_in(self, FLOATS, op, "input")
    same_device(op, self, scales=scales, zero_points=zero_points)
    fmt = D.name(dtype)
    check(fmt in _QUANTIZE_OUT, op, f"dtype must be torch.qint8, torch.quint8, torch.int32 or torch.quint4x2, "
                                    f"but got {fmt}")
    check(div_mode or fmt in ("qint8", "quint4x2"), op,
          f"dtype must be torch.qint8 or torch.quint4x2 when div_mode is False, but got {fmt}")
    _, lo, hi, out_dtype = _QUANTIZE_OUT[fmt]
    x = self.float()
    if div_mode:
        check(-self.dim() <= axis < self.dim(), op, f"axis {axis} is out of range for a {self.dim()}-D input")
        s = _per_axis(scales.float(), x, axis)
        q = torch.round(x / s)
        if zero_points is not None:
            q = q + _per_axis(zero_points.float(), x, axis)
    else:
        check(axis >= -2, op, f"axis must be >= -2 when div_mode is False, but got {axis}")
        ax = -2 if axis == -2 else -1
        s = _per_axis(scales.float(), x, ax)
        q = x * s
        if zero_points is not None:
            check(zero_points.shape == scales.shape, op, "zero_points must have the shape of scales")
            q = q + _per_axis(zero_points.float(), x, ax)
        q = torch.round(q)
    q = q.clamp(lo, hi)
    if fmt == "quint4x2":
        check(self.shape[-1] % 8 == 0, op, f"the last dim of input ({self.shape[-1]}) must be a multiple of 8 "
                                           "for torch.quint4x2")
        return D.pack_int4(q)
    return q.to(out_dtype)


def _dst(op: str, code, allowed: tuple[str, ...], default: str = "int8") -> str:
    fmt = "int4" if D.name(code, default) == "quint4x2" else D.name(code, default)
    if fmt == "hifloat8":
        raise NotEmulatedError(f"{op}: the hifloat8 target is not emulated by ascendify's emulated npu device")
    check(fmt in allowed, op, f"dst_type must be one of {', '.join(allowed)}, but got {fmt}")
    return fmt


def _target_on_chip(op: str, x: torch.Tensor, fmt: str) -> None:
    if fmt.startswith("float8"):
        on_950(op, x, f"the {fmt} target")


def _cast(op: str, y: torch.Tensor, fmt: str, round_mode: str = "rint") -> torch.Tensor:
    if fmt in ("int8", "int4"):
        return D.to_int(op, y, fmt, round_mode)
    return D.to_fp8(op, y, fmt, round_mode)


def npu_dynamic_quant(input, *, smooth_scales=None, group_index=None, dst_type=None, quant_mode="pertoken",
                      dst_type_max=0.0):
    op = "npu_dynamic_quant"
    dtype_in(input, HALF, op, "x")
    same_device(op, input, smooth_scales=smooth_scales, group_index=group_index)
    check(input.dim() > 1, op, f"the dim of x must be greater than 1, but got {input.dim()}")
    fmt = _dst(op, dst_type, ("int8", "int4", "float8_e4m3fn", "float8_e5m2"))
    _target_on_chip(op, input, fmt)
    check(quant_mode in ("pertoken", "perchannel", "pertensor"), op,
          f"quant_mode must be pertoken, perchannel or pertensor, but got '{quant_mode}'")
    h = input.shape[-1]
    if fmt == "int4":
        check(h % 8 == 0, op, f"the last dim of x ({h}) must be a multiple of 8 for int4 (torch.quint4x2)")
    x = input.float()
    if smooth_scales is not None:
        check(smooth_scales.dtype == input.dtype, op,
              f"the dtype of smooth_scales ({smooth_scales.dtype}) must equal that of x ({input.dtype})")
        if group_index is None:
            check(smooth_scales.dim() == 1 and smooth_scales.shape[0] == h, op,
                  f"smooth_scales must be 1-D of x's last dim ({h}), but got {tuple(smooth_scales.shape)}")
            x = x * smooth_scales.float()
        else:
            check(group_index.dtype == torch.int32, op, f"the dtype of group_index must be int32, got "
                                                        f"{group_index.dtype}")
            check(smooth_scales.dim() == 2 and smooth_scales.shape[1] == h
                  and group_index.dim() == 1 and group_index.shape[0] == smooth_scales.shape[0], op,
                  "with group_index, smooth_scales must be 2-D [groups, H] and group_index 1-D [groups]")
            ends = [int(e) for e in group_index.tolist()]
            rows = x.reshape(-1, h)
            check(all(b >= a for a, b in zip([0, *ends], ends, strict=False)) and ends[-1] == rows.shape[0], op,
                  f"group_index must be non-decreasing and end at the number of rows ({rows.shape[0]}), got {ends}")
            counts = torch.tensor([b - a for a, b in zip([0, *ends[:-1]], ends, strict=True)], device=x.device)
            rows = rows * smooth_scales.float().repeat_interleave(counts, 0)
            x = rows.reshape(x.shape)
    qmax = float(dst_type_max) if dst_type_max else D.FMAX[fmt]
    if quant_mode == "pertoken":
        amax = x.abs().amax(-1, keepdim=True)
    elif quant_mode == "perchannel":
        amax = x.abs().amax(-2, keepdim=True)
    else:
        amax = x.abs().amax().reshape([1] * x.dim())
    scale = amax / qmax
    y = torch.where(scale > 0, x / torch.where(scale > 0, scale, 1.0), torch.zeros_like(x))
    y = _cast(op, y, fmt)
    if quant_mode == "pertoken":
        scale = scale.squeeze(-1)
    elif quant_mode == "perchannel":
        scale = scale.squeeze(-2)
    else:
        scale = scale.reshape(1)
    if fmt == "int4":
        return D.pack_int4(y), scale
    return y, scale


def npu_dynamic_block_quant(x, *, min_scale=0.0, round_mode="rint", dst_type=1, row_block_size=1,
                            col_block_size=128, dst_type_max=0.0):
    op = "npu_dynamic_block_quant"
    dtype_in(x, HALF, op, "x")
    check(x.dim() in (2, 3), op, f"x must be 2 or 3 dimensional, but got {x.dim()}")
    check(min_scale >= 0, op, f"min_scale must be >= 0, but got {min_scale}")
    check(row_block_size > 0 and col_block_size > 0, op, "row_block_size and col_block_size must be positive")
    fmt = _dst(op, dst_type, ("int8", "float8_e4m3fn", "float8_e5m2"))
    _target_on_chip(op, x, fmt)
    qmax = float(dst_type_max) if dst_type_max else D.FMAX[fmt]
    xf = x.float()
    r, c = xf.shape[-2], xf.shape[-1]
    rb, cb = -(-r // row_block_size), -(-c // col_block_size)
    pad = torch.nn.functional.pad(xf.abs(), (0, cb * col_block_size - c, 0, rb * row_block_size - r))
    amax = pad.reshape(*xf.shape[:-2], rb, row_block_size, cb, col_block_size).amax((-3, -1))
    mult = qmax / amax  # inf where amax is 0
    if min_scale > 0:
        mult = torch.minimum(mult, torch.full_like(mult, 1.0 / min_scale))
    m = mult.repeat_interleave(row_block_size, -2)[..., :r, :].repeat_interleave(col_block_size, -1)[..., :c]
    y = torch.where(torch.isinf(m), torch.zeros_like(xf), xf * torch.where(torch.isinf(m), 1.0, m))
    return _cast(op, y, fmt, round_mode), 1.0 / mult


def npu_convert_weight_to_int4pack(weight, inner_k_tiles=0):
    op = "npu_convert_weight_to_int4pack"
    check(weight.dtype == torch.int32, op, f"the dtype of weight must be int32, but got {weight.dtype}")
    check(weight.dim() == 2, op, f"weight must be 2 dimensional, but got {weight.dim()}")
    check(weight.is_contiguous(), op, "weight must be contiguous")
    check(weight.shape[-1] % 8 == 0, op, f"the last dim of weight ({weight.shape[-1]}) must be a multiple of 8")
    if weight.numel():
        lo, hi = int(weight.min()), int(weight.max())
        check(-8 <= lo and hi <= 7, op, f"the values of weight must be in the int4 range [-8, 7], got [{lo}, {hi}]")
    return D.pack_int4(weight)


def npu_trans_quant_param(scale, offset=None, round_mode=0):
    op = "npu_trans_quant_param"
    dtype_in(scale, (torch.float32,), op, "scale")
    check(round_mode in (0, 1), op, f"round_mode must be 0 or 1, but got {round_mode}")
    bits = scale.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    if round_mode == 1:  # R_INT: round the mantissa to FP19 (nearest, ties to even) before truncating
        bits = bits + 0xFFF + ((bits >> 13) & 1)
    out = (bits & 0xFFFFE000) | (1 << 46)
    if offset is not None:
        dtype_in(offset, (torch.float32,), op, "offset")
        o = torch.round(offset).clamp(-256, 255).to(torch.int64) & 0x1FF
        out = (out & 0x4000FFFFFFFF) | (o << 37)
    return out


def dequant(scale: torch.Tensor) -> torch.Tensor:
    """float32 scales of a float32 / bfloat16 / int64 (``npu_trans_quant_param``) scale tensor."""
    if scale.dtype == torch.int64:
        return D.int64_scale(scale)
    return scale.float()


def fail_dtype(op: str, arg: str, t: torch.Tensor, allowed: str):
    fail(op, f"the dtype of {arg} must be {allowed}, but got {t.dtype}")


def npu_kronecker_quant(x, kronecker_p1, kronecker_p2, clip_ratio=None, dst_dtype=None, dst_type_max=None):
    """FlatQuant (CANN aclnnFlatQuant): ``x'' = kronecker_p1 @ (x @ kronecker_p2)`` per slice k of x [K, M, N]
    (float32), ``quant_scale[k] = max|x''[k]| / (7 / clip_ratio)``, ``out = x'' / quant_scale`` rounded (half to
    even) and saturated to int4, eight per int32 word ([K, M, N / 8]). ``(out, quant_scale float32 [K])``.
    op-plugin's (skipped) test truncates instead of rounding; the CANN page names no rounding mode."""
    op = "npu_kronecker_quant"
    dtype_in(x, HALF, op, "x")
    same_device(op, x, kronecker_p1=kronecker_p1, kronecker_p2=kronecker_p2)
    check(x.dim() == 3, op, f"x must be 3 dimensional [K, M, N], but got {x.dim()}")
    k, m, n = x.shape
    check(tuple(kronecker_p1.shape) == (m, m) and tuple(kronecker_p2.shape) == (n, n), op,
          f"kronecker_p1 must be [{m}, {m}] and kronecker_p2 [{n}, {n}]")
    check(kronecker_p1.dtype == x.dtype and kronecker_p2.dtype == x.dtype, op, "kronecker_p1/p2 must have x's dtype")
    fmt = "int4" if dst_dtype is None else D.name(dst_dtype)
    check(fmt in ("int4", "int32"), op, f"dst_dtype other than int4/int32 (float4 per-group) is not emulated, "
                                        f"got {fmt}")
    check(n % 8 == 0, op, f"N ({n}) must be a multiple of 8 for int32 output")
    clip = 1.0 if clip_ratio is None else float(clip_ratio)
    check(0 < clip <= 1, op, f"clip_ratio must be in (0, 1], but got {clip}")
    qmax = float(dst_type_max) if dst_type_max else 7.0
    y = kronecker_p1.float() @ (x.float() @ kronecker_p2.float())
    scale = y.abs().amax((1, 2)) / (qmax / clip)
    q = torch.where(scale[:, None, None] > 0, y / scale[:, None, None].clamp_min(1e-45), torch.zeros_like(y))
    return D.pack_int4(torch.round(q).clamp(-8, 7)), scale
