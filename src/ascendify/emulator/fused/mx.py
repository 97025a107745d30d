"""MX (microscaling) quantisation for MXFP8 / MXFP4 training on Ascend 950: ``npu_dynamic_mx_quant``,
``npu_dynamic_mx_quant_with_dual_axis``, ``npu_grouped_dynamic_mx_quant``, ``npu_dynamic_block_mx_quant``.

Each block of 32 values along an axis (``block_size``; a 32x32 tile for the block form) shares one scale
``2**shared_exp`` (CANN ``aclnnDynamicMxQuant``):

- ``scale_alg`` 0 (OCP MX): ``shared_exp = floor(log2(max|V|)) - emax`` (emax 8 for float8_e4m3fn, 15 for
  e5m2, 2 for float4_e2m1, 0 for float4_e1m2);
- ``scale_alg`` 1 (float8 only): ``shared_exp = ceil(log2(max|V| / DTYPE_MAX))`` (``dst_type_max`` replaces
  the format's largest value when non-zero);
- ``P = cast(V / 2**shared_exp)``, round-to-nearest-even and saturating (float4 also ``floor``/``round``...).

The scales come back as their E8M0 bits in ``uint8`` (``2**e`` as ``e + 127``; an all-zero block gives 0),
with the blocks of the quantised axis paired: that axis has ``ceil(blocks / 2)`` entries and a trailing axis of
2 holds the pair (an odd count pads with 0). float8 results are torch's ``float8_e4m3fn`` / ``float8_e5m2``;
float4 results are two 4-bit codes per ``uint8``, the first element in the low nibble. Every value is exact
(power-of-two scaling, one rounding). No backward (the NPU has none).
"""

from __future__ import annotations

import torch

from ascendify.emulator.errors import NotEmulatedError
from ascendify.emulator.fused import _dtypes as D
from ascendify.emulator.fused._check import HALF, check, dtype_in, same_device

MX_TARGETS = ("float8_e4m3fn", "float8_e5m2", "float4_e2m1", "float4_e1m2")


def target(op: str, dst_type) -> str:
    fmt = D.name(dst_type)
    if fmt == "hifloat8":
        raise NotEmulatedError(f"{op}: the hifloat8 target is not emulated by ascendify's emulated npu device")
    check(fmt in MX_TARGETS, op, f"dst_type must be float8_e4m3fn, float8_e5m2, float4_e2m1 or float4_e1m2, "
                                 f"but got {fmt}")
    return fmt


def shared_exponent(op: str, amax: torch.Tensor, fmt: str, scale_alg, dst_type_max) -> torch.Tensor:
    """int32 shared exponents of blocks whose largest magnitude is ``amax`` (float32), clamped to [-127, 127]."""
    check(scale_alg in (0, 1, 2), op, f"scale_alg must be 0, 1 or 2, but got {scale_alg}")
    if scale_alg == 2 or (scale_alg == 0 and dst_type_max):
        raise NotEmulatedError(f"{op}: scale_alg 2 / dst_type_max with scale_alg 0 (the float4 variants) are "
                               "not emulated by ascendify's emulated npu device")
    safe = torch.where(amax > 0, amax, torch.ones_like(amax))
    if scale_alg == 0:
        e = D.floor_log2(safe) - D.EMAX[fmt]
    else:
        check(fmt.startswith("float8"), op, "scale_alg 1 applies to float8 targets only")
        s = safe / (float(dst_type_max) if dst_type_max else D.FMAX[fmt])
        m, ex = torch.frexp(s)  # s = m * 2**ex, m in [0.5, 1)
        e = ex.to(torch.int32) - (m == 0.5).to(torch.int32)  # ceil(log2 s)
    e = torch.where(amax > 0, e, torch.full_like(e, -127))
    return e.clamp(-127, 127)


def encode(op: str, v: torch.Tensor, fmt: str, round_mode: str) -> torch.Tensor:
    """Scaled values as the target format: float8 tensors, or float4 codes packed two per uint8."""
    if fmt.startswith("float8"):
        return D.to_fp8(op, v, fmt, round_mode)
    return D.pack_nibbles(D.to_fp4_codes(op, v, fmt, round_mode))


