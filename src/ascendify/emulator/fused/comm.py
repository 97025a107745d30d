"""Communication fused with computation (MC2), across the ranks of an emulated ``hccl`` group:
``npu_all_gather_base_mm``, ``npu_mm_reduce_scatter_base``, ``npu_mm_all_reduce_base``, ``npu_alltoallv_gmm``,
``npu_gmm_alltoallv``.

``hcom`` is the communicator name ``group._get_backend(torch.device("npu")).get_hccl_comm_name(rank)`` gives
(:func:`ascendify.emulator.distributed.hccl.group_by_comm_name` finds the group again); the collective runs on
that group with torch.distributed, then (or before) the product in float32:

- ``npu_all_gather_base_mm``: ``gather_out = allgather(x1)`` (along dim 0), ``output = gather_out @ x2``;
  quantised (int8, ``comm_mode`` ``aiv``): ``(allgather(x1_scale) * x2_scale) * (allgather(x1) @ x2)``;
- ``npu_mm_reduce_scatter_base``: ``reducescatter(x1 @ x2)`` over dim 0 (M divisible by the world size);
- ``npu_mm_all_reduce_base``: ``allreduce(x1 @ ((x2 + antiquant_offset) * antiquant_scale) + bias) + x3``
  (``x3`` is added once, after the reduction, as the kernel does; int8 x int8 with ``dequant_scale``);
- ``npu_alltoallv_gmm``: rows of ``gmm_x`` ordered by (destination rank, its local expert) go out with
  AlltoAllv (``send_counts[r * e + j]`` rows to rank r's expert j, ``recv_counts`` likewise inbound), are
  permuted from (source rank, expert) to (expert, source rank) order (``permute_out``) and multiplied per local
  expert (``gmm_weight`` [e, H1, N1]); the shared expert's ``mm_x @ mm_weight`` rides along;
- ``npu_gmm_alltoallv``: the reverse: the grouped matmul per local expert on rows in (expert, destination rank)
  order, unpermuted to (rank, expert) order and sent back with AlltoAllv.

torch_npu's own argument checks raise :class:`NpuOpError` (world sizes 2/4/8/16/32, 2-D operands, K); the limits
only CANN's kernels enforce (K in [256, 65535), EP world sizes 8..128) follow the ``fidelity`` setting
(:func:`._check.kernel_limit`), so that 2-rank jobs run them. The results are the collective's and the
product's; no backward (MindSpeed calls them inside its own autograd functions).
"""

from __future__ import annotations

import torch

from ascendify.emulator.errors import NotEmulatedError
from ascendify.emulator.fused._check import HALF, check, dtype_in, kernel_limit, same_device
from ascendify.emulator.fused.quant import dequant

_WORLDS = (2, 4, 8, 16, 32)
_EP_WORLDS = (8, 16, 32, 64, 128)


def _group(op: str, hcom: str, world_size: int | None = None):
    import torch.distributed as dist

    from ascendify.emulator.distributed.hccl import group_by_comm_name

    check(isinstance(hcom, str) and 0 < len(hcom) < 128, op, f"hcom must be a communicator name, got {hcom!r}")
    pg = group_by_comm_name(hcom)
    check(pg is not None, op, f"no HCCL communicator named {hcom!r} in this process (get it from "
                              "group._get_backend(torch.device('npu')).get_hccl_comm_name(rank))")
    size = dist.get_world_size(pg)
    check(world_size is None or world_size == size, op,
          f"world_size ({world_size}) must equal the size of the communicator's group ({size})")
    return pg, size


def _world(op: str, world_size: int) -> None:
    check(world_size in _WORLDS, op, f"world_size should be in [2, 4, 8, 16, 32], but the actual value is "
                                     f"{world_size}.")


def _mm_args(op: str, x1, x2) -> None:
    check(x1.dim() == 2 and x2.dim() == 2, op, f"Both inputs of mm are required to be 2D, but the actual inputs "
                                               f"are {x1.dim()}D and {x2.dim()}D.")
    check(x1.shape[1] == x2.shape[0], op, f"The K-axis in the two inputs of Matmul must be equal, but in reality, "
                                          f"the K-axis of x1 is {x1.shape[1]} and the K-axis of x2 is {x2.shape[0]}.")
    kernel_limit(op, 256 <= x1.shape[1] < 65535, f"K must be in [256, 65535), but got {x1.shape[1]}")
    check(x2.dtype == x1.dtype, op, f"x2 ({x2.dtype}) must have the dtype of x1 ({x1.dtype})")


def _no_bias(op: str, bias) -> None:
    if bias is not None and bool(torch.any(bias != 0)):
        raise NotEmulatedError(f"{op}: a non-zero bias is not supported by this version (torch_npu's documentation)")


