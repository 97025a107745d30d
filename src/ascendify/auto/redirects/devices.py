"""``torch.device("cuda")`` and ``torch.Generator(device="cuda")``: C types, replaced by factories.

``torch.device`` cannot be subclassed, so ``torch.device`` becomes a class whose metaclass builds *real*
``torch.device`` objects from mapped arguments and answers ``isinstance(x, torch.device)`` and
``issubclass`` for real devices. Type annotations, TorchScript (which compares against ``torch.device`` at
compile time) and pickling keep working: pickled devices refer to ``torch.device`` by name, and a ``copyreg``
entry makes them refer to the factory while it is installed, so files written under ``ascendify run`` load
anywhere.

Limits: code that captured the type before ``enable()`` (``from torch import device``) builds unmapped devices
(they are still mapped where they are used: ``.to()``, factories, ...); ``type(d) is torch.device`` is False.
"""

from __future__ import annotations

import copyreg
from typing import Any

from ascendify.auto.record import caller_is_user


def class_factory(real: type, qualname: str, module: str, call) -> type:
    """A stand-in for the C type ``real`` whose instances are real ``real`` objects built by ``call``."""

    class _Meta(type):
        def __instancecheck__(cls, obj: Any) -> bool:
            return isinstance(obj, real)

        def __subclasscheck__(cls, sub: type) -> bool:
            return sub is cls or issubclass(sub, real)

        def __call__(cls, *args: Any, **kwargs: Any) -> Any:
            return call(*args, **kwargs)

        def __repr__(cls) -> str:
            return repr(real)

        # equal to (and hashing like) the real type, so type tables built after enable() (dynamo's constant
        # types, singledispatch registries) still find real instances: `type(d) in {torch.device}`
        def __eq__(cls, other: Any) -> bool:
            return other is cls or other is real

        def __hash__(cls) -> int:
            return hash(real)

    ns = {"__module__": module, "__qualname__": qualname, "__doc__": real.__doc__, "__wrapped__": real}
    return _Meta(qualname, (), ns)


def install(s) -> None:
    import torch

    Device = s.Device
    mapper = s.mapper

    # on the cpu target, `cpu:N` in the user's code is the CPU, as `cuda:N` is: device-generic code builds
    # torch.device(f"{acc}:{rank}") with the accelerator (the cpu there, see .accelerator) and every rank's device
    # is the one CPU (tensors made there report `cpu`; DDP and FSDP refuse a `cpu:1`)
    one_cpu, cpu, rec = s.target.device_type == "cpu", Device("cpu"), s.rec

    def make_device(*args: Any, **kwargs: Any):
        d = Device(*args, **kwargs)
        if d.type == "cuda":
            return mapper.map(d, "torch.device")
        if one_cpu and d.index is not None and d.type == "cpu" and caller_is_user(3):
            rec.hit("torch.device", "cpu (one cpu device)")
            return cpu
        return d
    factory = class_factory(Device, "device", "torch", make_device)
    s.patches.set(torch, "device", factory)

    def reduce_device(d):
        return (factory, (d.type,) if d.index is None else (d.type, d.index))

    prev = copyreg.dispatch_table.get(Device)
    copyreg.dispatch_table[Device] = reduce_device

    def undo() -> None:
        if prev is None:
            copyreg.dispatch_table.pop(Device, None)
        else:
            copyreg.dispatch_table[Device] = prev

    s.patches.on_restore(undo)

    Generator = torch.Generator

    def make_generator(*args: Any, **kwargs: Any):
        if args:
            args = (mapper.map(args[0], "torch.Generator", int_is_device=True),) + args[1:]
        elif "device" in kwargs:
            kwargs["device"] = mapper.map(kwargs["device"], "torch.Generator", int_is_device=True)
        return Generator(*args, **kwargs)

    s.patches.set(torch, "Generator", class_factory(Generator, "Generator", "torch", make_generator))