def quantize_along(op, x: torch.Tensor, axis: int, block: int, fmt: str, scale_alg, dst_type_max, round_mode):
    """(y before encoding, float32; shared exponents with ``axis`` counted in blocks)."""
    n = x.shape[axis]
    nb = -(-n // block)
    xf = x.float().movedim(axis, -1)
    pad = torch.nn.functional.pad(xf.abs(), (0, nb * block - n))
    amax = pad.reshape(*xf.shape[:-1], nb, block).amax(-1)
    e = shared_exponent(op, amax, fmt, scale_alg, dst_type_max)
    v = torch.ldexp(xf, -e.repeat_interleave(block, -1)[..., :n])
    return v.movedim(-1, axis), e.movedim(-1, axis)


def paired(bits: torch.Tensor, axis: int) -> torch.Tensor:
    """E8M0 bits with ``axis`` in blocks, as [..., ceil(blocks / 2), ..., 2] (an odd count padded with 0)."""
    b = bits.movedim(axis, -1)
    if b.shape[-1] % 2:
        b = torch.nn.functional.pad(b, (0, 1))
    b = b.reshape(*b.shape[:-1], -1, 2)  # [..., pairs, 2]
    return b.movedim(-2, axis if axis >= 0 else axis - 1).contiguous()


def scales_of(mxscale: torch.Tensor, axis: int, blocks: int) -> torch.Tensor:
    """float32 block scales from a paired E8M0 scale tensor (the inverse of :func:`paired`)."""
    s = D.e8m0_value(mxscale)
    a = axis if axis >= 0 else axis - 1
    s = s.movedim(a, -2).flatten(-2)[..., :blocks]
    return s.movedim(-1, axis)


def _check_input(op, x, fmt, round_mode):
    dtype_in(x, HALF, op, "x")
    check(x.dim() >= 1, op, "x must have at least 1 dim")
    if fmt.startswith("float8"):
        check(round_mode == "rint", op, f"round_mode must be 'rint' for {fmt}, but got '{round_mode}'")
    else:
        check(round_mode in ("rint", "floor", "round"), op,
              f"round_mode must be rint, floor or round for {fmt}, but got '{round_mode}'")
        check(x.shape[-1] % 2 == 0, op, f"the last dim of x ({x.shape[-1]}) must be even for a float4 target")


def npu_dynamic_mx_quant(input, *, axis=-1, round_mode="rint", dst_type=296, block_size=32, scale_alg=0,
                         dst_type_max=0.0, max_low_bound=0.0):
    op = "npu_dynamic_mx_quant"
    fmt = target(op, dst_type)
    _check_input(op, input, fmt, round_mode)
    d = input.dim()
    check(-d <= axis < d, op, f"Parameter axis is out of input dimension range [{-d}, {d - 1}]")
    check(block_size > 0 and block_size % 32 == 0 and block_size <= 1024, op,
          f"Parameter block_size must be divisible by 32 and no greater than 1024, greater than 0, got {block_size}")
    if max_low_bound:
        raise NotEmulatedError(f"{op}: max_low_bound is not emulated by ascendify's emulated npu device")
    ax = axis % d
    v, e = quantize_along(op, input, ax, block_size, fmt, scale_alg, dst_type_max, round_mode)
    return encode(op, v, fmt, round_mode), paired(D.e8m0_bits(e), ax)


def npu_dynamic_mx_quant_with_dual_axis(input, *, round_mode="rint", dst_type=296, scale_alg=0, dst_type_max=0.0):
    """The -1 axis and the -2 axis at once: ``(y1, mxscale1, y2, mxscale2)``."""
    op = "npu_dynamic_mx_quant_with_dual_axis"
    fmt = target(op, dst_type)
    _check_input(op, input, fmt, round_mode)
    check(input.dim() >= 2, op, f"x must have at least 2 dims, but got {input.dim()}")
    d = input.dim()
    v1, e1 = quantize_along(op, input, d - 1, 32, fmt, scale_alg, dst_type_max, round_mode)
    v2, e2 = quantize_along(op, input, d - 2, 32, fmt, scale_alg, dst_type_max, round_mode)
    return (encode(op, v1, fmt, round_mode), paired(D.e8m0_bits(e1), d - 1),
            encode(op, v2, fmt, round_mode), paired(D.e8m0_bits(e2), d - 2))


def npu_grouped_dynamic_mx_quant(x, group_index, *, round_mode="rint", dst_type=23, blocksize=32, scale_alg=0,
                                 dst_type_max=0.0):
    """Along dim 0 of a 2-D ``x`` within each group of rows (``group_index``: cumulative ends); each group's
    scales are padded to an even number of blocks and the groups' scales follow one another
    (``mxscale`` [M // 64 + groups, N, 2], unused rows 0)."""
    op = "npu_grouped_dynamic_mx_quant"
    fmt = target(op, dst_type)
    _check_input(op, x, fmt, round_mode)
    same_device(op, x, group_index=group_index)
    check(x.dim() == 2, op, f"Input x must be 2-dimensional, got dimNum {x.dim()}")
    check(group_index.dim() == 1, op, f"Input group_index must be 1-dimensional, got dimNum {group_index.dim()}")
    check(group_index.dtype in (torch.int32, torch.int64), op,
          f"the dtype of group_index must be int32 or int64, but got {group_index.dtype}")
    check(blocksize == 32, op, f"Parameter blocksize only supports 32, got {blocksize}")
    ends = [int(e) for e in group_index.tolist()]
    m, n = x.shape
    check(all(b >= a for a, b in zip([0, *ends], ends, strict=False)) and (not ends or ends[-1] <= m), op,
          f"group_index must be non-decreasing cumulative ends within the {m} rows, got {ends}")
    rows = m // 64 + len(ends)
    scale = torch.zeros(rows, n, 2, dtype=torch.uint8, device=x.device)
    ys = []
    start = at = 0
    for end in ends:
        if end > start:
            v, e = quantize_along(op, x[start:end], 0, 32, fmt, scale_alg, dst_type_max, round_mode)
            ys.append(v)
            p = paired(D.e8m0_bits(e), 0)
            scale[at:at + p.shape[0]] = p
            at += p.shape[0]
        start = end
    if start < m:
        ys.append(x[start:].float() * 0)
    y = torch.cat(ys, 0) if ys else x.float() * 0
    return encode(op, y, fmt, round_mode), scale


def npu_dynamic_block_mx_quant(input, *, round_mode="rint", dst_type=296, scale_alg=0, dst_type_max=0.0):
    """32x32 tiles of the last two axes share one scale: ``(y, scale1, scale2)``, the tile scales laid out as
    ``npu_dynamic_mx_quant`` along -1 (one per row) and along -2 (one per column)."""
    op = "npu_dynamic_block_mx_quant"
    fmt = target(op, dst_type)
    _check_input(op, input, fmt, round_mode)
    check(input.dim() >= 2, op, f"x must have at least 2 dims, but got {input.dim()}")
    xf = input.float()
    r, c = xf.shape[-2:]
    rb, cb = -(-r // 32), -(-c // 32)
    pad = torch.nn.functional.pad(xf.abs(), (0, cb * 32 - c, 0, rb * 32 - r))
    amax = pad.reshape(*xf.shape[:-2], rb, 32, cb, 32).amax((-3, -1))  # [..., rb, cb]
    e = shared_exponent(op, amax, fmt, scale_alg, dst_type_max)
    full = e.repeat_interleave(32, -2)[..., :r, :].repeat_interleave(32, -1)[..., :c]
    y = encode(op, torch.ldexp(xf, -full), fmt, round_mode)
    bits = D.e8m0_bits(e)
    d = input.dim()
    scale1 = paired(bits.repeat_interleave(32, -2)[..., :r, :], d - 1)  # per row, blocks along -1
    scale2 = paired(bits.repeat_interleave(32, -1)[..., :c], d - 2)  # per column, blocks along -2
    return y, scale1, scale2