def _quant(op: str, x1, x2_scale, comm_mode) -> bool:
    if x1.dtype == torch.int8:
        check(x2_scale is not None, op, "int8 inputs need x2_scale")
        check((comm_mode or "ai_cpu") == "aiv", op, "When comm_mode is ai_cpu, quantization not supported.")
        return True
    dtype_in(x1, HALF, op, "x1")
    return False


def _quant_out(x2_scale, output_dtype):
    if x2_scale.dtype == torch.int64:
        return torch.float16
    return output_dtype or torch.bfloat16


def npu_all_gather_base_mm(self, x2, hcom, world_size, *, bias=None, x1_scale=None, x2_scale=None,
                           gather_index=0, gather_output=True, comm_turn=0, output_dtype=None, comm_mode=None):
    """``(output, gather_out)``; ``gather_out`` is an empty tensor when ``gather_output`` is False."""
    import torch.distributed as dist

    op = "npu_all_gather_base_mm"
    _world(op, world_size)
    _mm_args(op, self, x2)
    same_device(op, self, x2=x2, bias=bias, x1_scale=x1_scale, x2_scale=x2_scale)
    check(gather_index == 0, op, f"gather_index only supports 0, but got {gather_index}")
    check(comm_turn == 0, op, f"comm_turn only supports 0, but got {comm_turn}")
    check(comm_mode in (None, "ai_cpu", "aiv"), op, f"comm_mode must be ai_cpu or aiv, but got {comm_mode!r}")
    check(gather_output or comm_mode != "aiv", op, "gather_output must be True when comm_mode is aiv")
    _no_bias(op, bias)
    quant = _quant(op, self, x2_scale, comm_mode)
    pg, size = _group(op, hcom, world_size)
    gathered = self.new_empty(self.shape[0] * size, self.shape[1])
    dist.all_gather_single(gathered, self.contiguous(), group=pg)
    if quant:
        y = torch.matmul(gathered.to(torch.int32), x2.to(torch.int32)).float()
        y = y * dequant(x2_scale).reshape(1, -1)
        if x1_scale is not None:
            scales = x1_scale.new_empty(x1_scale.shape[0] * size, *x1_scale.shape[1:])
            dist.all_gather_single(scales, x1_scale.contiguous(), group=pg)
            y = y * scales.float().reshape(-1, 1)
        out = y.to(_quant_out(x2_scale, output_dtype))
    else:
        out = torch.matmul(gathered.float(), x2.float()).to(self.dtype)
    return out, gathered if gather_output else self.new_empty(0)


