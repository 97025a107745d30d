"""Quantised matrix products: ``npu_quant_matmul``, ``npu_weight_quant_batchmatmul``,
``npu_transpose_batchmatmul``, ``npu_transpose_quant_batchmatmul``.

- ``npu_quant_matmul(x1, x2, scale, ...)``: int8 x int8 (and int4 packed eight per int32) accumulate exactly in
  int32, then ``out = (acc + bias_int32) * scale * pertoken_scale + offset`` in float32 (a float bias is added
  after the scaling), rounded to the output dtype (int8: half to even, saturated; default int8; int32: the
  accumulator plus bias). float8 inputs (Ascend 950) take float32 per-tensor/channel ``scale`` and per-token
  ``pertoken_scale``, or block scales with ``group_sizes`` ``[gm, gn, gk]``: MX (E8M0 ``uint8`` /
  ``float8_e8m0fnu`` scales paired as ``npu_dynamic_mx_quant`` writes them, ``[1, 1, 32]``) or float32 blocks
  (``pertoken_scale`` [m/gm, k/gk], ``scale`` [k/gk, n/gn]): each block's product is scaled and the blocks
  summed in float32. ``scale`` of dtype int64 is ``npu_trans_quant_param``'s packed float.
- ``npu_weight_quant_batchmatmul``: ``y = x @ ((weight + antiquant_offset) * antiquant_scale) + bias``
  (per tensor, channel, or group of ``antiquant_group_size`` rows of K), int8 or int4-in-int32 weights; with
  ``quant_scale`` the result is quantised to int8: ``round(y * quant_scale + quant_offset)``.
- ``npu_transpose_batchmatmul``: ``(input^{perm_x1} @ weight^{perm_x2} + bias)^{perm_y}`` (``[M, B, K]`` x
  ``[B, K, N]`` -> ``[M, B, N]``), with an int64 ``scale`` quantised to int8 ``[M, 1, B * N]``; with
  ``batch_split_factor`` f the ``[M, B * N]`` result is returned as ``[f, M, B * N / f]``.
- ``npu_transpose_quant_batchmatmul``: float8 ``[M, B, K]`` x ``[B, K, N]`` (or ``[B, N, K]`` with
  ``perm_x2`` ``[0, 2, 1]``) with per-token/channel float32 scales or MX scales -> ``[M, B, N]``.

Products of the float paths are computed in float32 (the Cube unit's accumulator), so they agree with an NPU
to float32 rounding of the sums; the integer paths are exact. No backward (inference operators).
"""

from __future__ import annotations

import torch

from ascendify.emulator.errors import NotEmulatedError
from ascendify.emulator.fused import _dtypes as D
from ascendify.emulator.fused._check import FLOATS, HALF, check, dtype_in, fail, on_950, same_device
from ascendify.emulator.fused.mx import scales_of
from ascendify.emulator.fused.quant import dequant

FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
_OUT = {"int8": torch.int8, "float16": torch.float16, "bfloat16": torch.bfloat16, "int32": torch.int32,
        "float32": torch.float32}


def _values(op: str, t: torch.Tensor, code, arg: str) -> torch.Tensor:
    """float32 values of a quantised operand: float8 dtypes, or uint8 storage named by ``code`` (float4
    pairs unpacked along the last axis)."""
    fmt = D.name(code) if code is not None else None
    if fmt in ("float4_e2m1", "float4_e1m2"):
        check(t.dtype in (torch.uint8, torch.int8, torch.float4_e2m1fn_x2), op,
              f"{arg} must be stored as uint8 for {fmt}, but got {t.dtype}")
        return D.fp4_values(D.unpack_nibbles(t.view(torch.uint8)), fmt)
    if fmt == "hifloat8":
        raise NotEmulatedError(f"{op}: hifloat8 operands are not emulated by ascendify's emulated npu device")
    return t.float()


