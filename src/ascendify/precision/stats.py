"""Tensor statistics and the fingerprint, computed on the tensor's device with no host synchronisation.

``stat_vector(t)`` returns one small float32 tensor on ``t``'s device::

    [min, max, sum, l2norm, nan_count, inf_count, fp_0 .. fp_7]      (STAT_LEN = 14 numbers)

The dumper keeps these vectors in a list and moves them to the host once per step (``torch.stack(...).tolist()``);
``to_tensor_stats`` turns one row into a ``model.TensorStats``. The fingerprint is defined in ``precision.model``.

Passes over the data: ``aminmax`` (1), ``linalg.vector_norm`` (1) and one skinny matrix product ``W^T X`` with
``W = [1, u_0, u_1]`` (1), which gives the sum and the two row-weighted column sums the fingerprint is made of.
NaN/Inf counts: on the CPU they are counted only when the norm is not finite (reading one number there costs
nothing); on other devices two more reductions run on the device, so the host is never waited for per tensor.
"""

from __future__ import annotations

import math

import torch

from ascendify.precision.model import FINGERPRINT_COLS, FINGERPRINT_ROWS, TensorStats

STAT_LEN = 6 + FINGERPRINT_ROWS * FINGERPRINT_COLS
_MASK = (1 << 32) - 1

_weights_cache: dict[tuple[str, int, int], tuple[torch.Tensor, torch.Tensor]] = {}


def position_weights_list(n: int, salt: int) -> list[float]:
    """``n`` fixed weights in [-1, 1) from an integer hash of (position, salt): the same on every machine."""
    out = []
    for i in range(n):
        h = (i * 2654435761 + salt * 40503 + 0x9E3779B9) & _MASK
        h ^= h >> 16
        h = (h * 0x45D9F3B) & _MASK
        h ^= h >> 16
        out.append(h / 2**31 - 1.0)
    return out


def _hash_weights(n: int, salt: int) -> torch.Tensor:
    i = torch.arange(n, dtype=torch.int64)
    h = (i * 2654435761 + salt * 40503 + 0x9E3779B9) & _MASK
    h = h ^ (h >> 16)
    h = (h * 0x45D9F3B) & _MASK
    h = h ^ (h >> 16)
    return (h.to(torch.float64) / 2**31 - 1.0).to(torch.float32)


def position_weights(r: int, c: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``W`` (``r x 3``: a column of ones, then U) and ``V`` (``c x 4``) on ``device``, built once per size."""
    key = (str(device), r, c)
    w = _weights_cache.get(key)
    if w is None:
        with torch._C.DisableTorchFunction():
            u = torch.stack([torch.ones(r), *[_hash_weights(r, 1 + a) for a in range(FINGERPRINT_ROWS)]], dim=1)
            v = torch.stack([_hash_weights(c, 101 + b) for b in range(FINGERPRINT_COLS)], dim=1)
            w = (u.to(device), v.to(device))
        if len(_weights_cache) > 4096:
            _weights_cache.clear()
        _weights_cache[key] = w
    return w


_FLOAT_OK = {torch.float32}


def stat_vector(t: torch.Tensor) -> torch.Tensor | None:
    """The statistics vector of ``t`` (see the module docstring), or None for empty/complex/unsupported tensors.

    Call with grad disabled, torch-function handling disabled and autocast off (the dumper does this).
    """
    n = t.numel()
    if n == 0 or t.is_complex() or t.layout != torch.strided:
        return None
    x = t.detach()
    if x.dtype not in _FLOAT_OK:
        x = x.to(torch.float32)
    c = x.shape[-1] if x.dim() >= 2 else n
    r = n // c
    m = x.reshape(r, c)
    w, v = position_weights(r, c, x.device)
    mn, mx = torch.aminmax(m)
    norm = torch.linalg.vector_norm(m)
    s = torch.mm(w.t(), m)  # (3, c): column sums, and two row-weighted column sums
    fp = torch.mm(s[1:], v).reshape(-1) / math.sqrt(n)
    total = s[0].sum()
    if x.device.type == "cpu":
        if math.isfinite(norm.item()):
            counts = torch.zeros(2)
        else:
            counts = torch.stack([torch.isnan(m).sum(), torch.isinf(m).sum()]).to(torch.float32)
    else:
        counts = torch.stack([torch.isnan(m).sum(), torch.isinf(m).sum()]).to(torch.float32)
    return torch.cat([torch.stack([mn, mx, total, norm]), counts, fp])


def _f(v: float) -> float | None:
    return v


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
