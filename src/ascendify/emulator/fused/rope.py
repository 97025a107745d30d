"""``npu_rotary_mul``: rotary position embedding, ``out = x * r1 + rotate(x) * r2`` (r1 = cos, r2 = sin).

``rotary_mode`` ``'half'``: ``rotate(x) = cat(-x2, x1)`` of the two halves of the last axis (HF
``rotate_half``); ``'interleave'``: pairs (even, odd) become (-odd, even); a 2-D ``rotate`` matrix replaces both:
``rotate(x) = x @ rotate``. r1/r2 broadcast to x (11SD, B1SD, BNSD... for BNSD x). Gradients by autograd.
"""

from __future__ import annotations

import torch

from ascendify.emulator.errors import NotEmulatedError
from ascendify.emulator.fused._check import FLOATS, check, dtype_in, same_device


def _rotate(x: torch.Tensor, mode: str) -> torch.Tensor:
    if mode == "half":
        x1, x2 = x.chunk(2, -1)
        return torch.cat((-x2, x1), -1)
    return torch.stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)


def npu_rotary_mul(self, r1, r2, rotary_mode="half", rotate=None):
    op = "npu_rotary_mul"
    check(rotary_mode in ("half", "interleave"), op,
          f"rotary_mode must be 'half' or 'interleave', but got {rotary_mode!r}")
    for arg, t in (("input", self), ("r1", r1), ("r2", r2), ("rotate", rotate)):
        dtype_in(t, FLOATS, op, arg)
    same_device(op, self, r1=r1, r2=r2, rotate=rotate)
    check(r1.dtype == self.dtype and r2.dtype == self.dtype, op,
          f"input, r1 and r2 must have the same dtype, but got {self.dtype}, {r1.dtype} and {r2.dtype}")
    check(self.dim() in (3, 4), op, f"input must be 3 or 4 dimensional, but got {self.dim()}-dimensional")
    check(r1.dim() == self.dim() and r2.dim() == self.dim(), op,
          f"r1 and r2 must have the dims of input ({self.dim()}), but got {r1.dim()} and {r2.dim()}")
    d = self.shape[-1]
    check(d % 2 == 0, op, f"the last dim D of input must be even, but got {d}")
    check(d < 896, op, f"the last dim D of input must be less than 896, but got {d}")
    for arg, t in (("r1", r1), ("r2", r2)):
        check(t.shape[-1] == d and all(a in (1, b) for a, b in zip(t.shape, self.shape, strict=True)), op,
              f"{arg} of shape {tuple(t.shape)} must broadcast to input {tuple(self.shape)} with the same last dim")
    if rotate is not None:
        check(rotate.dim() == 2 and tuple(rotate.shape) == (d, d), op,
              f"rotate must be a ({d}, {d}) matrix, but got {tuple(rotate.shape)}")
        rot = torch.matmul(self, rotate)
    else:
        rot = _rotate(self, rotary_mode)
    return self * r1 + rot * r2


