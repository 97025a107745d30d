"""``npu_rotary_mul``: rotary position embedding, ``out = x * r1 + rotate(x) * r2`` (r1 = cos, r2 = sin).

``rotary_mode`` ``'half'``: ``rotate(x) = cat(-x2, x1)`` of the two halves of the last axis (HF
``rotate_half``); ``'interleave'``: pairs (even, odd) become (-odd, even); a 2-D ``rotate`` matrix replaces both:
``rotate(x) = x @ rotate``. r1/r2 broadcast to x (11SD, B1SD, BNSD... for BNSD x). Gradients by autograd.
"""

from __future__ import annotations

import torch

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
