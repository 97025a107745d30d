"""Host-memory paths with no meaning on the emulated device.

Pinned (page-locked) host memory needs an accelerator allocator that a Python backend cannot provide. On the
emulator the device *is* host memory, so pinning is a no-op: ``Tensor.pin_memory()`` returns the tensor and
``Tensor.is_pinned()`` answers False; DataLoader's ``pin_memory=True`` then works unchanged.

``Tensor.record_stream`` accepts the emulated ``torch.npu.Stream`` (a no-op: work is synchronous).

Printing an ``npu`` tensor runs float64 ops inside torch's formatter; they are not the user's, so fidelity
events are muted while a tensor is formatted.
"""

from __future__ import annotations

import torch

_orig: dict = {}


def install() -> None:
    if _orig:
        return
    _orig["pin_memory"] = torch.Tensor.pin_memory
    _orig["is_pinned"] = torch.Tensor.is_pinned

    def pin_memory(self, device=None):
        if self.device.type == "cpu":
            return self
        return _orig["pin_memory"](self, device) if device is not None else _orig["pin_memory"](self)

    def is_pinned(self, device=None):
        if self.device.type == "cpu":
            return False
        return _orig["is_pinned"](self, device) if device is not None else _orig["is_pinned"](self)

    import torch._tensor_str as tensor_str

    from ascendify.emulator import runtime

    _orig["_str"] = tensor_str._str

    def _str(self, *, tensor_contents=None):
        runtime.quiet[0] += 1
        try:
            return _orig["_str"](self, tensor_contents=tensor_contents)
        finally:
            runtime.quiet[0] -= 1

    tensor_str._str = _str
    _patch_storage_new()
    _patch_record_stream()
    pin_memory.__doc__ = _orig["pin_memory"].__doc__
    is_pinned.__doc__ = _orig["is_pinned"].__doc__
    torch.Tensor.pin_memory = pin_memory
    torch.Tensor.is_pinned = is_pinned


def _patch_storage_new() -> None:
    """``torch.UntypedStorage(n, device="npu")`` would ask C++ for a PrivateUse1 allocator (there is none and
    the process would crash): allocate through an ``npu`` tensor instead."""
    orig_new = torch.UntypedStorage.__new__
    _orig["UntypedStorage.__new__"] = orig_new

    def __new__(cls, *args, device=None, **kwargs):
        if device is not None and torch.device(device).type == "npu" and not kwargs:
            if not args:
                return torch.empty(0, dtype=torch.uint8, device=device).untyped_storage()
            if len(args) == 1 and isinstance(args[0], int):
                return torch.empty(args[0], dtype=torch.uint8, device=device).untyped_storage()
            if len(args) == 1 and isinstance(args[0], list | tuple):
                return torch.tensor(args[0], dtype=torch.uint8, device=device).untyped_storage()
        if device is None:
            return orig_new(cls, *args, **kwargs)
        return orig_new(cls, *args, device=device, **kwargs)

    torch.UntypedStorage.__new__ = __new__


def _patch_record_stream() -> None:
    """``t.record_stream(s)`` with an emulated ``torch.npu.Stream``: nothing to record (all work is done)."""
    from ascendify.emulator.npu.streams import Stream

    orig = torch.Tensor.record_stream
    _orig["record_stream"] = orig

    def record_stream(self, stream):
        if isinstance(stream, Stream):
            return None
        return orig(self, stream)

    record_stream.__doc__ = orig.__doc__
    torch.Tensor.record_stream = record_stream
