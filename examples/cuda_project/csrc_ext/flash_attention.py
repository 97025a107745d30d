"""Causal attention through the flash-attn package when it is installed, SDPA otherwise.

flash-attn wants (batch, seq, heads, head_dim) in fp16/bf16 on an Ampere-or-newer GPU; the model uses
(batch, heads, seq, head_dim), so the wrapper transposes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

try:
    from flash_attn import flash_attn_func

    HAVE_FLASH_ATTN = True
except ImportError:
    HAVE_FLASH_ATTN = False


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True) -> torch.Tensor:
    if HAVE_FLASH_ATTN and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16):
        out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), dropout_p=0.0,
                              causal=causal)
        return out.transpose(1, 2)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
