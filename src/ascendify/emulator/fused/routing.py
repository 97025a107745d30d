"""Mixture-of-experts routing: ``npu_moe_init_routing``, ``npu_moe_init_routing_v2``, ``npu_moe_finalize_routing``,
``npu_moe_token_permute``, ``npu_moe_token_unpermute``, ``npu_moe_gating_top_k``.

The index algebra is torch_npu's documented "equivalent computation" (the Python in each operator's page):

- ``npu_moe_init_routing``: ``order = stable argsort(expert_idx.flatten())``; ``expanded_expert_idx`` the sorted
  experts; ``expanded_row_idx[row_idx.flatten()[order][i]] = i``;
  ``expanded_x[i] = x[row_idx.flatten()[order][i] % rows]`` for the first ``min(active_num, rows) * k`` rows;
- ``npu_moe_init_routing_v2``: the same sort, restricted to ``active_expert_range`` (experts outside it go
  last and are dropped), ``row_idx_type`` 0 (gather index: position in ``expanded_x``, -1 when dropped) or 1
  (scatter index: the sort order); ``drop_pad_mode`` 1 lays tokens out as [experts, capacity, H], dropping the
  excess and zero-padding; per-expert token counts (cumsum, count, or (expert, count) pairs); ``quant_mode`` 0
  (static int8: ``round(x * scale + offset)``), 1 (dynamic int8 per row, optional smooth ``scale``), 2 / 3 (MXFP8
  e5m2 / e4m3fn, the scale as ``npu_dynamic_mx_quant`` computes it);
- ``npu_moe_finalize_routing``: ``out[i] = skip1[i] + skip2[i] + sum_k scales[i, k] * (rows[src_to_dst[k * R + i]]
  + bias[expert[i, k]])`` (``drop_pad_mode`` 2/3: ``src_to_dst[i * K + k]``; -1 contributes 0);
- ``npu_moe_token_permute``: ``order = stable argsort(indices.flatten())``, ``permuted = tokens[order // topk]``
  (the first ``num_out_tokens``), and the returned ``sorted_indices`` is ``argsort(order)``: where each
  (token, k) went; ``npu_moe_token_unpermute`` gathers ``permuted[sorted_indices]``, weights by ``probs`` and sums
  over k (``padded_mode``: indices [experts, capacity] of tokens, scattered back with ``scatter_add``). Both
  are differentiable (index_select / gather), as MindSpeed trains through them;
- ``npu_moe_gating_top_k``: softmax (``norm_type`` 0) or sigmoid (1) in float32, ``+ bias`` for the selection,
  the ``k_group`` best of ``group_count`` groups (by max, or by the sum of the top two), top-k among them;
  ``y`` are the unbiased scores (sigmoid: renormalised by their sum + eps) times ``routed_scaling_factor``.
"""

from __future__ import annotations

import torch

from ascendify.emulator.errors import NotEmulatedError
from ascendify.emulator.fused import _dtypes as D
from ascendify.emulator.fused._check import FLOATS, check, dtype_in, same_device

_INT_MAX = 2**31 - 1


def npu_moe_init_routing(x, row_idx, expert_idx, active_num):
    op = "npu_moe_init_routing"
    dtype_in(x, FLOATS, op, "x")
    same_device(op, x, row_idx=row_idx, expert_idx=expert_idx)
    check(x.dim() == 2, op, f"x must be 2 dimensional (NUM_ROWS, H), but got {x.dim()}")
    check(expert_idx.dim() == 2 and expert_idx.shape[0] == x.shape[0], op,
          f"expert_idx must be (NUM_ROWS, K) with NUM_ROWS = {x.shape[0]}, but got {tuple(expert_idx.shape)}")
    check(row_idx.shape == expert_idx.shape, op, "row_idx must have the shape of expert_idx")
    for arg, t in (("row_idx", row_idx), ("expert_idx", expert_idx)):
        check(t.dtype == torch.int32, op, f"the dtype of {arg} must be int32, but got {t.dtype}")
    rows, k = expert_idx.shape
    order = torch.argsort(expert_idx.reshape(-1), stable=True)
    expanded_expert_idx = expert_idx.reshape(-1)[order]
    dst_to_src = row_idx.reshape(-1).long()[order]
    expanded_row_idx = torch.empty_like(dst_to_src, dtype=torch.int32)
    expanded_row_idx[dst_to_src] = torch.arange(dst_to_src.numel(), dtype=torch.int32, device=x.device)
    n = min(int(active_num), rows) * k
    return x[dst_to_src[:n] % rows], expanded_row_idx, expanded_expert_idx


