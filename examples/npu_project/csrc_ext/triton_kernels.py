"""Residual add + RMSNorm.

The CUDA project's triton kernel is dropped (triton-ascend is a separate stack): this PyTorch version runs on
the NPU; wrap the caller in ``torch.compile`` to fuse it where a compiler backend exists.
"""

from __future__ import annotations

import torch


def add_rmsnorm_reference(x, residual, weight, eps=1e-6):
    h = (x + residual).float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6):
    return add_rmsnorm_reference(x, residual, weight, eps)
