"""``scaled_dot_product_attention`` on the emulated npu takes the CPU's path.

PyTorch picks the SDPA implementation per device type: for PrivateUse1 it always takes the unfused "math"
path, while the CPU uses its flash-attention kernel when it can. Same inputs would then give (slightly)
different numbers on ``npu`` and ``cpu``. These kernels, registered for ``AutogradPrivateUse1`` and
``PrivateUse1`` (the op table's entry), ask the CPU's chooser (``_fused_sdp_choice`` on CPU aliases that require grad where the npu
tensors do, as the CPU's own call sees them) and follow it, so the emulator stays bit-identical to the CPU.
(A real NPU runs its own fused attention; its numerics are not modelled.)
"""

from __future__ import annotations

import torch

from ascendify.emulator.device.tensors import cpu_alias

_FLASH = 1  # sdp::SDPBackend::flash_attention


def _bool_mask_to_float(mask, dtype):
    if mask is not None and mask.dtype == torch.bool:
        zero = torch.scalar_tensor(0.0, dtype=dtype, device=mask.device)
        return torch.where(mask.logical_not(), -float("inf"), zero)
    return mask


def _chooser_input(t):
    """What the CPU's chooser sees for ``t`` on the CPU: a CPU alias, requiring grad where ``t`` does (the
    chooser avoids flash attention when the mask needs a gradient, which flash cannot give)."""
    if t is None or t.get_device() < 0:
        return t
    c = cpu_alias(t.detach())
    return c.requires_grad_() if t.requires_grad else c


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    aten = torch.ops.aten
    choice = aten._fused_sdp_choice.default(
        _chooser_input(query), _chooser_input(key), _chooser_input(value), _chooser_input(attn_mask),
        dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa,
    )
    mask = _bool_mask_to_float(attn_mask, query.dtype)
    if choice == _FLASH:
        return aten._scaled_dot_product_flash_attention_for_cpu.default(
            query, key, value, dropout_p, is_causal, attn_mask=mask, scale=scale
        )[0]
    return aten._scaled_dot_product_attention_math.default(
        query, key, value, mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa
    )[0]