def npu_interleave_rope(x, cos, sin):
    """RoPE on interleaved pairs: ``q = x`` with each head's D values de-interleaved
    (``reshape(..., D/2, 2).transpose(-1, -2)``), then ``q * cos + rotate_half(q) * sin`` (float32 arithmetic).
    x ``[B, N, S, D]``, cos/sin ``[B, 1, S or 1, D]``, D = 64."""
    op = "npu_interleave_rope"
    dtype_in(x, (torch.float16, torch.bfloat16), op, "x")
    same_device(op, x, cos=cos, sin=sin)
    check(x.dim() == 4 and cos.dim() == 4 and sin.dim() == 4, op, "x, cos and sin must be 4 dimensional [B, N, S, D]")
    check(x.shape[-1] == cos.shape[-1] == sin.shape[-1] == 64, op,
          f"the D dim of x, cos and sin must be 64, but got {x.shape[-1]}, {cos.shape[-1]} and {sin.shape[-1]}")
    check(cos.shape[1] == 1 and sin.shape[1] == 1, op, "the N dim of cos and sin must be 1")
    check(cos.dtype == x.dtype and sin.dtype == x.dtype, op, "cos and sin must have x's dtype")
    b, n, s, d = x.shape
    q = x.float().reshape(b, n, s, d // 2, 2).transpose(-1, -2).reshape(b, n, s, d)
    return (q * cos.float() + _rotate(q, "half") * sin.float()).to(x.dtype)


def npu_apply_rotary_pos_emb(query, key, cos, sin, layout="BSND", rotary_mode="half"):
    """``query * cos + rotate(query) * sin`` and the same for ``key``, written back in place and returned
    (``(query, key)``); cos/sin broadcast over the head axis. A2/A3 take ``half`` mode and D of 64 or 128."""
    op = "npu_apply_rotary_pos_emb"
    for arg, t in (("query", query), ("key", key), ("cos", cos), ("sin", sin)):
        dtype_in(t, FLOATS, op, arg)
    same_device(op, query, key=key, cos=cos, sin=sin)
    check(layout in ("BSND", "SBND", "BNSD", "TND"), op, f"layout must be BSND, SBND, BNSD or TND, got {layout!r}")
    check(rotary_mode in ("half", "interleave", "quarter"), op,
          f"rotary_mode must be half, interleave or quarter, got {rotary_mode!r}")
    want = 3 if layout == "TND" else 4
    for arg, t in (("query", query), ("key", key), ("cos", cos), ("sin", sin)):
        check(t.dim() == want, op, f"{arg} must be {want} dimensional for layout {layout}, but got {t.dim()}")
    from ascendify.emulator.fused._check import chip, on_npu

    if on_npu(query) and chip() != "950":
        check(layout in ("BSND", "TND") and rotary_mode == "half", op,
              "this product supports layout BSND/TND and rotary_mode 'half' only")
        check(query.shape[-1] in (64, 128), op, f"the last dim D must be 64 or 128, but got {query.shape[-1]}")
    if rotary_mode == "quarter":
        raise NotEmulatedError(f"{op}: rotary_mode 'quarter' is not emulated by ascendify's emulated npu device")
    mode = "half" if rotary_mode == "half" else "interleave"
    c, s = cos.float(), sin.float()
    with torch.no_grad():
        for t in (query, key):
            f = t.float()
            t.copy_((f * c + _rotate(f, mode) * s).to(t.dtype))
    return query, key


def npu_mrope(positions, query, key, cos_sin_cache, head_size, *, mrope_section=None, rotary_mode="half",
              cache_mode="default"):
    """vLLM's rotary embedding with the cos/sin cache (``cos_sin_cache[positions]`` = cos | sin, rot_dim / 2
    each) on the first rot_dim of every head of query/key ``[T, N * head_size]``: RoPE for 1-D positions, and for
    ``[3 or 4, T]`` positions MRoPE, section i of the cos/sin taken from position row i
    (``mrope_section``, ``cache_mode`` ``default``). Returns ``(query_out, key_out)``."""
    op = "npu_mrope"
    dtype_in(query, FLOATS, op, "query")
    same_device(op, positions, query=query, key=key, cos_sin_cache=cos_sin_cache)
    check(rotary_mode in ("half", "interleave"), op, f"rotary_mode must be 'half' or 'interleave', got {rotary_mode!r}")
    check(cache_mode in ("default", None), op, f"cache_mode {cache_mode!r} is not emulated (default only)")
    cs = cos_sin_cache.float()[positions.long()]  # [T, rot] or [m, T, rot]
    cos, sin = cs.chunk(2, -1)
    if positions.dim() == 2:
        sec = list(mrope_section or ())
        check(len(sec) in (3, 4) and len(sec) == positions.shape[0] and sum(sec) == cos.shape[-1], op,
              f"mrope_section must have one size per positions row, summing to rot_dim / 2 ({cos.shape[-1]})")
        cos = torch.cat([m[i] for i, m in enumerate(cos.split(sec, -1))], -1)
        sin = torch.cat([m[i] for i, m in enumerate(sin.split(sec, -1))], -1)
    else:
        check(positions.dim() == 1, op, "positions must be 1-D (RoPE) or 2-D (MRoPE)")
    rot = cos.shape[-1] * 2
    outs = []
    for t in (query, key):
        x = t.float().reshape(t.shape[0], -1, head_size)
        r, rest = x[..., :rot], x[..., rot:]
        c, s = cos[:, None, :], sin[:, None, :]
        if rotary_mode == "half":
            x1, x2 = r.chunk(2, -1)
            r = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), -1)
        else:
            x1, x2 = r[..., 0::2], r[..., 1::2]
            r = torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), -1).flatten(-2)
        outs.append(torch.cat((r, rest), -1).reshape(t.shape).to(t.dtype))
    return outs[0], outs[1]
