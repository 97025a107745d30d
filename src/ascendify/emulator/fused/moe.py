"""Mixture-of-experts kernels: ``npu_moe_gating_top_k_softmax`` and ``npu_grouped_matmul`` (float path).

- gating: ``p = softmax(x, -1)`` (float32, cast back), ``y, expert_idx = topk(p, k)``; rows with
  ``finished`` True get expert index E (the number of experts); ``row_idx[i, j] = j * rows + i``; indices int32;
- grouped matmul: the rows of x split into groups (``group_list``: cumulative ends with ``group_list_type`` 0,
  counts with 1), ``y_g = x_g @ weight[g] (+ bias[g])``; ``split_item`` 0/1 returns one tensor per group, 2/3 one
  tensor of all rows; ``group_type`` 2 splits K instead (``out[g] = x[:, K_g] @ w[K_g]``, stacked [G, M, N]: MoE
  weight gradients). Quantised: int8 x int8 accumulates exactly in int32, then ``* scale[g]`` (per channel) ``*
  per_token_scale`` (per row); float8 MX operands with E8M0 ``scale`` / ``per_token_scale`` (``scale_dtype``
  ``torch_npu.float8_e8m0fnu``, MindSpeed's MXFP8 MoE) are dequantised block by block. Weight-only (antiquant)
  and activation quantisation are not emulated. Gradients of the float path by autograd.
"""

from __future__ import annotations

import torch

from ascendify.emulator.errors import NotEmulatedError
from ascendify.emulator.fused import _dtypes as D
from ascendify.emulator.fused._check import FLOATS, check, dtype_in, fail, on_950, same_device
from ascendify.emulator.fused.mx import scales_of
from ascendify.emulator.fused.quant import dequant


def npu_moe_gating_top_k_softmax(x, finished=None, k=1):
    op = "npu_moe_gating_top_k_softmax"
    dtype_in(x, FLOATS, op, "x")
    check(x.dim() in (2, 3), op, f"x must be 2 or 3 dimensional, but got {x.dim()}-dimensional")
    experts = x.shape[-1]
    check(0 < k <= experts and k <= 1024, op, f"k must be in (0, min({experts}, 1024)], but got {k}")
    if finished is not None:
        same_device(op, x, finished=finished)
        check(finished.dtype == torch.bool, op, f"the dtype of finished must be bool, but got {finished.dtype}")
        check(tuple(finished.shape) == tuple(x.shape[:-1]), op,
              f"finished must have the shape {tuple(x.shape[:-1])}, but got {tuple(finished.shape)}")
    ct = torch.float64 if x.dtype == torch.float64 else torch.float32
    p = torch.softmax(x.to(ct), -1).to(x.dtype)
    y, idx = torch.topk(p, k, dim=-1, sorted=True)
    idx = idx.to(torch.int32)
    if finished is not None:
        idx = idx.masked_fill(finished.unsqueeze(-1), experts)
    rows = x.numel() // experts
    row_idx = torch.arange(rows * k, dtype=torch.int32, device=x.device).reshape(k, rows).t().reshape(y.shape)
    return y, idx, row_idx


def _group_sizes(op, group_list, group_list_type, rows: int, groups: int) -> list[int]:
    gl = group_list.tolist() if isinstance(group_list, torch.Tensor) else list(group_list)
    check(len(gl) == groups, op, f"group_list must have one value per weight ({groups}), but got {len(gl)}")
    if group_list_type == 0:
        prev = 0
        for e in gl:
            check(e >= prev, op, f"group_list (group_list_type 0: cumulative ends) must be non-decreasing, got {gl}")
            prev = e
        sizes = [b - a for a, b in zip([0, *gl[:-1]], gl, strict=True)]
    else:
        check(all(s >= 0 for s in gl), op, f"group_list (group_list_type 1: counts) must be non-negative, got {gl}")
        sizes = gl
    check(sum(sizes) <= rows, op, f"group_list covers {sum(sizes)} rows but x has {rows}")
    return sizes