def npu_mm_reduce_scatter_base(self, x2, hcom, world_size, *, reduce_op="sum", bias=None, x1_scale=None,
                               x2_scale=None, comm_turn=0, output_dtype=None, comm_mode=None):
    import torch.distributed as dist

    op = "npu_mm_reduce_scatter_base"
    _world(op, world_size)
    _mm_args(op, self, x2)
    check(self.shape[0] % world_size == 0, op, "The M-axis in input of Matmul should be be divisible by world_size.")
    same_device(op, self, x2=x2, bias=bias, x1_scale=x1_scale, x2_scale=x2_scale)
    check(reduce_op == "sum", op, f"reduce_op only supports 'sum', but got {reduce_op!r}")
    check(comm_turn == 0, op, f"comm_turn only supports 0, but got {comm_turn}")
    _no_bias(op, bias)
    quant = _quant(op, self, x2_scale, comm_mode)
    pg, size = _group(op, hcom, world_size)
    if quant:
        y = torch.matmul(self.to(torch.int32), x2.to(torch.int32)).float() * dequant(x2_scale).reshape(1, -1)
        if x1_scale is not None:
            y = y * x1_scale.float().reshape(-1, 1)
        dtype = _quant_out(x2_scale, output_dtype)
    else:
        y = torch.matmul(self.float(), x2.float())
        dtype = self.dtype
    out = y.new_empty(y.shape[0] // size, y.shape[1])
    dist.reduce_scatter_single(out, y.contiguous(), group=pg)
    return out.to(dtype)


def npu_mm_all_reduce_base(x1, x2, hcom, *, reduce_op="sum", bias=None, antiquant_scale=None,
                           antiquant_offset=None, x3=None, dequant_scale=None, pertoken_scale=None,
                           comm_quant_scale_1=None, comm_quant_scale_2=None, antiquant_group_size=0, comm_turn=0,
                           group_sizes=None, y_dtype=None, x1_dtype=None, x2_dtype=None, dequant_scale_dtype=None,
                           pertoken_scale_dtype=None, comm_quant_mode=0, comm_mode=None):
    import torch.distributed as dist

    op = "npu_mm_all_reduce_base"
    check(x2.dim() == 2, op, f"x2 needs to be 2D, but got: {x2.dim()}D")
    check(x1.dim() in (2, 3), op, f"x1 needs to be 2D or 3D, but got: {x1.dim()}D")
    check(x1.shape[-1] == x2.shape[0], op, f"K of x1 and x2 should be same, but they are x1_k: {x1.shape[-1]}, "
                                           f"x2_k: {x2.shape[0]}")
    same_device(op, x1, x2=x2, bias=bias, antiquant_scale=antiquant_scale, antiquant_offset=antiquant_offset,
                x3=x3, dequant_scale=dequant_scale, pertoken_scale=pertoken_scale)
    check(reduce_op == "sum", op, f"reduce_op only supports 'sum', but got {reduce_op!r}")
    check(comm_turn == 0, op, f"comm_turn only supports 0, but got {comm_turn}")
    if comm_quant_scale_1 is not None or comm_quant_scale_2 is not None or comm_quant_mode or group_sizes:
        raise NotEmulatedError(f"{op}: communication quantisation and group_sizes are not emulated by ascendify")
    if x1.dtype == torch.int8:
        check(x2.dtype == torch.int8, op, "x2 must be an int8 tensor for quant.")
        check(antiquant_scale is None and antiquant_offset is None, op,
              "when both dtype of x1 and dtype of x2 are equal to int8, antiquantScale, antiquantOffset should both "
              "be null")
        check(dequant_scale is not None, op, "int8 x1 and x2 need dequant_scale")
        y = torch.matmul(x1.to(torch.int32), x2.to(torch.int32))
        if bias is not None:
            y = y + bias.to(torch.int32)
        y = y.float() * dequant(dequant_scale).reshape(-1)
        if pertoken_scale is not None:
            y = y * pertoken_scale.float().unsqueeze(-1)
        dtype = torch.float16 if dequant_scale.dtype == torch.int64 else (
            torch.bfloat16 if dequant_scale.dtype == torch.bfloat16 else torch.float16)
        bias_done = True
    elif x2.dtype == torch.int8:
        check(dequant_scale is None, op, "when only dtype of x2 is equal to int8, dequantScale should be null")
        check(antiquant_scale is not None, op, "an int8 x2 with a float x1 needs antiquant_scale")
        dtype_in(x1, HALF, op, "x1")
        w = x2.float()
        if antiquant_offset is not None:
            w = w + (antiquant_offset.float().repeat_interleave(antiquant_group_size, 0)[:w.shape[0]]
                     if antiquant_group_size else antiquant_offset.float().reshape(-1))
        s = antiquant_scale.float()
        w = w * (s.repeat_interleave(antiquant_group_size, 0)[:w.shape[0]] if antiquant_group_size else s.reshape(-1))
        y = torch.matmul(x1.float(), w)
        dtype, bias_done = x1.dtype, False
    else:
        dtype_in(x1, HALF, op, "x1")
        check(x2.dtype == x1.dtype, op, f"x2 ({x2.dtype}) must have the dtype of x1 ({x1.dtype})")
        check(antiquant_scale is None and antiquant_offset is None and dequant_scale is None, op,
              "when neither dtype of x1 or dtype of x2 is equal to int8, antiquantScale, antiquantOffset and "
              "dequantScale should all be null")
        y = torch.matmul(x1.float(), x2.float())
        dtype, bias_done = x1.dtype, False
    if bias is not None and not bias_done:
        y = y + bias.float()
    out_shape = (*x1.shape[:-1], x2.shape[1])
    if x3 is not None:
        check(tuple(x3.shape) == out_shape, op, f"x3 with shape {tuple(x3.shape)} doesn't match the output shape "
                                                f"{out_shape}")
    pg, _ = _group(op, hcom)
    y = y.contiguous()
    dist.all_reduce(y, group=pg)
    if x3 is not None:
        y = y + x3.float()
    return y.to(dtype)


def _counts(op: str, send_counts, recv_counts, size: int, e: int):
    send, recv = [int(c) for c in send_counts], [int(c) for c in recv_counts]
    check(len(send) == e * size and len(recv) == e * size, op,
          f"send_counts and recv_counts must have e * ep_world_size ({e * size}) values, got {len(send)} and "
          f"{len(recv)}")
    kernel_limit(op, len(send) <= 256, f"send_counts and recv_counts take at most 256 values, got {len(send)}")
    check(all(c >= 0 for c in send + recv), op, "send_counts and recv_counts must be non-negative")
    return send, recv


def _gmm(x: torch.Tensor, w: torch.Tensor, sizes: list[int], trans: bool) -> torch.Tensor:
    parts = x.split(sizes, 0)
    outs = [p.float() @ (w[j].float().t() if trans else w[j].float()) for j, p in enumerate(parts)]
    return torch.cat(outs, 0) if outs else x.new_empty(0, w.shape[1 if trans else 2])


def _shared(op, mm_x, mm_weight, trans):
    if mm_x is None and mm_weight is None:
        return None
    check(mm_x is not None and mm_weight is not None, op, "mm_x and mm_weight must be given together")
    return (mm_x.float() @ (mm_weight.float().t() if trans else mm_weight.float())).to(mm_x.dtype)


def _alltoallv_common(op, gmm_x, gmm_weight, hcom, ep_world_size, send_tensor, recv_tensor):
    dtype_in(gmm_x, HALF, op, "gmm_x")
    check(gmm_x.dim() == 2, op, f"gmm_x must be 2 dimensional, but got {gmm_x.dim()}")
    check(gmm_weight.dim() == 3 and gmm_weight.dtype == gmm_x.dtype, op,
          "gmm_weight must be 3 dimensional [e, H1, N1] with gmm_x's dtype")
    check(send_tensor is None and recv_tensor is None, op,
          "send_counts_tensor and recv_counts_tensor are not supported by this version (torch_npu's documentation)")
    kernel_limit(op, ep_world_size in _EP_WORLDS, f"ep_world_size must be 8, 16, 32, 64 or 128, got {ep_world_size}")
    return _group(op, hcom, ep_world_size)


def npu_alltoallv_gmm(gmm_x, gmm_weight, hcom, ep_world_size, send_counts, recv_counts, *, send_counts_tensor=None,
                      recv_counts_tensor=None, mm_x=None, mm_weight=None, trans_gmm_weight=False,
                      trans_mm_weight=False, permute_out_flag=False, comm_mode=None):
    """``(gmm_y, mm_y, permute_out)`` (``mm_y`` / ``permute_out`` None unless asked for)."""
    import torch.distributed as dist

    op = "npu_alltoallv_gmm"
    pg, size = _alltoallv_common(op, gmm_x, gmm_weight, hcom, ep_world_size, send_counts_tensor, recv_counts_tensor)
    e = gmm_weight.shape[0]
    send, recv = _counts(op, send_counts, recv_counts, size, e)
    check(sum(send) == gmm_x.shape[0], op, f"send_counts sum to {sum(send)} but gmm_x has {gmm_x.shape[0]} rows")
    out = gmm_x.new_empty(sum(recv), gmm_x.shape[1])
    dist.all_to_all_single(out, gmm_x.contiguous(), [sum(recv[r * e:(r + 1) * e]) for r in range(size)],
                           [sum(send[r * e:(r + 1) * e]) for r in range(size)], group=pg)
    blocks = list(out.split(recv, 0))  # (source rank r, expert j) at r * e + j
    permuted = torch.cat([blocks[r * e + j] for j in range(e) for r in range(size)], 0)
    sizes = [sum(recv[r * e + j] for r in range(size)) for j in range(e)]
    gmm_y = _gmm(permuted, gmm_weight, sizes, trans_gmm_weight).to(gmm_x.dtype)
    return gmm_y, _shared(op, mm_x, mm_weight, trans_mm_weight), permuted if permute_out_flag else None


def npu_gmm_alltoallv(gmm_x, gmm_weight, hcom, ep_world_size, send_counts, recv_counts, *, send_counts_tensor=None,
                      recv_counts_tensor=None, mm_x=None, mm_weight=None, trans_gmm_weight=False,
                      trans_mm_weight=False, comm_mode=None):
    """``(y, mm_y)`` (``mm_y`` None unless asked for)."""
    import torch.distributed as dist

    op = "npu_gmm_alltoallv"
    pg, size = _alltoallv_common(op, gmm_x, gmm_weight, hcom, ep_world_size, send_counts_tensor, recv_counts_tensor)
    e = gmm_weight.shape[0]
    send, recv = _counts(op, send_counts, recv_counts, size, e)
    check(sum(send) == gmm_x.shape[0], op, f"send_counts sum to {sum(send)} but gmm_x has {gmm_x.shape[0]} rows")
    sizes = [sum(send[r * e + j] for r in range(size)) for j in range(e)]
    gmm_y = _gmm(gmm_x, gmm_weight, sizes, trans_gmm_weight).to(gmm_x.dtype)
    blocks = list(gmm_y.split([send[r * e + j] for j in range(e) for r in range(size)], 0))  # (j, r)
    unpermuted = torch.cat([blocks[j * size + r] for r in range(size) for j in range(e)], 0)
    y = gmm_x.new_empty(sum(recv), gmm_y.shape[1])
    dist.all_to_all_single(y, unpermuted.contiguous(), [sum(recv[r * e:(r + 1) * e]) for r in range(size)],
                           [sum(send[r * e:(r + 1) * e]) for r in range(size)], group=pg)
    return y, _shared(op, mm_x, mm_weight, trans_mm_weight)
