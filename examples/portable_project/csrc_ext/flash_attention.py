"""Causal attention through ``F.scaled_dot_product_attention``: every backend maps it to its own fused
kernel (flash attention on CUDA, the fusion-attention operator on Ascend, ...)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
