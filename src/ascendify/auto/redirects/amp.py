"""Mixed precision: ``autocast("cuda")``, ``GradScaler("cuda")`` (and their ``torch.cuda.amp`` forms), helpers.

The base classes' ``__init__`` are wrapped, so ``torch.autocast``, ``torch.amp.autocast``,
``torch.cuda.amp.autocast`` and subclasses are all covered. A CUDA autocast with no dtype keeps CUDA's dtype
(float16 unless changed with ``torch.set_autocast_dtype("cuda", ...)``): the code meant that precision, whatever
the target's own default is. ``torch.amp.GradScaler()`` with no device means CUDA, so it is mapped too.
"""

from __future__ import annotations

import functools
from typing import Any

# torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"), ...: name -> no device means the GPU
DEVICE_FIRST = {"is_autocast_enabled": True, "get_autocast_dtype": False, "set_autocast_dtype": False,
                "set_autocast_enabled": False}


def install(s) -> None:
    import torch

    real_get_dtype = torch.get_autocast_dtype
    _patch_autocast(s, real_get_dtype)
    _patch_grad_scaler(s)
    _patch_custom_fwd_bwd(s)
    for name, legacy_no_arg in DEVICE_FIRST.items():
        _patch_device_first(s, name, legacy_no_arg)
    _patch_gpu_dtype(s, real_get_dtype, torch.set_autocast_dtype)


def _patch_autocast(s, real_get_dtype) -> None:
    """``autocast("cuda")`` with no dtype keeps CUDA's dtype on the target."""
    import torch.amp.autocast_mode as am

    m = s.mapper
    autocast = am.autocast
    ac_init = autocast.__init__

    @functools.wraps(ac_init)
    def autocast_init(self, device_type: str, dtype: Any = None, enabled: bool = True, cache_enabled: Any = None):
        if type(device_type) is str and device_type[:4] == "cuda":
            if dtype is None:
                dtype = real_get_dtype("cuda")
            device_type = m.map(device_type, "torch.autocast")
        return ac_init(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    s.patches.set(autocast, "__init__", autocast_init)


def _patch_grad_scaler(s) -> None:
    """``GradScaler("cuda")``, and ``GradScaler()`` (no device means CUDA)."""
    import torch.amp.grad_scaler as gs

    m = s.mapper
    scaler = gs.GradScaler
    gs_init = scaler.__init__

    @functools.wraps(gs_init)
    def scaler_init(self, *args: Any, **kwargs: Any):
        if args:
            args = (m.map(args[0], "torch.amp.GradScaler"),) + args[1:]
        else:
            kwargs["device"] = m.map(kwargs.get("device", "cuda"), "torch.amp.GradScaler")
        return gs_init(self, *args, **kwargs)

    s.patches.set(scaler, "__init__", scaler_init)


def _map_device_type_kw(fn, api: str, m):
    @functools.wraps(fn)
    def w(*args: Any, **kwargs: Any):
        if kwargs.get("device_type") is not None:
            kwargs["device_type"] = m.map(kwargs["device_type"], api)
        return fn(*args, **kwargs)

    return w


def _patch_custom_fwd_bwd(s) -> None:
    """``torch.amp.custom_fwd(device_type="cuda")`` / ``custom_bwd``."""
    import torch
    import torch.amp.autocast_mode as am

    for owner in (torch.amp, am):
        for name in ("custom_fwd", "custom_bwd"):
            fn = getattr(owner, name, None)
            if fn is not None:
                s.patches.set(owner, name, _map_device_type_kw(fn, f"torch.amp.{name}", s.mapper))


def _patch_device_first(s, name: str, legacy_no_arg: bool) -> None:
    """``torch.<name>("cuda", ...)`` -> the target; ``legacy_no_arg``: no argument at all means the GPU."""
    import torch

    fn = getattr(torch, name, None)
    if fn is None:
        return
    m, dev = s.mapper, s.target.device_type
    api = f"torch.{name}"

    @functools.wraps(fn)
    def w(*args: Any, **kwargs: Any):
        if args and type(args[0]) is str:
            args = (m.map(args[0], api),) + args[1:]
        elif legacy_no_arg and not args and not kwargs:
            s.rec.hit(api, dev)
            return fn(dev)
        return fn(*args, **kwargs)

    s.patches.set(torch, name, w)


def _patch_gpu_dtype(s, real_get_dtype, real_set_dtype) -> None:
    """``torch.get_autocast_gpu_dtype()`` / ``set_autocast_gpu_dtype(dtype)``: the target's."""
    import torch

    dev = s.target.device_type

    def gpu_dtype() -> Any:
        s.rec.hit("torch.get_autocast_gpu_dtype", dev)
        return real_get_dtype(dev)

    def set_gpu_dtype(dtype: Any) -> None:
        s.rec.hit("torch.set_autocast_gpu_dtype", dev)
        real_set_dtype(dev, dtype)

    s.patches.set(torch, "get_autocast_gpu_dtype", gpu_dtype)
    s.patches.set(torch, "set_autocast_gpu_dtype", set_gpu_dtype)