def npu_grouped_matmul(x, weight, *, bias=None, scale=None, offset=None, antiquant_scale=None,
                       antiquant_offset=None, per_token_scale=None, group_list=None, activation_input=None,
                       activation_quant_scale=None, activation_quant_offset=None, split_item=0, group_type=None,
                       group_list_type=0, act_type=0, tuning_config=None, output_dtype=None, x_dtype=None,
                       weight_dtype=None, scale_dtype=None, per_token_scale_dtype=None):
    op = "npu_grouped_matmul"
    unsupported = {"offset": offset, "antiquant_scale": antiquant_scale, "antiquant_offset": antiquant_offset,
                   "activation_input": activation_input, "activation_quant_scale": activation_quant_scale,
                   "activation_quant_offset": activation_quant_offset}
    for arg, val in unsupported.items():
        if val is not None:
            raise NotEmulatedError(f"{op}: {arg} (weight-only / activation quantisation) is not emulated by "
                                   "ascendify's emulated npu device")
    check(act_type in (0, None), op, "act_type other than 0 (no activation) is not emulated")
    check(isinstance(x, list | tuple) and isinstance(weight, list | tuple) and len(x) and len(weight), op,
          "x and weight must be non-empty lists of tensors")
    check(len(x) <= 128 and len(weight) <= 128, op, "x and weight take at most 128 tensors")
    check(split_item in (0, 1, 2, 3), op, f"split_item must be 0, 1, 2 or 3, but got {split_item}")
    quantised = x[0].dtype in QUANT_INPUTS
    for i, t in enumerate([*x, *weight]):
        dtype_in(t, QUANT_INPUTS if quantised else FLOATS, op, "x" if i < len(x) else "weight")
        same_device(op, x[0], **{"x" if i < len(x) else "weight": t})
    if quantised:
        if x[0].dtype != torch.int8:
            on_950(op, x[0], f"a {x[0].dtype} x")
        check(scale is not None, op, f"{x[0].dtype} inputs need scale")
        check(group_list is not None and len(x) == 1, op, "the quantised path takes one x with a group_list")
    elif scale is not None or per_token_scale is not None:
        fail(op, "scale and per_token_scale apply to int8 / float8 inputs only")
    if group_type == 2:
        return _split_k(op, x, weight, group_list, group_list_type, scale, per_token_scale, output_dtype)
    weights = list(weight)
    if len(weights) == 1 and weights[0].dim() == 3:
        weights = list(weights[0].unbind(0))
    for w in weights:
        check(w.dim() == 2, op, f"each weight must be 2 dimensional [K, N] (or one [E, K, N]), got {tuple(w.shape)}")
    biases = None
    if bias is not None:
        biases = list(bias)
        if len(biases) == 1 and biases[0].dim() == 2:
            biases = list(biases[0].unbind(0))
        check(len(biases) == len(weights), op, f"bias must have one tensor per weight ({len(weights)})")
    if group_list is None:  # one x per weight
        check(len(x) == len(weights), op, f"without group_list x ({len(x)}) and weight ({len(weights)}) must pair up")
        xs = list(x)
    else:
        check(len(x) == 1, op, "with group_list x must be one tensor whose rows are split into groups")
        check(group_type in (None, 0, -1), op, f"group_type {group_type} (split along N) is not emulated")
        sizes = _group_sizes(op, group_list, group_list_type, x[0].shape[0], len(weights))
        xs = list(x[0][:sum(sizes)].split(sizes, 0))
    if quantised:
        outs = _quant_groups(op, x[0], xs, weights, biases, scale, per_token_scale, scale_dtype, output_dtype)
    else:
        outs = []
        for i, (xi, w) in enumerate(zip(xs, weights, strict=True)):
            check(xi.shape[-1] == w.shape[0], op, f"x[{i}] of shape {tuple(xi.shape)} and weight[{i}] "
                                                  f"{tuple(w.shape)} do not agree on K")
            y = torch.matmul(xi, w)
            if biases is not None:
                y = y + biases[i]
            outs.append(y)
    if split_item in (2, 3):
        return [torch.cat(outs, 0)]
    return outs


QUANT_INPUTS = (torch.int8, torch.float8_e4m3fn, torch.float8_e5m2)


def _out_dtype(output_dtype, scale: torch.Tensor) -> torch.dtype:
    """The output dtype of a quantised product: ``output_dtype`` (a torch dtype or its number), or by default
    bfloat16 for a bfloat16 scale and float16 otherwise."""
    if output_dtype is None:
        return torch.bfloat16 if scale.dtype == torch.bfloat16 else torch.float16
    return D.TORCH.get(D.name(output_dtype), torch.float16)


