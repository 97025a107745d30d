"""``torch.npu.amp``: ``autocast``, ``GradScaler``, ``custom_fwd``/``custom_bwd`` for the ``npu`` device.

They are PyTorch's device-generic AMP pieces bound to ``npu``; which ops autocast casts is decided by the
kernels on ``AutocastPrivateUse1`` (torch_npu's op lists, installed by ``ascendify.emulator.ops.autocast``).
"""

from __future__ import annotations

import functools

import torch


class autocast(torch.amp.autocast):  # noqa: N801 - torch's name
    """``torch.npu.amp.autocast(enabled=True, dtype=torch.float16, cache_enabled=True)``."""

    def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True):
        super().__init__("npu", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """``torch.npu.amp.GradScaler``: :class:`torch.amp.GradScaler` on ``npu``."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True, dynamic: bool = True):
        if not dynamic:
            raise NotImplementedError(
                "torch.npu.amp.GradScaler(dynamic=False) (a static loss scale) is not emulated; "
                "use the default dynamic scaling"
            )
        super().__init__("npu", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)


def custom_fwd(fwd=None, *, cast_inputs=None):
    """``torch.npu.amp.custom_fwd``: :func:`torch.amp.custom_fwd` with ``device_type="npu"``."""
    if fwd is None:
        return functools.partial(custom_fwd, cast_inputs=cast_inputs)
    return torch.amp.custom_fwd(fwd, device_type="npu", cast_inputs=cast_inputs)


def custom_bwd(bwd=None):
    """``torch.npu.amp.custom_bwd``: :func:`torch.amp.custom_bwd` with ``device_type="npu"``."""
    if bwd is None:
        return custom_bwd
    return torch.amp.custom_bwd(bwd, device_type="npu")
