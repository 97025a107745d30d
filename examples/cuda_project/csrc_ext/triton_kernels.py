"""A triton kernel for the fused residual-add + RMSNorm used by bigger variants of the GPT model.

Guarded: without triton (or without a GPU) ``add_rmsnorm`` uses the PyTorch reference.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except ImportError:
    HAVE_TRITON = False


if HAVE_TRITON:

    @triton.jit
    def _add_rmsnorm_kernel(x_ptr, r_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        h = x + r
        rms = tl.sqrt(tl.sum(h * h, axis=0) / n_cols + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=1.0).to(tl.float32)
        tl.store(out_ptr + row * n_cols + cols, (h / rms) * w, mask=mask)


def add_rmsnorm_reference(x, residual, weight, eps=1e-6):
    h = (x + residual).float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6):
    if not (HAVE_TRITON and x.is_cuda):
        return add_rmsnorm_reference(x, residual, weight, eps)
    x2, r2 = x.reshape(-1, x.shape[-1]).contiguous(), residual.reshape(-1, x.shape[-1]).contiguous()
    out = torch.empty_like(x2, dtype=torch.float32)
    block = triton.next_power_of_2(x2.shape[-1])
    _add_rmsnorm_kernel[(x2.shape[0],)](x2, r2, weight, out, x2.shape[-1], eps, BLOCK=block)
    return out.to(x.dtype).view_as(x)
