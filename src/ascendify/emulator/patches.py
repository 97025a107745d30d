"""Host-memory paths with no meaning on the emulated device.

Pinned (page-locked) host memory needs an accelerator allocator that a Python backend cannot provide. On the
emulator the device *is* host memory, so pinning is a no-op: ``Tensor.pin_memory()`` returns the tensor and
``Tensor.is_pinned()`` answers False; DataLoader's ``pin_memory=True`` then works unchanged.

``Tensor.record_stream`` accepts the emulated ``torch.npu.Stream`` (a no-op: work is synchronous).

Printing an ``npu`` tensor runs float64 ops inside torch's formatter; they are not the user's, so fidelity
events are muted while a tensor is formatted.

``Module.to("npu")`` / ``.npu()`` / ``.cpu()`` keep parameter identity, so tied weights stay tied (see
:func:`_patch_module_apply`).
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
    _patch_module_apply()
    from ascendify.emulator import rng

    rng.install_generator()
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


def _crosses_npu(fn, params) -> bool:
    """True when ``fn`` (a ``Module._apply`` function) moves one of ``params`` between ``cpu`` and ``npu``.

    ``fn`` is probed on an empty tensor of each parameter's device and dtype (never on the parameter); an
    ``fn`` that cannot take a stranger tensor (a lookup table...) is taken as not crossing."""
    import torch

    seen = set()
    for p in params:
        if p is None:
            continue
        key = (p.device, p.dtype)
        if key in seen:
            continue
        seen.add(key)
        try:
            with torch.no_grad():
                out = fn(torch.empty(0, dtype=p.dtype, device=p.device))
        except Exception:
            return False
        if not isinstance(out, torch.Tensor):
            return False
        kinds = {p.device.type, out.device.type}
        if kinds == {"cpu", "npu"}:
            return True
    return False


def _patch_module_apply() -> None:
    """``nn.Module._apply`` moves a parameter in place (``param.data = moved``) only when both tensor types are
    "shallow-copy compatible", which CPU and PrivateUse1 tensors are not: PyTorch would then put a NEW
    ``Parameter`` in every module, so a weight shared by two modules (GPT's ``wte.weight is lm_head.weight``)
    ends up as two tensors, and an optimizer built before ``.npu()`` holds stale parameters. On a real NPU
    (and CUDA) the parameter objects survive the move.

    For conversions between ``cpu`` and ``npu`` this swaps the moved tensor into the existing ``Parameter``
    object (PyTorch's own ``swap_module_params_on_conversion`` path), keeping identity, ``requires_grad``,
    ``.grad`` (moved along) and the parameter's Python attributes. Where a swap is impossible (another
    reference holds the tensor, a weak reference exists), that module falls back to PyTorch's default.
    Other conversions (dtype on one device, ``meta``, ``to_empty``) are untouched.
    """
    import torch
    from torch import nn

    from ascendify.emulator import runtime

    orig_apply = nn.Module._apply
    _orig["Module._apply"] = orig_apply
    future = torch.__future__
    replaced: dict = {}  # during one top-level call: id(old Parameter) -> (old, new) where a swap failed
    depth = [0]

    def _apply(self, fn, recurse=True):
        if not runtime.enabled or future.get_swap_module_params_on_conversion():
            return orig_apply(self, fn, recurse)
        depth[0] += 1
        try:
            params = self._parameters
            if not params or not _crosses_npu(fn, params.values()):
                return orig_apply(self, fn, recurse)
            return _apply_swapping(self, fn, recurse, params)
        finally:
            depth[0] -= 1
            if not depth[0]:
                replaced.clear()

    def _apply_swapping(self, fn, recurse, params):
        for k, p in params.items():  # a parameter shared with a module whose swap failed: share the new one
            hit = replaced.get(id(p)) if p is not None else None
            if hit is not None and hit[0] is p:
                params[k] = hit[1]
        before = dict(params)
        attrs = {k: dict(p.__dict__) for k, p in params.items() if p is not None and p.__dict__}
        grads = {k: p.grad for k, p in params.items() if p is not None and p.grad is not None}
        if recurse:
            for module in self.children():
                module._apply(fn)
        future.set_swap_module_params_on_conversion(True)
        try:
            orig_apply(self, fn, recurse=False)
        except RuntimeError as e:
            if "Couldn't swap" not in str(e):
                raise
            future.set_swap_module_params_on_conversion(False)
            for k, g in grads.items():  # a failed grad swap leaves .grad unset
                p = params[k]
                if p.grad is None:
                    with torch.no_grad():
                        p.grad = fn(g)
            orig_apply(self, fn, recurse=False)
            for k, old_p in before.items():
                if old_p is not None and params[k] is not old_p:
                    replaced[id(old_p)] = (old_p, params[k])
        finally:
            future.set_swap_module_params_on_conversion(False)
        for k, saved in attrs.items():
            p = params.get(k)
            if p is not None:
                for name, value in saved.items():
                    p.__dict__.setdefault(name, value)
        return self

    _apply.__doc__ = orig_apply.__doc__
    nn.Module._apply = _apply
