"""torch_npu's dtype codes and the low-precision number formats its quantisation operators produce.

torch_npu's operators take a target dtype as an ``int``: a ``torch.dtype`` (the dispatcher turns it into its
ScalarType number: ``torch.int8`` 1, ``torch.float8_e5m2`` 23...) or one of torch_npu's own codes
(``torch_npu.float8_e8m0fnu`` 293...: ACL's ``aclDataType`` plus 256, Ascend/pytorch
``torch_npu/csrc/custom_dtype/Init.h``) for formats torch lacks or that torch_npu stores in ``uint8``
(``hifloat8``, ``float4_e2m1fn_x2``, ``int4``). :func:`name` turns either spelling into one name.

Encoders (all exact, round-to-nearest-even unless ``round_mode`` says otherwise, saturating at the format's
largest finite value as the NPU's conversions do):

- :func:`to_fp8`: float8_e4m3fn / float8_e5m2 (torch's dtypes);
- :func:`to_fp4_codes` / :func:`pack_nibbles`: float4_e2m1 and float4_e1m2 as 4-bit codes, two per ``uint8``
  (the first element in the low nibble);
- :func:`e8m0_bits`: the MX block scale 2**e as its biased exponent (``uint8``, e + 127);
- :func:`pack_int4` / :func:`unpack_int4`: eight int4 values per ``int32``, the first in the lowest bits.
"""

from __future__ import annotations

import torch

from ascendify.emulator.fused._check import fail

#: torch ScalarType numbers (what the dispatcher passes for a torch.dtype) -> name
_SCALAR = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32", 7: "float64",
           11: "bool", 12: "qint8", 13: "quint8", 14: "qint32", 15: "bfloat16", 16: "quint4x2", 21: "bits8",
           23: "float8_e5m2", 24: "float8_e4m3fn", 44: "float8_e8m0fnu", 45: "float4_e2m1"}
#: torch_npu's custom codes (aclDataType + 256) -> name
NPU_CODES = {"float32": 256, "float16": 257, "int8": 258, "int32": 259, "uint8": 260, "int16": 262,
             "uint16": 263, "uint32": 264, "int64": 265, "uint64": 266, "float64": 267, "bool": 268,
             "string": 269, "complex64": 272, "complex128": 273, "bfloat16": 283, "int4": 285, "uint1": 286,
             "complex32": 289, "hifloat8": 290, "float8_e5m2": 291, "float8_e4m3fn": 292, "float8_e8m0fnu": 293,
             "float6_e3m2": 294, "float6_e2m3": 295, "float4_e2m1fn_x2": 296, "float4_e1m2fn_x2": 297}
_CUSTOM = {v: k.replace("fn_x2", "") for k, v in NPU_CODES.items()}
_BY_DTYPE = {getattr(torch, n): n for n in _SCALAR.values() if hasattr(torch, n)}
_BY_DTYPE[torch.float4_e2m1fn_x2] = "float4_e2m1"

TORCH = {"int8": torch.int8, "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8,
         "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
         "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}

#: largest finite value, and the exponent of the largest normal (MX "emax")
FMAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0, "float4_e2m1": 6.0, "float4_e1m2": 1.75,
        "hifloat8": 32768.0, "int8": 127.0, "int4": 7.0}
EMAX = {"float8_e4m3fn": 8, "float8_e5m2": 15, "float4_e2m1": 2, "float4_e1m2": 0}


def name(code, default: str | None = None) -> str:
    """The format name of a dtype argument: a ``torch.dtype``, a ScalarType number or a torch_npu code."""
    if code is None:
        if default is None:
            raise TypeError("a dtype is required")
        return default
    if isinstance(code, torch.dtype):
        return _BY_DTYPE.get(code, str(code).removeprefix("torch."))
    code = int(code)
    if code in _CUSTOM:
        return _CUSTOM[code]
    return _SCALAR.get(code, f"dtype code {code}")


def round_values(x: torch.Tensor, round_mode: str) -> torch.Tensor:
    """``x`` rounded to integers: ``rint`` (half to even), ``round`` (half away from zero), ``floor``,
    ``ceil``, ``trunc``."""
    if round_mode == "rint":
        return torch.round(x)
    if round_mode == "round":
        return torch.sign(x) * torch.floor(x.abs() + 0.5)
    if round_mode in ("floor", "ceil", "trunc"):
        return getattr(torch, round_mode)(x)
    raise ValueError(round_mode)


def to_int(op: str, x: torch.Tensor, fmt: str, round_mode: str = "rint") -> torch.Tensor:
    """``x`` (float) rounded and saturated to int8 / int4 (int4 values kept in int8)."""
    lo, hi = (-8, 7) if fmt == "int4" else (-128, 127)
    return round_values(x, round_mode).clamp(lo, hi).to(torch.int8)


def to_fp8(op: str, x: torch.Tensor, fmt: str, round_mode: str = "rint") -> torch.Tensor:
    """``x`` (float32) as float8_e4m3fn / float8_e5m2, saturated to the format's largest finite value (NaN
    stays NaN). Only ``rint`` is taken, as on the NPU."""
    if round_mode != "rint":
        fail(op, f"round_mode must be 'rint' when the target is {fmt}, but got '{round_mode}'")
    m = FMAX[fmt]
    return x.clamp(-m, m).to(TORCH[fmt])


