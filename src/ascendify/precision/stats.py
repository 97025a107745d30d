"""Tensor statistics and the fingerprint, computed on the tensor's device with no host synchronisation.

``stat_vector(t)`` returns one small float32 tensor on ``t``'s device (on the CPU when the C kernel made it)::

    [min, max, sum, l2norm, nan_count, inf_count, fp_0 .. fp_7]      (STAT_LEN = 14 numbers)

The dumper keeps these vectors in a list and moves them to the host once per step (``torch.stack(...).tolist()``);
``to_tensor_stats`` turns one row into a ``model.TensorStats``. The fingerprint is defined in ``precision.model``.

Cost: on the CPU (and the emulated npu, whose tensors are host memory) one pass of a C kernel
(``fused_stats``) over the data gives min, max, sum, norm and the NaN/Inf counts, and a second small kernel the
fingerprint, both writing into the vector: no torch op but its allocation. Elsewhere (other devices, layouts the
kernel does not cover, no C compiler) three torch reductions (``aminmax``, ``sum``, ``linalg.vector_norm``;
bfloat16/float16 reduced in float32 without a converted copy; a non-contiguous tensor first permuted into its
memory order, which changes none of these values and lets the reductions read memory in sequence), plus the
fingerprint's gather of at most ``FINGERPRINT_SAMPLES`` elements. ``view_vector`` reuses the first six numbers for
a view of an already summarised tensor (same storage, same number of elements: a transpose, a ``view``), so views
cost only the gather. NaN/Inf counts on the torch path: on the CPU they are counted only when the norm is not
finite (reading one number there costs nothing); on other devices two more reductions run on the device, so the
host is never waited for per tensor.
"""

from __future__ import annotations

import ctypes
import math
import sys

import torch

from ascendify.precision.model import FINGERPRINT_LEN, FINGERPRINT_SAMPLES, TensorStats

STAT_LEN = 6 + FINGERPRINT_LEN
_MASK = (1 << 32) - 1
_HALF = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

_fp_cache: dict[tuple[str, int], tuple[torch.Tensor | None, torch.Tensor, float]] = {}


def hash_uniform(n: int, salt: int) -> torch.Tensor:
    """``n`` numbers in [-1, 1) from an integer hash of (position, salt): identical on every machine (no RNG)."""
    i = torch.arange(n, dtype=torch.int64)
    h = (i * 2654435761 + salt * 40503 + 0x9E3779B9) & _MASK
    h = h ^ (h >> 16)
    h = (h * 0x45D9F3B) & _MASK
    h = h ^ (h >> 16)
    return (h.to(torch.float64) / 2**31 - 1.0).to(torch.float32)


def fingerprint_plan(n: int, device: torch.device) -> tuple[torch.Tensor | None, torch.Tensor, float]:
    """(positions or None for "all", weights ``k x 8``, 1/sqrt(k)) for tensors of ``n`` elements, built once."""
    key = (str(device), n)
    plan = _fp_cache.get(key)
    if plan is None:
        with torch._C.DisableTorchFunction():
            if n <= FINGERPRINT_SAMPLES:
                pos, k = None, n
            else:
                k = FINGERPRINT_SAMPLES
                u = (hash_uniform(k, 7).to(torch.float64) + 1.0) / 2.0  # [0, 1)
                pos = (u * n).to(torch.int64).clamp_(0, n - 1).to(device)
            w = torch.stack([hash_uniform(k, 101 + j) for j in range(FINGERPRINT_LEN)], dim=1).to(device)
            plan = (pos, w, 1.0 / math.sqrt(k))
        if len(_fp_cache) > 4096:
            _fp_cache.clear()
        _fp_cache[key] = plan
    return plan


def fingerprint(t: torch.Tensor) -> torch.Tensor:
    """The 8-number fingerprint of ``t`` (float32, on ``t``'s device): see ``precision.model``."""
    n = t.numel()
    pos, w, scale = fingerprint_plan(n, t.device)
    if pos is None:
        s = t.reshape(-1)
    else:
        s = torch.take(t, pos)
    if s.dtype != torch.float32:
        s = s.to(torch.float32)
    return torch.mv(w.t(), s) * scale


def _memory_order(x: torch.Tensor) -> torch.Tensor:
    if x.is_contiguous() or x.dim() < 2:
        return x
    order = sorted(range(x.dim()), key=lambda i: (-x.stride(i), -x.shape[i]))
    return x.permute(order)


def stat_vector(t: torch.Tensor) -> torch.Tensor | None:
    """The statistics vector of ``t`` (see the module docstring), or None for empty/complex/unsupported tensors.

    Call with grad disabled, torch-function handling disabled and autocast off (the dumper does this).
    """
    if t.numel() == 0 or t.is_complex() or t.layout != torch.strided:
        return None
    x = t.detach()
    if x.dtype not in _HALF:
        x = x.to(torch.float32)  # integers and bool: small tensors in practice
    m = _memory_order(x)
    vec = _fused_vector(x, m)
    if vec is not None:
        return vec
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    mn, mx = torch.aminmax(m)
    total = m.sum(dtype=acc)
    norm = torch.linalg.vector_norm(m, dtype=acc)
    head = torch.stack([mn.to(acc), mx.to(acc), total, norm]).to(torch.float32)
    return torch.cat([head, _counts(m, norm), fingerprint(x)])


_FUSED = {torch.float32: "stats_f32", torch.bfloat16: "stats_bf16", torch.float16: "stats_f16"}
_fused_fns: dict | None = None
_pu1: str | None = None


