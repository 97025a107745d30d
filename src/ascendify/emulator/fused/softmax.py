"""Masked softmax kernels of BERT-era attention: ``npu_scaled_masked_softmax`` and
``npu_dropout_with_add_softmax``.

- ``npu_scaled_masked_softmax(x, mask, scale)``: ``softmax((x * scale).masked_fill(mask, -10000), -1)`` in
  float32, returned in x's dtype (mask True = masked; Huawei's golden fills -10000, so a fully masked row is
  uniform);
- ``npu_dropout_with_add_softmax(self, x1, alpha, prob, dim)``: ``softmax = softmax(x1 + alpha * self, dim)``,
  ``dropout = softmax * mask / (1 - prob)`` with ``mask`` (uint8, 1 = kept) drawn from the device generator;
  returns ``(mask, softmax, dropout)``.
"""

from __future__ import annotations

import torch

from ascendify.emulator.fused._check import FLOATS, check, dtype_in, same_device


def _nchw_hw(x: torch.Tensor) -> tuple[int, int]:
    """H and W of ``x`` viewed as NCHW (the last two axes)."""
    if x.dim() >= 2:
        return x.shape[-2], x.shape[-1]
    return 1, x.shape[-1]


def npu_scaled_masked_softmax(x, mask, scale=1, fixed_triu_mask=False):
    op = "npu_scaled_masked_softmax"
    dtype_in(x, FLOATS, op, "x")
    same_device(op, x, mask=mask)
    check(mask.dtype == torch.bool, op, f"the dtype of mask must be bool, but got {mask.dtype}")
    check(not fixed_triu_mask, op, "fixed_triu_mask is reserved and only supports False")
    for axis, size in zip("HW", _nchw_hw(x), strict=True):
        check(32 <= size <= 4096 and size % 32 == 0, op,
              f"the {axis} axis of x (as NCHW) must be in [32, 4096] and a multiple of 32, but got {size}")
    try:
        torch.broadcast_shapes(mask.shape, x.shape)
    except RuntimeError:
        check(False, op, f"mask of shape {tuple(mask.shape)} cannot be broadcast to x {tuple(x.shape)}")
    ct = torch.float64 if x.dtype == torch.float64 else torch.float32
    s = (x.to(ct) * float(scale)).masked_fill(mask, -10000.0)
    return torch.softmax(s, -1).to(x.dtype)


def _keep_mask(shape, keep: float, device) -> torch.Tensor:
    if device.type == "npu":
        from ascendify.emulator.device import rng

        g = rng.generator(device.index or 0)
    else:
        g = torch.default_generator
    return (torch.rand(shape, generator=g) < keep).to(torch.uint8).to(device)


def npu_dropout_with_add_softmax(self, x1, alpha, prob, dim):
    op = "npu_dropout_with_add_softmax"
    dtype_in(self, FLOATS, op, "self")
    dtype_in(x1, FLOATS, op, "x1")
    same_device(op, self, x1=x1)
    check(self.shape == x1.shape, op, f"self {tuple(self.shape)} and x1 {tuple(x1.shape)} must have the same shape")
    check(self.dim() == 4, op, f"self must be 4 dimensional (N, C, H, W), but got {self.dim()}-dimensional")
    n, c, h, w = self.shape
    check(h in (128, 256, 384, 512) and w in (128, 256, 384, 512), op,
          f"H and W must each be one of 128, 256, 384, 512, but got {h} and {w}")
    check((n * c) % 32 == 0, op, f"N * C must be a multiple of 32, but got {n * c}")
    check(dim == -1 or dim == 3, op, f"dim must be -1, but got {dim}")
    check(0 <= prob < 1, op, f"prob must be in [0, 1), but got {prob}")
    ct = torch.float64 if self.dtype == torch.float64 else torch.float32
    softmax = torch.softmax(x1.to(ct) + float(alpha) * self.to(ct), -1)
    mask = _keep_mask(self.shape, 1.0 - float(prob), self.device)
    dropout = softmax * mask / (1.0 - float(prob))
    return mask, softmax.to(self.dtype), dropout.to(self.dtype)


def npu_top_k_top_p(logits, p=None, k=None):
    """Top-k then top-p filtering of ``logits`` [B, V] (float32 arithmetic): values below each row's k-th
    largest become -inf; of the rest, after a softmax, the smallest ones whose cumulative probability (from the
    smallest) is at most ``1 - p`` become -inf too, always keeping the largest; the result is in the original
    order (the documented formula's final gather read as the scatter back it describes)."""
    op = "npu_top_k_top_p"
    dtype_in(logits, FLOATS, op, "logits")
    same_device(op, logits, p=p, k=k)
    check(logits.dim() == 2, op, f"logits must be 2 dimensional, but got {logits.dim()}")
    b, v = logits.shape
    sorted_v, idx = torch.sort(logits.float(), dim=-1, stable=True)
    if k is not None:
        check(k.dtype == torch.int32 and k.shape == (b,), op, "k must be 1-D int32 with one value per row")
        kk = k.long()
        check(bool(((kk >= 1) & (kk <= min(1024, v))).all()), op, f"k must be in [1, min(1024, {v})]")
        thresh = sorted_v.gather(1, (v - kk)[:, None])
        sorted_v = sorted_v.masked_fill(sorted_v < thresh, float("-inf"))
    if p is not None:
        check(p.dtype == logits.dtype and p.shape == (b,), op, "p must be 1-D with logits' dtype, one value per row")
        probs = torch.softmax(sorted_v, -1)
        cum = torch.cumsum(probs, -1)
        drop = cum <= (1 - p.float())[:, None]
        drop[:, -1] = False
        sorted_v = sorted_v.masked_fill(drop, float("-inf"))
    out = torch.empty_like(sorted_v).scatter_(1, idx, sorted_v)
    return out.to(logits.dtype)
