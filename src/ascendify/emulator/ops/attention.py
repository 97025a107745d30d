"""``scaled_dot_product_attention`` on the emulated npu takes the CPU's path.

PyTorch picks the SDPA implementation per device type: for PrivateUse1 it always takes the unfused "math"
path, while the CPU uses its flash-attention kernel when it can. Same inputs would then give (slightly)
different numbers on ``npu`` and ``cpu``. These kernels, registered for ``AutogradPrivateUse1`` and
``PrivateUse1`` (the op table's entry), ask the CPU's chooser (``_fused_sdp_choice`` on CPU aliases that require grad where the npu
tensors do, as the CPU's own call sees them) and follow it, so the emulator stays bit-identical to the CPU.
(A real NPU runs its own fused attention; its numerics are not modelled.)
"""

from __future__ import annotations

import sys

import torch

from ascendify.emulator.device.tensors import cpu_alias

_FLASH = 1  # sdp::SDPBackend::flash_attention


def _bool_mask_to_float(mask, dtype):
    if mask is not None and mask.dtype == torch.bool:
        zero = torch.scalar_tensor(0.0, dtype=dtype, device=mask.device)
        return torch.where(mask.logical_not(), -float("inf"), zero)
    return mask


def _is_traced(t) -> bool:
    """A FakeTensor / FunctionalTensor of Dynamo and AOTAutograd tracing (it has no data pointer)."""
    from torch._subclasses.fake_tensor import is_fake

    return is_fake(t) or torch._is_functional_tensor(t) or type(t) is not torch.Tensor and not isinstance(
        t, torch.nn.Parameter)


def _chooser_input(t):
    """What the CPU's chooser sees for ``t`` on the CPU: a CPU alias, requiring grad where ``t`` does (the
    chooser avoids flash attention when the mask needs a gradient, which flash cannot give)."""
    if t is None or t.get_device() < 0:
        return t
    if _is_traced(t):  # torch.compile tracing: no data, only the metadata the chooser reads
        c = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="cpu")
        return c.requires_grad_() if t.requires_grad else c
    c = cpu_alias(t.detach())
    return c.requires_grad_() if t.requires_grad else c


def _choose(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa) -> int:
    return torch.ops.aten._fused_sdp_choice.default(
        _chooser_input(query), _chooser_input(key), _chooser_input(value), _chooser_input(attn_mask),
        dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa,
    )


def _is_dtensor(t) -> bool:
    mod = sys.modules.get("torch.distributed.tensor")
    cls = getattr(mod, "DTensor", None) if mod is not None else None
    return cls is not None and isinstance(t, cls)


_dtensor_rules: list = []


def dtensor_rules() -> bool:
    """Sharding rules for the CPU's flash-attention pair, which this kernel runs for npu tensors: DTensor knows
    CUDA's flash/efficient/cuDNN attention ops but not the CPU's, so tensor-parallel attention (heads sharded,
    ``Shard(1)``), batch sharding (``Shard(0)``) and replication get the rules CUDA's flash op has. Registered
    at the first DTensor seen; False where this torch has no such API (DTensor then says what it lacks)."""
    if _dtensor_rules:
        return _dtensor_rules[0]
    try:
        from torch.distributed.tensor._op_schema import RuntimeSchemaInfo
        from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy, register_op_strategy
        from torch.distributed.tensor.placement_types import Replicate, Shard
    except ImportError:
        _dtensor_rules.append(False)
        return False
    aten = torch.ops.aten

    @register_op_strategy(aten._scaled_dot_product_flash_attention_for_cpu.default,
                          schema_info=RuntimeSchemaInfo(3))
    def _forward(op_schema):
        # placements of [output, logsumexp, query, key, value]
        lists = [[Replicate()] * 5, [Shard(1)] * 5, [Shard(0)] * 5]
        return expand_to_full_mesh_op_strategy(op_schema.get_mesh_from_args(), op_schema, lists, input_index=2)

    @register_op_strategy(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
    def _backward(op_schema):
        # [grad_q, grad_k, grad_v, grad_out, query, key, value, out, logsumexp]
        lists = [[Replicate()] * 9, [Shard(1)] * 9, [Shard(0)] * 9]
        return expand_to_full_mesh_op_strategy(op_schema.get_mesh_from_args(validate=False), op_schema, lists,
                                               input_index=3)

    _dtensor_rules.append(True)
    return True


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    aten = torch.ops.aten
    if not _dtensor_rules and any(_is_dtensor(t) for t in (query, key, value, attn_mask)):
        dtensor_rules()
    if any(t is not None and _is_traced(t) for t in (query, key, value, attn_mask)):
        # torch.compile tracing: ask the chooser outside the trace, on real (empty) CPU tensors of the same
        # metadata, so the traced graph records the path the CPU takes and no chooser call
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

        with unset_fake_temporarily(), disable_proxy_modes_tracing(), torch._C._DisableFuncTorch():
            choice = _choose(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    else:
        choice = _choose(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    mask = _bool_mask_to_float(attn_mask, query.dtype)
    if choice == _FLASH:
        return aten._scaled_dot_product_flash_attention_for_cpu.default(
            query, key, value, dropout_p, is_causal, attn_mask=mask, scale=scale
        )[0]
    return aten._scaled_dot_product_attention_math.default(
        query, key, value, mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa
    )[0]
