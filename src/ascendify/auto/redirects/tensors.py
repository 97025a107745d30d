"""Tensor, Module and Storage methods: ``.cuda()``, ``.to()``, ``new_*``, ``.is_cuda``, ``.type()``.

These are the hottest patches (``x.to(device)`` runs every step), so each wrapper checks the argument type
first and only calls into the mapper when a CUDA value can be there.
"""

from __future__ import annotations

import functools
from typing import Any

from ascendify.auto.record import caller_is_user

NEW_METHODS = ("new_empty", "new_empty_strided", "new_full", "new_ones", "new_tensor", "new_zeros")


def install(s) -> None:
    import torch

    m = s.mapper
    Device = s.Device
    Tensor = torch.Tensor
    Module = torch.nn.Module
    target = s.target
    P = s.patches

    # ---- Tensor.to / Module.to: first positional may be a device (str, torch.device, int index) ----
    def wrap_to(fn, api: str):
        @functools.wraps(fn)
        def to(self, *args: Any, **kwargs: Any):
            if args:
                a = args[0]
                t = type(a)
                if t is str or t is Device or t is int:
                    args = (m.map(a, api, True),) + args[1:]
            if kwargs:
                d = kwargs.get("device")
                if d is not None:
                    kwargs["device"] = m.map(d, api, True)
            return fn(self, *args, **kwargs)

        return to

    tensor_to = Tensor.to
    module_to = Module.to
    P.set(Tensor, "to", wrap_to(tensor_to, "Tensor.to"))
    P.set(Module, "to", wrap_to(module_to, "Module.to"))

    from ascendify.auto.redirects.factories import wrap_device_kw

    for name in NEW_METHODS:
        P.set(Tensor, name, wrap_device_kw(getattr(Tensor, name), f"Tensor.{name}", m))
    P.set(Module, "to_empty", wrap_device_kw(Module.to_empty, "Module.to_empty", m))

    pin = Tensor.pin_memory

    @functools.wraps(pin)
    def pin_memory(self, *args: Any, **kwargs: Any):
        if args:
            args = (m.map(args[0], "Tensor.pin_memory"),) + args[1:]
        elif kwargs.get("device") is not None:
            kwargs["device"] = m.map(kwargs["device"], "Tensor.pin_memory")
        return pin(self, *args, **kwargs)

    def pin_memory_cpu(self, *args: Any, **kwargs: Any):
        s.rec.noop("Tensor.pin_memory", "no accelerator to pin memory for on cpu: returns the tensor itself")
        return self

    P.set(Tensor, "pin_memory", pin_memory_cpu if target.device_type == "cpu" else pin_memory)

    if target.device_type == "cpu":
        real_record_stream = Tensor.record_stream

        def record_stream(self, stream: Any):
            if not isinstance(stream, torch.Stream):  # the cpu stand-in of torch.cuda.Stream
                s.rec.noop("Tensor.record_stream", "no streams on cpu: nothing to record")
                return None
            return real_record_stream(self, stream)

        P.set(Tensor, "record_stream", record_stream)

    # ---- .cuda() ----
    def target_for(device: Any, api: str):
        if device is None:
            return target.device_str(None)
        if type(device) is int:
            return target.device_str(device)
        return m.map(device, api, True)

    def tensor_cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
        s.rec.hit("Tensor.cuda", target.device_type)
        return tensor_to(self, target_for(device, "Tensor.cuda"), non_blocking=non_blocking,
                         memory_format=memory_format)

    def module_cuda(self, device=None):
        s.rec.hit("Module.cuda", target.device_type)
        return module_to(self, target_for(device, "Module.cuda"))

    tensor_cuda.__doc__ = f"Redirected by ascendify: moves to {target.device_type} (see docs/auto.md)."
    module_cuda.__doc__ = tensor_cuda.__doc__
    P.set(Tensor, "cuda", tensor_cuda)
    P.set(Module, "cuda", module_cuda)

    for storage_cls in (torch.UntypedStorage, torch.TypedStorage):
        def storage_cuda(self, device=None, non_blocking=False, _api=f"{storage_cls.__name__}.cuda"):
            s.rec.hit(_api, target.device_type)
            return self.to(device=target_for(device, _api), non_blocking=non_blocking)

        P.set(storage_cls, "cuda", storage_cuda)

    # ---- .is_cuda: user code asks "is it on the accelerator?"; libraries get the truth ----
    real_is_cuda = Tensor.is_cuda
    dev_type = target.device_type

    def is_cuda(self) -> bool:
        if caller_is_user(2):
            s.rec.hit("Tensor.is_cuda", f"device.type == {dev_type!r}")
            return self.device.type == dev_type
        return real_is_cuda.__get__(self)

    P.set(Tensor, "is_cuda", property(is_cuda, doc="Redirected by ascendify (see docs/auto.md)."))

    # ---- .type("torch.cuda.FloatTensor") / .type(torch.cuda.FloatTensor) ----
    real_type = Tensor.type
    legacy = s.legacy_types  # name -> dtype, filled by cuda_api

    @functools.wraps(real_type)
    def tensor_type(self, dtype=None, non_blocking=False, **kwargs: Any):
        name = dtype if isinstance(dtype, str) else getattr(dtype, "_ascendify_legacy", None)
        if name and name.startswith("torch.cuda."):
            dt = legacy.get(name.rsplit(".", 1)[1])
            if dt is not None:
                s.rec.hit("Tensor.type(torch.cuda.*Tensor)", target.device_type)
                return tensor_to(self, target.device_str(None), dtype=dt, non_blocking=non_blocking)
        if dtype is None:
            return real_type(self)
        return real_type(self, dtype, non_blocking, **kwargs)

    P.set(Tensor, "type", tensor_type)

    # LazyModules' uninitialized parameters allow a fixed list of Tensor methods: allow our wrappers as well
    from torch.nn.parameter import UninitializedTensorMixin

    allowed = UninitializedTensorMixin._allowed_methods
    originals = {"to": tensor_to, "cuda": None, "pin_memory": pin, "type": real_type}
    extra = []
    for name, orig in originals.items():
        wrapper = getattr(Tensor, name)
        if orig is None or orig in allowed:
            extra.append(wrapper)
    P.set(UninitializedTensorMixin, "_allowed_methods", list(allowed) + extra)