def _quant_groups(op, x, xs, weights, biases, scale, per_token_scale, scale_dtype, output_dtype):
    """Per group, the quantised product: int8 accumulates exactly in int32 (+ int32 bias) and is scaled by the
    group's per-channel ``scale`` and the rows' ``per_token_scale``; float8 MX operands (E8M0 scales, as
    ``npu_dynamic_mx_quant`` writes them) are dequantised block by block and multiplied in float32."""
    s0 = scale[0]
    mx = D.name(scale_dtype, "") == "float8_e8m0fnu" or s0.dtype in (torch.uint8, torch.float8_e8m0fnu)
    out_dtype = _out_dtype(output_dtype, s0)
    k = x.shape[-1]
    rows = [0]
    for xi in xs:
        rows.append(rows[-1] + xi.shape[0])
    outs = []
    if mx:
        check(per_token_scale is not None, op, "MX quantisation needs per_token_scale")
        kb = -(-k // 32)
        sx = scales_of(per_token_scale[0], -1, kb).repeat_interleave(32, -1)[:, :k]  # [M, K]
        sw = scales_of(s0, -2, kb)  # [E, kb, N]
        xf = x.float()[:sx.shape[0]] * sx
        for i, w in enumerate(weights):
            wf = w.float() * sw[i].repeat_interleave(32, 0)[:k]
            y = xf[rows[i]:rows[i + 1]] @ wf
            if biases is not None:
                y = y + biases[i].float()
            outs.append(y.to(out_dtype))
        return outs
    sc = [dequant(t) for t in scale]
    sc = list(sc[0].unbind(0)) if len(sc) == 1 and sc[0].dim() == 2 else sc
    pts = per_token_scale[0].float() if per_token_scale is not None else None
    for i, (xi, w) in enumerate(zip(xs, weights, strict=True)):
        if x.dtype == torch.int8:
            acc = torch.matmul(xi.to(torch.int32), w.to(torch.int32))
            if biases is not None and biases[i].dtype == torch.int32:
                acc = acc + biases[i]
            y = acc.float()
        else:
            y = xi.float() @ w.float()
        y = y * sc[i].reshape(-1)
        if pts is not None:
            y = y * pts[rows[i]:rows[i + 1]].unsqueeze(-1)
        if biases is not None and biases[i].dtype != torch.int32:
            y = y + biases[i].float()
        outs.append(torch.round(y).clamp(-128, 127).to(torch.int8) if out_dtype == torch.int8 else y.to(out_dtype))
    return outs


def _grouped_block_scales(pairs: torch.Tensor, sizes: list[int], axis: int) -> torch.Tensor:
    """float32 scales per element along ``axis`` from scales written group by group (each group's blocks of 32
    padded to an even count, as ``npu_grouped_dynamic_mx_quant`` does); ``pairs`` has its pair axis at
    ``axis`` (0 or 1) and a trailing axis of 2."""
    vals = D.e8m0_value(pairs)
    parts, at = [], 0
    for n in sizes:
        nb = -(-n // 32)
        np_ = -(-nb // 2)
        chunk = vals.narrow(axis, at, np_) if np_ else vals.narrow(axis, at, 0)
        chunk = chunk.movedim(axis, -2).flatten(-2)[..., :nb].repeat_interleave(32, -1)[..., :n]
        parts.append(chunk)
        at += np_
    return torch.cat(parts, -1).movedim(-1, axis)


def _split_k(op, x, weight, group_list, group_list_type, scale, per_token_scale, output_dtype):
    """group_type 2: K split into groups, ``out[g] = x[:, K_g] @ weight[K_g, :]`` stacked [G, M, N] (MoE weight
    gradients); MX scales per group as ``npu_grouped_dynamic_mx_quant`` writes them."""
    check(len(x) == 1 and len(weight) == 1 and group_list is not None, op,
          "group_type 2 takes one x [M, K], one weight [K, N] and a group_list over K")
    a, b = x[0], weight[0]
    check(a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0], op,
          f"x {tuple(a.shape)} and weight {tuple(b.shape)} must be [M, K] and [K, N]")
    gl = group_list.tolist() if isinstance(group_list, torch.Tensor) else list(group_list)
    sizes = _group_sizes(op, gl, group_list_type, a.shape[1], len(gl))
    af, bf = a.float(), b.float()
    dtype = a.dtype
    if scale is not None:
        check(per_token_scale is not None, op, "group_type 2 quantisation needs per_token_scale and scale")
        af = af[:, :sum(sizes)] * _grouped_block_scales(per_token_scale[0], sizes, 1)
        bf = bf[:sum(sizes)] * _grouped_block_scales(scale[0], sizes, 0)
        dtype = _out_dtype(output_dtype, scale[0])
    outs, at = [], 0
    for n in sizes:
        outs.append(af[:, at:at + n] @ bf[at:at + n])
        at += n
    return [torch.stack(outs, 0).to(dtype)]


def npu_grouped_matmul_swiglu_quant_v2(x, weight, weight_scale, x_scale, group_list, *, smooth_scale=None,
                                       weight_assist_matrix=None, bias=None, dequant_mode=0, dequant_dtype=0,
                                       quant_mode=0, quant_dtype=1, group_list_type=0, tuning_config=None,
                                       x_dtype=None, weight_dtype=None, weight_scale_dtype=None, x_scale_dtype=None):
    """A8W8 (the page's first scenario): per group, ``C = (X_g @ W_g) * x_scale * w_scale[g]`` (int8 products
    accumulated exactly), ``S = swish(C_act) * gate`` (``C_act, gate`` the halves of N), then per row
    ``Q_scale = max|S| / 127``, ``Q = round(S / Q_scale)``. Returns ``(Q int8 [M, N/2], Q_scale float32 [M])``;
    rows past the groups are zeros. A8W4, A4W4 and the 950 modes are not emulated."""
    op = "npu_grouped_matmul_swiglu_quant_v2"
    check(x.dtype == torch.int8, op, f"only the A8W8 scenario is emulated: x must be int8, but got {x.dtype}")
    check(isinstance(weight, list | tuple) and len(weight) == 1 and isinstance(weight_scale, list | tuple)
          and len(weight_scale) == 1, op, "weight and weight_scale are lists of one tensor")
    w, ws = weight[0], weight_scale[0]
    same_device(op, x, weight=w, weight_scale=ws, x_scale=x_scale, group_list=group_list)
    check(w.dtype == torch.int8 and w.dim() == 3, op, "weight must be int8 [E, K, N] (A8W8)")
    check(x.dim() == 2 and x.shape[1] == w.shape[1], op, "x [M, K] and weight [E, K, N] must agree on K")
    check(ws.shape == (w.shape[0], w.shape[2]), op, f"weight_scale must be [E, N] ({w.shape[0]}, {w.shape[2]})")
    check(x_scale.dim() == 1 and x_scale.shape[0] == x.shape[0], op, "x_scale must be [M]")
    check(group_list.dtype == torch.int64, op, f"the dtype of group_list must be int64, got {group_list.dtype}")
    check(bias is None and smooth_scale is None and weight_assist_matrix is None, op,
          "bias, smooth_scale and weight_assist_matrix belong to other scenarios (not A8W8)")
    check(dequant_mode == 0 and quant_mode == 0, op, "A8W8 takes dequant_mode 0 and quant_mode 0 (per token)")
    check(w.shape[2] % 2 == 0, op, f"N ({w.shape[2]}) must be even")
    sizes = _group_sizes(op, group_list, group_list_type, x.shape[0], w.shape[0])
    m, n = x.shape[0], w.shape[2]
    q = torch.zeros(m, n // 2, dtype=torch.int8, device=x.device)
    qs = torch.zeros(m, dtype=torch.float32, device=x.device)
    at = 0
    for g, size in enumerate(sizes):
        if size:
            acc = torch.matmul(x[at:at + size].to(torch.int32), w[g].to(torch.int32)).float()
            c = acc * x_scale[at:at + size].float()[:, None] * ws[g].float()
            act, gate = c.chunk(2, -1)
            s = act * torch.sigmoid(act) * gate
            sc = s.abs().amax(-1) / 127
            q[at:at + size] = torch.where(sc[:, None] > 0, torch.round(s / sc[:, None].clamp_min(1e-45)),
                                          torch.zeros_like(s)).clamp(-128, 127).to(torch.int8)
            qs[at:at + size] = sc
        at += size
    return q, qs