def _host_memory(t: torch.Tensor) -> bool:
    """``t``'s data pointer is host memory: a CPU tensor, or one of the emulated npu (host memory retagged)."""
    dev = t.device.type
    if dev == "cpu":
        return True
    rt = sys.modules.get("ascendify.emulator.runtime")
    if rt is None or not getattr(rt, "enabled", False):
        return False
    global _pu1
    if _pu1 is None:
        _pu1 = torch._C._get_privateuse1_backend_name()
    return dev == _pu1


def _kernels(dtype: torch.dtype):
    """(statistics kernel, fingerprint kernel) of the C library for ``dtype``, or (None, None)."""
    global _fused_fns
    if _fused_fns is None:
        from ascendify.precision import fused_stats

        lib = fused_stats.kernel()
        _fused_fns = {}
        if lib is not None:
            for dt, name in _FUSED.items():
                st, fp = getattr(lib, name, None), getattr(lib, name.replace("stats_", "fp_"), None)
                if st is not None and fp is not None:
                    _fused_fns[dt] = (st, fp)
    return _fused_fns.get(dtype, (None, None))


def _fused_head(m: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor | None:
    """[min, max, sum, norm, nan_count, inf_count] by one pass of the C kernel (``fused_stats``), written into the
    first 6 numbers of ``out`` (a float32 CPU tensor; a new one of 6 when None); None where the kernel is not
    available or does not cover ``m`` (then the torch path runs)."""
    fn = _kernels(m.dtype)[0]
    if fn is None or not _host_memory(m):
        return None
    if m.is_contiguous():
        sizes, strides, nd = _ONE(m.numel()), _ONE(1), 1
    else:
        lay = _runs(m)
        if lay is None:
            return None
        sizes, strides, nd = lay
    if out is None:
        out = torch.empty(6)
    fn(m.data_ptr(), nd, sizes, strides, out.data_ptr())
    return out


_CPU = torch.device("cpu")
_F32 = ctypes.sizeof(ctypes.c_float)


def _fused_fingerprint(x: torch.Tensor, out: torch.Tensor) -> bool:
    """Write ``x``'s fingerprint into ``out[6:14]`` (a float32 CPU tensor) with the C kernel; False where it does not
    apply (not contiguous, not host memory, no kernel): then ``fingerprint`` (torch) is the way."""
    fn = _kernels(x.dtype)[1]
    if fn is None or not x.is_contiguous() or not _host_memory(x):
        return False
    pos, w, scale = fingerprint_plan(x.numel(), _CPU)
    k = x.numel() if pos is None else pos.numel()
    fn(x.data_ptr(), None if pos is None else pos.data_ptr(), k, w.data_ptr(), scale, out.data_ptr() + 6 * _F32)
    return True


def _fused_vector(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor | None:
    """The whole statistics vector of ``x`` (``m``: ``x`` in memory order) on the CPU with the C kernels, or None."""
    out = torch.empty(STAT_LEN)
    if _fused_head(m, out) is None:
        return None
    if not _fused_fingerprint(x, out):
        out[6:].copy_(fingerprint(x))
    return out


def _ONE(v: int):
    return (ctypes.c_int64 * 1)(v)


def _runs(m: torch.Tensor):
    """``m`` (in memory order) as rows of contiguous runs: (sizes, strides, ndim) as ctypes arrays, dims merged
    where they are contiguous with each other; None when the innermost stride is not 1 or runs are short."""
    sizes: list[int] = []
    strides: list[int] = []
    for sz, st in zip(m.shape, m.stride(), strict=True):
        if sz == 1:
            continue
        if sizes and strides[-1] == st * sz:
            sizes[-1] *= sz
            strides[-1] = st
        else:
            sizes.append(sz)
            strides.append(st)
    if not sizes or strides[-1] != 1 or sizes[-1] < 16 or len(sizes) > 16:
        return None
    n = len(sizes)
    return (ctypes.c_int64 * n)(*sizes), (ctypes.c_int64 * n)(*strides), n


def view_vector(base_vec: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """The statistics vector of ``t``, a view holding exactly the elements of a tensor whose vector is
    ``base_vec``: the statistics are the same, only the fingerprint (which depends on positions) is new."""
    x = t.detach()
    if base_vec.device.type == "cpu" and base_vec.dtype == torch.float32:
        out = torch.empty(STAT_LEN)
        if _fused_fingerprint(x, out):
            ctypes.memmove(out.data_ptr(), base_vec.data_ptr(), 6 * _F32)
            return out
    return torch.cat([base_vec[:6], fingerprint(x)])


def _counts(m: torch.Tensor, norm: torch.Tensor) -> torch.Tensor:
    if m.device.type == "cpu" and math.isfinite(norm.item()):
        return torch.zeros(2)
    return torch.stack([torch.isnan(m).sum(), torch.isinf(m).sum()]).to(torch.float32)


def to_tensor_stats(t_meta: tuple[str, tuple[int, ...], bool, str], row: list[float] | None, **extra) -> TensorStats:
    """A ``TensorStats`` from the tensor's metadata ``(dtype, shape, requires_grad, device)`` and its host row."""
    dtype, shape, requires_grad, device = t_meta
    if row is None:
        return TensorStats(dtype=dtype, shape=shape, requires_grad=requires_grad, device=device, **extra)
    mn, mx, total, norm, nans, infs = row[:6]
    numel = math.prod(shape) if shape else 1
    return TensorStats(
        dtype=dtype,
        shape=shape,
        max=mx,
        min=mn,
        mean=total / numel,
        norm=norm,
        nan_count=int(nans),
        inf_count=int(infs),
        fingerprint=tuple(row[6:]),
        requires_grad=requires_grad,
        device=device,
        **extra,
    )