def _grid(fmt: str) -> torch.Tensor:
    """The non-negative values of a float4 format, by code (codes 0..7; code | 8 is the negative)."""
    if fmt == "float4_e2m1":
        return torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    return torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75])  # float4_e1m2


def to_fp4_codes(op: str, x: torch.Tensor, fmt: str, round_mode: str = "rint") -> torch.Tensor:
    """``x`` (float32) as 4-bit float codes (uint8 values 0..15, the sign in bit 3 as the float's sign bit, so
    -0.1 gives negative zero), saturated; ``rint`` rounds to
    the nearest value, ties to the even code; ``round`` ties away from zero; ``floor`` / ``ceil`` toward
    -inf / +inf."""
    if round_mode not in ("rint", "round", "floor", "ceil", "trunc"):
        fail(op, f"round_mode must be rint, round, floor, ceil or trunc for {fmt}, but got '{round_mode}'")
    grid = _grid(fmt).to(x.device)
    a = x.abs().clamp(max=float(grid[-1]))
    neg = torch.signbit(x)
    lo = (torch.bucketize(a, grid, right=True) - 1).clamp(0, 7)  # largest code with value <= a
    hi = (lo + 1).clamp(max=7)
    exact = grid[lo] == a
    if round_mode in ("rint", "round"):
        d_lo, d_hi = a - grid[lo], grid[hi] - a
        pick_hi = d_hi < d_lo
        tie = d_hi == d_lo
        pick_hi = pick_hi | (tie & ((lo % 2 == 1) if round_mode == "rint" else torch.ones_like(tie)))
    elif round_mode == "trunc":
        pick_hi = torch.zeros_like(exact)
    else:  # floor / ceil on the magnitude depends on the sign
        up = (round_mode == "ceil") != neg
        pick_hi = up if isinstance(up, torch.Tensor) else torch.full_like(exact, up)
    code = torch.where(exact, lo, torch.where(pick_hi, hi, lo))
    return (code | neg.to(code.dtype) * 8).to(torch.uint8)


def fp4_values(codes: torch.Tensor, fmt: str) -> torch.Tensor:
    """The float32 values of 4-bit codes."""
    grid = _grid(fmt).to(codes.device)
    c = codes.long()
    v = grid[c & 7]
    return torch.where((c & 8) > 0, -v, v)


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """4-bit codes along the last axis (even length), two per uint8, the first in the low nibble."""
    c = codes.to(torch.uint8)
    return (c[..., 0::2] | (c[..., 1::2] << 4)).contiguous()


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    p = packed.to(torch.uint8)
    return torch.stack((p & 15, p >> 4), -1).flatten(-2)


def floor_log2(a: torch.Tensor) -> torch.Tensor:
    """floor(log2(a)) of positive finite float32 values, exactly (from the binary exponent; subnormals too)."""
    _, e = torch.frexp(a)
    return e.to(torch.int32) - 1


def e8m0_bits(exp: torch.Tensor) -> torch.Tensor:
    """The E8M0 encoding (uint8) of scales 2**exp, exp clamped to [-127, 127]."""
    return (exp.clamp(-127, 127) + 127).to(torch.uint8)


def e8m0_value(bits: torch.Tensor) -> torch.Tensor:
    """float32 2**(bits - 127) of E8M0 scales (uint8 or float8_e8m0fnu); 255 is NaN."""
    b = bits.view(torch.uint8) if bits.dtype == torch.float8_e8m0fnu else bits
    v = torch.ldexp(torch.ones_like(b, dtype=torch.float32), b.to(torch.int32) - 127)
    return torch.where(b == 255, torch.full_like(v, float("nan")), v)


def pack_int4(values: torch.Tensor) -> torch.Tensor:
    """int4 values (-8..7) along the last axis (a multiple of 8) as int32, eight each, the first in bits 0-3."""
    v = values.to(torch.int64) & 15
    v = v.reshape(*v.shape[:-1], -1, 8)
    shifts = torch.arange(0, 32, 4, device=v.device)
    word = (v << shifts).sum(-1)
    return torch.where(word >= 2**31, word - 2**32, word).to(torch.int32)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """The int4 values (as int8) of int32 words, eight per word, the first from bits 0-3."""
    w = packed.to(torch.int64) & 0xFFFFFFFF
    shifts = torch.arange(0, 32, 4, device=w.device)
    nib = (w.unsqueeze(-1) >> shifts) & 15
    return torch.where(nib >= 8, nib - 16, nib).flatten(-2).to(torch.int8)


def int64_scale(scale: torch.Tensor) -> torch.Tensor:
    """float32 scales from ``npu_trans_quant_param``'s int64 form (the float's top 19 bits in bits 0-31)."""
    bits = (scale.to(torch.int64) & 0xFFFFE000).to(torch.int32)
    return bits.view(torch.float32) if bits.is_contiguous() else bits.contiguous().view(torch.float32)
