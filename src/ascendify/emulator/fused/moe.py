"""Mixture-of-experts kernels: ``npu_moe_gating_top_k_softmax`` and ``npu_grouped_matmul`` (float path).

- gating: ``p = softmax(x, -1)`` (float32, cast back), ``y, expert_idx = topk(p, k)``; rows with
  ``finished`` True get expert index E (the number of experts); ``row_idx[i, j] = j * rows + i``; indices int32;
- grouped matmul: the rows of x split into groups (``group_list``: cumulative ends with ``group_list_type`` 0,
  counts with 1), ``y_g = x_g @ weight[g] (+ bias[g])``; ``split_item`` 0/1 returns one tensor per group, 2/3 one
  tensor of all rows. Quantised arguments (scale, offset, antiquant, per-token scale, activation) are not
  emulated. Gradients by autograd.
"""

from __future__ import annotations

import torch

from ascendify.emulator.errors import NotEmulatedError
from ascendify.emulator.fused._check import FLOATS, check, dtype_in, same_device


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
    quant = {"scale": scale, "offset": offset, "antiquant_scale": antiquant_scale,
             "antiquant_offset": antiquant_offset, "per_token_scale": per_token_scale,
             "activation_input": activation_input, "activation_quant_scale": activation_quant_scale,
             "activation_quant_offset": activation_quant_offset}
    for arg, val in quant.items():
        if val is not None:
            raise NotEmulatedError(f"{op}: the quantised path ({arg}) is not emulated by ascendify's emulated npu "
                                   "device; only the float path is")
    check(act_type in (0, None), op, "act_type other than 0 (no activation) is not emulated")
    check(isinstance(x, list | tuple) and isinstance(weight, list | tuple) and len(x) and len(weight), op,
          "x and weight must be non-empty lists of tensors")
    check(len(x) <= 128 and len(weight) <= 128, op, "x and weight take at most 128 tensors")
    check(split_item in (0, 1, 2, 3), op, f"split_item must be 0, 1, 2 or 3, but got {split_item}")
    for i, t in enumerate([*x, *weight]):
        dtype_in(t, FLOATS, op, "x" if i < len(x) else "weight")
        same_device(op, x[0], **{"x" if i < len(x) else "weight": t})
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
        check(group_type in (None, 0, -1), op, f"group_type {group_type} (split along K or N) is not emulated")
        sizes = _group_sizes(op, group_list, group_list_type, x[0].shape[0], len(weights))
        xs = list(x[0][:sum(sizes)].split(sizes, 0))
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
