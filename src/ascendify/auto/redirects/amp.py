"""Mixed precision: ``autocast("cuda")``, ``GradScaler("cuda")`` (and their ``torch.cuda.amp`` forms), helpers.

The base classes' ``__init__`` are wrapped, so ``torch.autocast``, ``torch.amp.autocast``,
``torch.cuda.amp.autocast`` and subclasses are all covered. A CUDA autocast with no dtype keeps CUDA's dtype
(float16 unless changed with ``torch.set_autocast_dtype("cuda", ...)``): the code meant that precision, whatever
the target's own default is. ``torch.amp.GradScaler()`` with no device means CUDA, so it is mapped too.
"""

from __future__ import annotations

import functools
from typing import Any


def install(s) -> None:
    import torch
    import torch.amp.autocast_mode as am
    import torch.amp.grad_scaler as gs

    m = s.mapper
    P = s.patches
    dev = s.target.device_type
    real_get_dtype = torch.get_autocast_dtype

    autocast = am.autocast
    ac_init = autocast.__init__

    @functools.wraps(ac_init)
    def autocast_init(self, device_type: str, dtype: Any = None, enabled: bool = True, cache_enabled: Any = None):
        if type(device_type) is str and device_type[:4] == "cuda":
            if dtype is None:
                dtype = real_get_dtype("cuda")
            device_type = m.map(device_type, "torch.autocast")
        return ac_init(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    P.set(autocast, "__init__", autocast_init)

    scaler = gs.GradScaler
    gs_init = scaler.__init__

    @functools.wraps(gs_init)
    def scaler_init(self, *args: Any, **kwargs: Any):
        if args:
            args = (m.map(args[0], "torch.amp.GradScaler"),) + args[1:]
        else:
            kwargs["device"] = m.map(kwargs.get("device", "cuda"), "torch.amp.GradScaler")
        return gs_init(self, *args, **kwargs)

    P.set(scaler, "__init__", scaler_init)

    for owner in (torch.amp, am):
        for name in ("custom_fwd", "custom_bwd"):
            fn = getattr(owner, name, None)
            if fn is None:
                continue

            def make(fn=fn, api=f"torch.amp.{name}"):
                @functools.wraps(fn)
                def w(*args: Any, **kwargs: Any):
                    if kwargs.get("device_type") is not None:
                        kwargs["device_type"] = m.map(kwargs["device_type"], api)
                    return fn(*args, **kwargs)

                return w

            P.set(owner, name, make())

    # torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"), ...; no device = the GPU (legacy)
    def device_first(name: str, legacy_no_arg: bool) -> None:
        fn = getattr(torch, name, None)
        if fn is None:
            return
        api = f"torch.{name}"

        @functools.wraps(fn)
        def w(*args: Any, **kwargs: Any):
            if args and type(args[0]) is str:
                args = (m.map(args[0], api),) + args[1:]
            elif legacy_no_arg and not args and not kwargs:
                s.rec.hit(api, dev)
                return fn(dev)
            return fn(*args, **kwargs)

        P.set(torch, name, w)

    device_first("is_autocast_enabled", True)
    device_first("get_autocast_dtype", False)
    device_first("set_autocast_dtype", False)
    device_first("set_autocast_enabled", False)

    def gpu_dtype() -> Any:
        s.rec.hit("torch.get_autocast_gpu_dtype", dev)
        return real_get_dtype(dev)

    real_set_dtype = torch.set_autocast_dtype

    def set_gpu_dtype(dtype: Any) -> None:
        s.rec.hit("torch.set_autocast_gpu_dtype", dev)
        real_set_dtype(dev, dtype)

    P.set(torch, "get_autocast_gpu_dtype", gpu_dtype)
    P.set(torch, "set_autocast_gpu_dtype", set_gpu_dtype)
