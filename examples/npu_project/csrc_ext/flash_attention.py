"""Causal attention through torch_npu's fused attention operator when it applies, SDPA otherwise.

``torch_npu.npu_fusion_attention`` takes fp16/bf16 inputs; with layout "BNSD" it accepts the model's
(batch, heads, seq, head_dim) tensors directly. The causal mask is a boolean (seq, seq) matrix with True above
the diagonal (positions that may not be attended).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import torch_npu


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True) -> torch.Tensor:
    if q.device.type == "npu" and q.dtype in (torch.float16, torch.bfloat16):
        seq = q.size(2)
        mask = None
        if causal:
            mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool, device=q.device), diagonal=1)
        out = torch_npu.npu_fusion_attention(q, k, v, q.size(1), "BNSD", atten_mask=mask,
                                             scale=1.0 / math.sqrt(q.size(-1)), keep_prob=1.0)
        return out[0]
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