def _unpack_x2_int4(x2: torch.Tensor) -> torch.Tensor:
    """An int4 right operand: [k, n/8] words, or the transpose of contiguous [n, k/8] words -> [k, n]."""
    if x2.dim() >= 2 and not x2.is_contiguous() and x2.transpose(-1, -2).is_contiguous():
        return D.unpack_int4(x2.transpose(-1, -2)).transpose(-1, -2)
    return D.unpack_int4(x2)


def _mx_scale(s: torch.Tensor, axis: int, blocks: int) -> torch.Tensor:
    if s.dtype not in (torch.uint8, torch.float8_e8m0fnu):
        fail("npu_quant_matmul", f"MX scales must be uint8 or float8_e8m0fnu E8M0 values, but got {s.dtype}")
    return scales_of(s, axis, blocks)


def _block_matmul(a, b, sa, sb, gm, gn, gk):
    """sum over k-blocks of (a_blk @ b_blk) * sa[m-block, k-block] * sb[k-block, n-block] in float32.

    ``sa``: [..., m/gm, k/gk], ``sb``: [..., k/gk, n/gn] (already float32)."""
    m, k = a.shape[-2:]
    n = b.shape[-1]
    kb = -(-k // gk)
    out = None
    for j in range(kb):
        part = a[..., :, j * gk:(j + 1) * gk] @ b[..., j * gk:(j + 1) * gk, :]
        fa = sa[..., :, j].repeat_interleave(gm, -1)[..., :m].unsqueeze(-1)
        fb = sb[..., j, :].repeat_interleave(gn, -1)[..., :n].unsqueeze(-2)
        part = part * fa * fb
        out = part if out is None else out + part
    return out


def npu_quant_matmul(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None, output_dtype=None,
                     x1_dtype=None, x2_dtype=None, pertoken_scale_dtype=None, scale_dtype=None, group_sizes=None,
                     y_scale=None):
    op = "npu_quant_matmul"
    same_device(op, x1, x2=x2, scale=scale, offset=offset, pertoken_scale=pertoken_scale, bias=bias)
    check(2 <= x1.dim() <= 6 and 2 <= x2.dim() <= 6, op,
          f"x1 and x2 must have 2 to 6 dims, but got {x1.dim()} and {x2.dim()}")
    if y_scale is not None:
        raise NotEmulatedError(f"{op}: y_scale (a hifloat8 output) is not emulated by ascendify's emulated npu device")
    out_name = D.name(output_dtype, "int8")
    check(out_name in _OUT, op, f"output_dtype must be int8, float16, bfloat16, int32 or float32, got {out_name}")
    integer = x1.dtype in (torch.int8, torch.int32)
    if integer:
        check(x2.dtype == x1.dtype, op, f"x1 ({x1.dtype}) and x2 ({x2.dtype}) must have the same dtype")
        if x1.dtype == torch.int32:  # int4, eight per word
            check(x1.is_contiguous(), op, "an int4 (int32) x1 must be contiguous")
            a, b = D.unpack_int4(x1).to(torch.int32), _unpack_x2_int4(x2).to(torch.int32)
        else:
            a, b = x1.to(torch.int32), x2.to(torch.int32)
        check(a.shape[-1] == b.shape[-2], op, f"the k of x1 {tuple(a.shape)} and x2 {tuple(b.shape)} differ")
        check(a.shape[-1] <= 65535, op, f"the last dim of x1 and x2 must be at most 65535, got {a.shape[-1]}")
        acc = torch.matmul(a, b)  # exact int32 accumulation
        if bias is not None and bias.dtype == torch.int32:
            acc = acc + bias
        if out_name == "int32":
            return acc
        s = dequant(scale)
        y = acc.float() * s
        if pertoken_scale is not None:
            dtype_in(pertoken_scale, (torch.float32,), op, "pertoken_scale")
            y = y * pertoken_scale.float().unsqueeze(-1)
        if bias is not None and bias.dtype != torch.int32:
            dtype_in(bias, FLOATS, op, "bias")
            y = y + bias.float()
        if offset is not None:
            y = y + offset.float()
        if out_name == "int8":
            return torch.round(y).clamp(-128, 127).to(torch.int8)
        return y.to(_OUT[out_name])
    # float8 / float4 (Ascend 950)
    on_950(op, x1, f"a {x1.dtype} x1")
    check(x1.dtype in FP8 or x1_dtype is not None, op,
          f"the dtype of x1 must be int8, int32 (int4), float8_e4m3fn or float8_e5m2, but got {x1.dtype}")
    a, b = _values(op, x1, x1_dtype, "x1"), _values(op, x2, x2_dtype, "x2")
    check(a.shape[-1] == b.shape[-2], op, f"the k of x1 {tuple(a.shape)} and x2 {tuple(b.shape)} differ")
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    mx = D.name(scale_dtype, "") == "float8_e8m0fnu" or scale.dtype in (torch.uint8, torch.float8_e8m0fnu)
    if mx:
        gk = (group_sizes or [1, 1, 32])[2] or 32
        check(gk == 32, op, f"MX quantisation groups k by 32, but got group_sizes {group_sizes}")
        check(pertoken_scale is not None, op, "MX quantisation needs pertoken_scale (x1's scales)")
        kb = -(-k // 32)
        sa = _mx_scale(pertoken_scale, -1, kb)  # [..., m, kb]
        sb = _mx_scale(scale, -2, kb)  # [..., kb, n]
        y = _block_matmul(a, b, sa, sb, 1, 1, 32)
    elif group_sizes is not None and pertoken_scale is not None and pertoken_scale.dim() >= 2:
        gm, gn, gk = (int(g) for g in group_sizes)
        sa, sb = pertoken_scale.float(), dequant(scale)
        gm = gm or -(-m // sa.shape[-2])
        gk = gk or -(-k // sa.shape[-1])
        gn = gn or -(-n // sb.shape[-1])
        y = _block_matmul(a, b, sa, sb, gm, gn, gk)
    else:
        y = torch.matmul(a, b) * dequant(scale)
        if pertoken_scale is not None:
            y = y * pertoken_scale.float().unsqueeze(-1)
    if bias is not None:
        y = y + bias.float()
    if offset is not None:
        y = y + offset.float()
    check(out_name in ("float16", "bfloat16", "float32"), op,
          f"output_dtype must be float16, bfloat16 or float32 for float8 inputs, but got {out_name}")
    return y.to(_OUT[out_name])


def _antiquant(op, w: torch.Tensor, scale, offset, group: int, k: int) -> torch.Tensor:
    """float32 (weight + offset) * scale, per tensor / channel / group of ``group`` rows of K."""
    wf = w.float()
    s = dequant(scale) if scale.dtype == torch.int64 else scale.float()
    o = offset.float() if offset is not None else None
    if group:
        check(32 <= group < k and group % 32 == 0, op,
              f"antiquant_group_size must be a multiple of 32 in [32, K-1], but got {group}")
        s = s.repeat_interleave(group, 0)[:k]
        o = o.repeat_interleave(group, 0)[:k] if o is not None else None
    elif s.dim() == 2 and s.shape[0] == 1:
        s = s[0]
        o = o.reshape(-1) if o is not None else None
    return (wf + o if o is not None else wf) * s


def npu_weight_quant_batchmatmul(x, weight, antiquant_scale, antiquant_offset=None, quant_scale=None,
                                 quant_offset=None, bias=None, antiquant_group_size=0, inner_precise=0,
                                 weight_dtype=None):
    op = "npu_weight_quant_batchmatmul"
    dtype_in(x, HALF, op, "x")
    same_device(op, x, weight=weight, antiquant_scale=antiquant_scale, antiquant_offset=antiquant_offset,
                quant_scale=quant_scale, quant_offset=quant_offset, bias=bias)
    check(weight.dtype in (torch.int8, torch.int32), op,
          f"the dtype of weight must be int8 or int32 (int4), but got {weight.dtype}")
    check(x.numel() > 0 and weight.numel() > 0, op, "empty tensors are not supported")
    check(x.dim() >= 2 and weight.dim() >= 2, op, "x and weight must be at least 2 dimensional")
    if antiquant_scale.dtype in HALF:
        check(antiquant_scale.dtype == x.dtype, op, f"the dtype of antiquant_scale ({antiquant_scale.dtype}) "
                                                    f"must equal that of x ({x.dtype})")
    if antiquant_offset is not None:
        check(antiquant_offset.shape == antiquant_scale.shape, op,
              "antiquant_scale and antiquant_offset must have the same shape")
    check(quant_offset is None or quant_scale is not None, op, "quant_offset needs quant_scale")
    w = _unpack_x2_int4(weight).to(torch.int8) if weight.dtype == torch.int32 else weight
    k = x.shape[-1]
    check(w.shape[-2] == k, op, f"x {tuple(x.shape)} and weight {tuple(w.shape)} do not agree on K")
    check(1 <= k <= 65535 and 1 <= w.shape[-1] <= 65535, op, "K and N must be in [1, 65535]")
    y = torch.matmul(x.float(), _antiquant(op, w, antiquant_scale, antiquant_offset, antiquant_group_size, k))
    if bias is not None:
        if x.dtype == torch.bfloat16:
            check(bias.dtype == torch.float32, op, "bias must be float32 when x is bfloat16")
        y = y + bias.float()
    if quant_scale is not None:
        y = y * dequant(quant_scale).reshape(-1)
        if quant_offset is not None:
            y = y + quant_offset.float().reshape(-1)
        return torch.round(y).clamp(-128, 127).to(torch.int8)
    return y.to(x.dtype)


def _perm(op: str, arg: str, perm, allowed) -> list[int]:
    p = list(perm) if perm is not None else list(allowed[0])
    check(p in [list(a) for a in allowed], op, f"{arg} should be one of {allowed}, but got {p}")
    return p


def npu_transpose_batchmatmul(input, weight, *, bias=None, scale=None, perm_x1=None, perm_x2=None, perm_y=None,
                              batch_split_factor=1):
    op = "npu_transpose_batchmatmul"
    dtype_in(input, FLOATS, op, "input")
    dtype_in(weight, FLOATS, op, "weight")
    same_device(op, input, weight=weight, bias=bias, scale=scale)
    check(input.dim() == 3 and weight.dim() == 3, op, "input and weight must be 3 dimensional")
    if bias is not None:
        raise NotEmulatedError(f"{op}: bias is not supported by this version (torch_npu's documentation)")
    p1 = _perm(op, "perm_x1", perm_x1, ([0, 1, 2], [1, 0, 2]))
    _perm(op, "perm_x2", perm_x2, ([0, 1, 2],))
    _perm(op, "perm_y", perm_y, ([1, 0, 2],))
    a = input.permute(p1)  # [B, M, K]
    check(a.shape[0] == weight.shape[0] and a.shape[2] == weight.shape[1], op,
          f"input {tuple(input.shape)} (perm_x1 {p1}) and weight {tuple(weight.shape)} do not agree on B and K")
    y = torch.matmul(a.float(), weight.float()).permute(1, 0, 2)  # [M, B, N]
    mm, b, n = y.shape
    check(batch_split_factor >= 1 and (b * n) % batch_split_factor == 0, op,
          f"batch_split_factor must divide B*N ({b * n}), but got {batch_split_factor}")
    if scale is not None:
        check(batch_split_factor == 1, op, "batch_split_factor must be 1 when scale is given")
        q = y.reshape(mm, 1, b * n) * dequant(scale).reshape(1, 1, -1)
        return torch.round(q).clamp(-128, 127).to(torch.int8)
    y = y.to(input.dtype)
    if batch_split_factor > 1:
        return y.reshape(mm, batch_split_factor, -1).transpose(0, 1).contiguous()
    return y


def npu_transpose_quant_batchmatmul(x1, x2, dtype, *, bias=None, x1_scale=None, x2_scale=None, group_sizes=None,
                                    perm_x1=None, perm_x2=None, perm_y=None, batch_split_factor=1, x1_dtype=None,
                                    x2_dtype=None):
    op = "npu_transpose_quant_batchmatmul"
    same_device(op, x1, x2=x2, x1_scale=x1_scale, x2_scale=x2_scale)
    check(x1.dim() == 3 and x2.dim() == 3, op, "x1 and x2 must be 3 dimensional")
    out_name = D.name(dtype)
    check(out_name in ("float16", "bfloat16"), op, f"dtype must be torch.float16 or torch.bfloat16, got {out_name}")
    check(batch_split_factor == 1, op, f"batch_split_factor must be 1, but got {batch_split_factor}")
    if bias is not None:
        raise NotEmulatedError(f"{op}: bias is not supported by this version (torch_npu's documentation)")
    check(x1.dtype in FP8, op, f"the dtype of x1 must be float8_e4m3fn or float8_e5m2, but got {x1.dtype}")
    on_950(op, x1, "float8 x1")
    _perm(op, "perm_x1", perm_x1, ([1, 0, 2],))
    p2 = _perm(op, "perm_x2", perm_x2, ([0, 1, 2], [0, 2, 1]))
    _perm(op, "perm_y", perm_y, ([1, 0, 2],))
    a = _values(op, x1, x1_dtype, "x1").permute(1, 0, 2)  # [B, M, K]
    b = _values(op, x2, x2_dtype, "x2").permute(p2)  # [B, K, N]
    check(a.shape[0] == b.shape[0] and a.shape[2] == b.shape[1], op,
          f"x1 {tuple(x1.shape)} and x2 {tuple(x2.shape)} do not agree on B and K")
    k = a.shape[2]
    if x1_scale is not None and x1_scale.dim() == 4:  # MX: x1_scale [M, B, K/64, 2]
        check(k % 64 == 0, op, f"k must be a multiple of 64 in MX mode, but got {k}")
        sa = _mx_scale(x1_scale.permute(1, 0, 2, 3), -1, k // 32)  # [B, M, kb]
        s2 = x2_scale if p2 == [0, 1, 2] else x2_scale.permute(0, 2, 1, 3)  # [B, K/64, N, 2]
        sb = _mx_scale(s2, -2, k // 32)  # [B, kb, N]
        y = _block_matmul(a, b, sa, sb, 1, 1, 32)
    else:
        y = torch.matmul(a, b)
        if x2_scale is not None:
            y = y * dequant(x2_scale).reshape(1, 1, -1)
        if x1_scale is not None:
            y = y * dequant(x1_scale).reshape(1, -1, 1)
    return y.permute(1, 0, 2).to(_OUT[out_name])


def _npu_matmul_add_fp32(x, weight, C):
    """ATB Linear with ``transposeA`` and accumulation (op_plugin/ops/atb/LinearAtb.cpp): ``C += x^T @ weight``
    in float32, in place (the weight-gradient accumulation of MindSpeed's and vllm-ascend's warm-up)."""
    op = "_npu_matmul_add_fp32"
    dtype_in(x, HALF, op, "x")
    same_device(op, x, weight=weight, C=C)
    check(weight.dtype == x.dtype, op, f"weight ({weight.dtype}) must have x's dtype ({x.dtype})")
    check(C.dtype == torch.float32, op, f"the dtype of C must be float32, but got {C.dtype}")
    check(x.dim() == 2 and weight.dim() == 2 and x.shape[0] == weight.shape[0], op,
          f"x [K, M] and weight [K, N] must agree on K, got {tuple(x.shape)} and {tuple(weight.shape)}")
    check(tuple(C.shape) == (x.shape[1], weight.shape[1]), op,
          f"C must be [M, N] ({x.shape[1]}, {weight.shape[1]}), but got {tuple(C.shape)}")
    with torch.no_grad():
        C.add_(x.float().t() @ weight.float())