def _dynamic_int8(xf: torch.Tensor):
    amax = xf.abs().amax(-1, keepdim=True)
    scale = amax / 127
    q = torch.where(scale > 0, xf / torch.where(scale > 0, scale, 1.0), torch.zeros_like(xf))
    return torch.round(q).clamp(-128, 127).to(torch.int8), scale.squeeze(-1)


def npu_moe_init_routing_v2(x, expert_idx, *, scale=None, offset=None, active_num=-1, expert_capacity=-1,
                            expert_num=-1, drop_pad_mode=0, expert_tokens_num_type=0, expert_tokens_num_flag=False,
                            quant_mode=-1, active_expert_range=(), row_idx_type=0, x_dtype=None):
    """``(expanded_x, expanded_row_idx, expert_token_cumsum_or_count, expanded_scale)``."""
    op = "npu_moe_init_routing_v2"
    dtype_in(x, (*FLOATS, torch.int8), op, "x")
    same_device(op, x, expert_idx=expert_idx, scale=scale, offset=offset)
    check(x.dim() == 2, op, "the x shape support only 2d")
    check(expert_idx.dim() == 2, op, "the expert_idx shape support only 2d")
    check(x.shape[0] == expert_idx.shape[0], op, "the first dim of expert_idx and x should be the same")
    check(expert_idx.dtype == torch.int32, op, f"the dtype of expert_idx must be int32, got {expert_idx.dtype}")
    check(drop_pad_mode in (0, 1), op, "drop_pad_mode is None or invalid. must be in [0, 1]")
    check(expert_tokens_num_type in (0, 1, 2), op, "expert_tokens_num_type is None or invalid. must be in [0, 1, 2]")
    check(row_idx_type in (0, 1), op, "row_idx_type is None or invalid. must be in [0, 1]")
    if quant_mode not in (-1, 0, 1, 2, 3):
        raise NotEmulatedError(f"{op}: quant_mode {quant_mode} (HIF8, MXFP4, FP8 per-block, INT4) is not emulated "
                               "by ascendify's emulated npu device")
    rng = list(active_expert_range or ())
    if rng:
        check(len(rng) == 2 and rng[1] > rng[0] and rng[0] >= 0 and rng[1] <= 10240, op,
              f"active_expert_range must be [start, end) within [0, 10240], increasing, got {rng}")
        start, end = rng
    else:
        start, end = 0, expert_num if expert_num > 0 else int(expert_idx.max()) + 1 if expert_idx.numel() else 0
    rows, k = expert_idx.shape
    h = x.shape[1]
    flat = expert_idx.reshape(-1).long()
    active = (flat >= start) & (flat < end)
    keyed = torch.where(active, flat, torch.full_like(flat, _INT_MAX))
    order = torch.argsort(keyed, stable=True)
    sorted_experts = keyed[order]
    available = int(active.sum())
    counts = torch.bincount(sorted_experts[:available] - start, minlength=end - start)[:end - start]
    if drop_pad_mode == 0:
        n = available if active_num in (-1, 0) else min(int(active_num), available)
        src = order[:n]  # flattened (token, k) of each expanded row
        if row_idx_type == 1:
            expanded_row_idx = order.to(torch.int32)
        else:
            expanded_row_idx = torch.full((rows * k,), -1, dtype=torch.int32, device=x.device)
            expanded_row_idx[order[:available]] = torch.arange(available, dtype=torch.int32, device=x.device)
        tokens = src // k
        expanded_x = x[tokens]
        experts_of_rows = sorted_experts[:n]
    else:
        check(0 < expert_capacity <= rows, op, f"expert_capacity must be in (0, {rows}], but got {expert_capacity}")
        check(row_idx_type == 0, op, "row_idx_type must be 0 in drop_pad mode")
        num = end - start
        slot = torch.full((num * expert_capacity,), -1, dtype=torch.long, device=x.device)
        first = torch.cumsum(counts, 0) - counts
        pos = torch.arange(available, device=x.device) - first.repeat_interleave(counts)
        keep = pos < expert_capacity
        dest = (sorted_experts[:available] - start) * expert_capacity + pos
        slot[dest[keep]] = order[:available][keep]
        expanded_row_idx = torch.full((rows * k,), -1, dtype=torch.int32, device=x.device)
        filled = slot >= 0
        expanded_row_idx[slot[filled]] = torch.arange(slot.numel(), device=x.device)[filled].to(torch.int32)
        tokens = torch.where(filled, slot // k, torch.zeros_like(slot))
        expanded_x = torch.where(filled[:, None], x[tokens], torch.zeros((), dtype=x.dtype, device=x.device))
        experts_of_rows = torch.arange(num, device=x.device).repeat_interleave(expert_capacity) + start
        counts = torch.minimum(counts, torch.full_like(counts, expert_capacity))
    if expert_tokens_num_type == 0:
        tokens_out = torch.cumsum(counts, 0)
    elif expert_tokens_num_type == 1:
        tokens_out = counts
    else:
        nz = torch.nonzero(counts).reshape(-1)
        pairs = torch.stack((nz + start, counts[nz]), 1)
        width = expert_num if expert_num > 0 else end - start
        tokens_out = torch.zeros(width, 2, dtype=torch.int64, device=x.device)
        tokens_out[:pairs.shape[0]] = pairs
    tokens_out = tokens_out.to(torch.int64)
    expanded_scale = torch.empty(0, dtype=torch.float32, device=x.device)
    if quant_mode == -1:
        if scale is not None:
            expanded_scale = scale.float()[tokens]
    elif quant_mode == 0:
        check(scale is not None and offset is not None, op, "static quantisation (quant_mode 0) needs scale and offset")
        q = torch.round(expanded_x.to(torch.float16).float() * scale.float()[0] + offset.float()[0])
        expanded_x = q.clamp(-128, 127).to(torch.int8)
    elif quant_mode == 1:
        xf = expanded_x.float()
        if scale is not None:
            s = scale.float()
            xf = xf * (s if s.shape[0] == 1 else s[(experts_of_rows - start).clamp(min=0)])
        expanded_x, expanded_scale = _dynamic_int8(xf)
    else:
        from ascendify.emulator.fused.mx import encode, paired, quantize_along

        fmt = "float8_e5m2" if quant_mode == 2 else "float8_e4m3fn"
        v, e = quantize_along(op, expanded_x, 1, 32, fmt, 0, 0.0, "rint")
        expanded_x = encode(op, v, fmt, "rint")
        expanded_scale = paired(D.e8m0_bits(e), 1).reshape(v.shape[0], -1)
    if drop_pad_mode == 1:
        expanded_x = expanded_x.reshape(end - start, expert_capacity, h)
    if not expert_tokens_num_flag:
        tokens_out = torch.empty(0, dtype=torch.int64, device=x.device)
    return expanded_x, expanded_row_idx, tokens_out, expanded_scale


def npu_moe_finalize_routing(expanded_permuted_rows, skip1, skip2, bias, scales, expanded_src_to_dst_row,
                             export_for_source_row, drop_pad_mode=0, k=1):
    op = "npu_moe_finalize_routing"
    rows_in = expanded_permuted_rows
    dtype_in(rows_in, FLOATS, op, "expanded_permuted_rows")
    same_device(op, rows_in, skip1=skip1, skip2=skip2, bias=bias, scales=scales,
                expanded_src_to_dst_row=expanded_src_to_dst_row, expert_for_source_row=export_for_source_row)
    check(drop_pad_mode in (0, 1, 2, 3), op, f"drop_pad_mode must be in [0, 3], but got {drop_pad_mode}")
    check(skip1 is not None or skip2 is None, op, "skip2 must be None when skip1 is None")
    check(expanded_src_to_dst_row.dtype == torch.int32, op, "the dtype of expanded_src_to_dst_row must be int32")
    for arg, t in (("skip1", skip1), ("skip2", skip2), ("bias", bias), ("scales", scales)):
        check(t is None or t.dtype == rows_in.dtype, op, f"the dtype of {arg} must equal that of "
                                                         f"expanded_permuted_rows ({rows_in.dtype})")
    kk = scales.shape[1] if scales is not None else max(int(k or 1), 1)
    nk = expanded_src_to_dst_row.shape[0]
    rows = scales.shape[0] if scales is not None else nk // kk
    h = rows_in.shape[-1]
    flat = rows_in.reshape(-1, h).float()
    idx = expanded_src_to_dst_row.long()
    idx = idx.reshape(kk, rows).t() if drop_pad_mode in (0, 1) else idx.reshape(rows, kk)  # [rows, K]
    valid = idx >= 0
    picked = flat[idx.clamp(min=0)] * valid[..., None]  # [rows, K, H]
    if bias is not None:
        check(export_for_source_row is not None, op, "bias needs expert_for_source_row")
        picked = picked + bias.float()[export_for_source_row.long()]
    w = scales.float() if scales is not None else torch.ones(rows, kk, device=flat.device)
    out = (picked * w[..., None]).sum(1)
    if skip1 is not None:
        out = out + skip1.float()
    if skip2 is not None:
        out = out + skip2.float()
    return out.to(rows_in.dtype)


def _num_out(num_out_tokens, flat: int) -> int:
    n = 0 if num_out_tokens is None else int(num_out_tokens)
    return min(n, flat) if n > 0 else n + flat


def npu_moe_token_permute(tokens, indices, num_out_tokens=None, padded_mode=False):
    op = "npu_moe_token_permute"
    dtype_in(tokens, FLOATS, op, "tokens")
    same_device(op, tokens, indices=indices)
    check(tokens.dim() == 2, op, f"The dims of input tokens should be 2 dimensional, but got {tokens.dim()}")
    check(indices.dim() in (1, 2), op, f"The dims of input indices should be 2 or 1 dimensional, but got "
                                       f"{indices.dim()}")
    check(indices.dtype in (torch.int32, torch.int64), op, f"the dtype of indices must be int32 or int64, got "
                                                           f"{indices.dtype}")
    if padded_mode:
        return tokens.index_select(0, indices.reshape(-1).long()), indices
    topk = 1 if indices.dim() == 1 else indices.shape[1]
    order = torch.argsort(indices.reshape(-1), stable=True)
    n = _num_out(num_out_tokens, order.numel())
    permuted = tokens.index_select(0, order[:n] // topk)
    return permuted, torch.argsort(order, stable=True).to(torch.int32)


def npu_moe_token_unpermute(permuted_tokens, sorted_indices, probs=None, padded_mode=False, restore_shape=None):
    op = "npu_moe_token_unpermute"
    dtype_in(permuted_tokens, FLOATS, op, "permuted_tokens")
    same_device(op, permuted_tokens, sorted_indices=sorted_indices, probs=probs)
    check(permuted_tokens.dim() == 2, op, "The dims of input permuted_tokens should be 2 dimensional")
    check(probs is None or probs.dim() == 2, op, "The dims of input probs should be 2 dimensional")
    h = permuted_tokens.shape[-1]
    if padded_mode:
        check(restore_shape is not None, op, "padded_mode needs restore_shape")
        combined = permuted_tokens
        if probs is not None:
            combined = probs.reshape(-1, 1).to(permuted_tokens.dtype) * permuted_tokens
        out = torch.zeros(list(restore_shape), dtype=combined.dtype, device=combined.device)
        return out.scatter_add(0, sorted_indices.reshape(-1, 1).long().expand(-1, h), combined)
    check(sorted_indices.dim() == 1, op, "The dims of input sorted_indices should be 1 dimensional")
    topk = 1 if probs is None else probs.shape[1]
    idx = sorted_indices.long()
    rows = permuted_tokens.shape[0]
    valid = idx < rows  # (token, k) pairs dropped by num_out_tokens contribute nothing
    gathered = permuted_tokens.index_select(0, torch.where(valid, idx, torch.zeros_like(idx)))
    gathered = gathered * valid[:, None].to(gathered.dtype)
    gathered = gathered.reshape(-1, topk, h)
    if probs is not None:
        gathered = gathered * probs.to(gathered.dtype).unsqueeze(-1)
    return gathered.sum(1)


def npu_moe_gating_top_k(x, k, *, bias=None, input_ids=None, tid2eid=None, k_group=1, group_count=1,
                         group_select_mode=0, renorm=0, norm_type=0, out_flag=False, routed_scaling_factor=1.0,
                         eps=1e-20):
    """``(y, expert_idx, norm_out)``."""
    op = "npu_moe_gating_top_k"
    dtype_in(x, FLOATS, op, "x")
    same_device(op, x, bias=bias)
    check(x.dim() == 2, op, "the x shape support only 2d")
    experts = x.shape[-1]
    check(experts <= 2048, op, f"the number of experts (x's last dim) must be at most 2048, but got {experts}")
    check(bias is None or (bias.dim() == 1 and bias.shape[0] == experts and bias.dtype == x.dtype), op,
          "bias must be 1-D of x's last dim, with x's dtype")
    check((input_ids is None) == (tid2eid is None), op, "input_ids and tid2eid must be both provided or both omitted")
    if input_ids is not None:
        raise NotEmulatedError(f"{op}: the hash mode (input_ids, tid2eid) is not emulated by ascendify's emulated npu")
    check(group_count > 0 and experts % group_count == 0 and experts // group_count > 2, op,
          f"x's last dim ({experts}) must divide by group_count ({group_count}) into groups of more than 2")
    check(1 <= k_group <= group_count, op, f"k_group must be in [1, group_count], but got {k_group}")
    check(1 <= k <= experts // group_count * k_group, op,
          f"k must be in [1, {experts // group_count * k_group}], but got {k}")
    check(group_select_mode in (0, 1), op, f"group_select_mode must be 0 or 1, but got {group_select_mode}")
    check(renorm == 0, op, f"renorm only supports 0, but got {renorm}")
    check(norm_type in (0, 1), op, f"norm_type must be 0 (softmax) or 1 (sigmoid), but got {norm_type}")
    xf = x.float()
    norm = torch.softmax(xf, -1) if norm_type == 0 else torch.sigmoid(xf)
    score = norm + bias.float() if bias is not None else norm
    if group_count > 1:
        g = score.reshape(score.shape[0], group_count, -1)
        gs = g.amax(-1) if group_select_mode == 0 else g.topk(2, -1).values.sum(-1)
        top_groups = torch.argsort(-gs, dim=-1, stable=True)[:, :k_group]
        keep = torch.zeros_like(gs, dtype=torch.bool).scatter(1, top_groups, True)
        score = torch.where(keep[..., None], g, torch.full_like(g, float("-inf"))).reshape(score.shape)
    idx = torch.argsort(-score, dim=-1, stable=True)[:, :k]
    y = torch.gather(norm, 1, idx)
    if norm_type == 1:
        y = y / (y.sum(-1, keepdim=True) + eps)
    y = y * routed_scaling_factor
    return y.to(x.dtype), idx.to(torch.int32), norm
