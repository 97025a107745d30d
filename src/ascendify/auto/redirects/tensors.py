"""Tensor, Module and Storage methods: ``.cuda()``, ``.to()``, ``new_*``, ``.is_cuda``, ``.type()``.

These are the hottest patches (``x.to(device)`` runs every step), so each wrapper checks the argument type
first and only calls into the mapper when a CUDA value can be there.
"""

from __future__ import annotations

import functools
from typing import Any

from ascendify.auto.record import caller_is_user
from ascendify.core.patching import allow_on_lazy_parameters

NEW_METHODS = ("new_empty", "new_empty_strided", "new_full", "new_ones", "new_tensor", "new_zeros")


def install(s) -> None:
    import torch

    Tensor, Module = torch.Tensor, torch.nn.Module
    # the originals, captured before anything is patched: the wrappers below call them
    tensor_to, module_to, pin, real_type = Tensor.to, Module.to, Tensor.pin_memory, Tensor.type
    _patch_to(s, Tensor, Module)
    _patch_new_methods(s, Tensor, Module)
    _patch_pin_memory(s, Tensor, pin)
    if s.target.device_type == "cpu":
        _patch_record_stream(s, torch)
    _patch_cuda(s, torch, tensor_to, module_to)
    _patch_is_cuda(s, Tensor)
    _patch_type(s, Tensor, tensor_to, real_type)
    originals = {"to": tensor_to, "cuda": None, "pin_memory": pin, "type": real_type}
    allow_on_lazy_parameters(s.patches, [(orig, getattr(Tensor, name)) for name, orig in originals.items()])


def _wrap_to(fn, api: str, m, Device: type):
    """``Tensor.to`` / ``Module.to``: the first positional may be a device (str, torch.device, int index)."""

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


def _patch_to(s, Tensor: type, Module: type) -> None:
    s.patches.set(Tensor, "to", _wrap_to(Tensor.to, "Tensor.to", s.mapper, s.Device))
    s.patches.set(Module, "to", _wrap_to(Module.to, "Module.to", s.mapper, s.Device))


def _patch_new_methods(s, Tensor: type, Module: type) -> None:
    from ascendify.auto.redirects.factories import wrap_device_kw

    m = s.mapper
    for name in NEW_METHODS:
        s.patches.set(Tensor, name, wrap_device_kw(getattr(Tensor, name), f"Tensor.{name}", m))
    s.patches.set(Module, "to_empty", wrap_device_kw(Module.to_empty, "Module.to_empty", m))


def _patch_pin_memory(s, Tensor: type, pin) -> None:
    m = s.mapper

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

    s.patches.set(Tensor, "pin_memory", pin_memory_cpu if s.target.device_type == "cpu" else pin_memory)


def _patch_record_stream(s, torch: Any) -> None:
    real_record_stream = torch.Tensor.record_stream

    def record_stream(self, stream: Any):
        if not isinstance(stream, torch.Stream):  # the cpu stand-in of torch.cuda.Stream
            s.rec.noop("Tensor.record_stream", "no streams on cpu: nothing to record")
            return None
        return real_record_stream(self, stream)

    s.patches.set(torch.Tensor, "record_stream", record_stream)


def _target_for(s):
    """``.cuda(device)``'s device on the target: None -> the current one, an int -> that index."""
    m, target = s.mapper, s.target

    def target_for(device: Any, api: str):
        if device is None:
            return target.device_str(None)
        if type(device) is int:
            return target.device_str(device)
        return m.map(device, api, True)

    return target_for


def _patch_cuda(s, torch: Any, tensor_to, module_to) -> None:
    """``Tensor.cuda()``, ``Module.cuda()``, ``UntypedStorage/TypedStorage.cuda()`` move to the target."""
    target, P = s.target, s.patches
    target_for = _target_for(s)

    def tensor_cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
        s.rec.hit("Tensor.cuda", target.device_type)
        return tensor_to(self, target_for(device, "Tensor.cuda"), non_blocking=non_blocking,
                         memory_format=memory_format)

    def module_cuda(self, device=None):
        s.rec.hit("Module.cuda", target.device_type)
        return module_to(self, target_for(device, "Module.cuda"))

    tensor_cuda.__doc__ = f"Redirected by ascendify: moves to {target.device_type} (see docs/auto.md)."
    module_cuda.__doc__ = tensor_cuda.__doc__
    P.set(torch.Tensor, "cuda", tensor_cuda)
    P.set(torch.nn.Module, "cuda", module_cuda)

    for storage_cls in (torch.UntypedStorage, torch.TypedStorage):
        def storage_cuda(self, device=None, non_blocking=False, _api=f"{storage_cls.__name__}.cuda"):
            s.rec.hit(_api, target.device_type)
            return self.to(device=target_for(device, _api), non_blocking=non_blocking)

        P.set(storage_cls, "cuda", storage_cuda)


def _patch_is_cuda(s, Tensor: type) -> None:
    """``.is_cuda``: user code asks "is it on the accelerator?"; libraries get the truth."""
    real_is_cuda = Tensor.is_cuda
    dev_type = s.target.device_type

    def is_cuda(self) -> bool:
        if caller_is_user(2):
            s.rec.hit("Tensor.is_cuda", f"device.type == {dev_type!r}")
            return self.device.type == dev_type
        return real_is_cuda.__get__(self)

    s.patches.set(Tensor, "is_cuda", property(is_cuda, doc="Redirected by ascendify (see docs/auto.md)."))


def _patch_type(s, Tensor: type, tensor_to, real_type) -> None:
    """``.type("torch.cuda.FloatTensor")`` / ``.type(torch.cuda.FloatTensor)``."""
    target = s.target
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

    s.patches.set(Tensor, "type", tensor_type)
