"""Host-memory paths with no meaning on the emulated device.

Pinned (page-locked) host memory needs an accelerator allocator that Python hooks cannot provide: the C++
hooks (``ops/cfast.cpp``) provide it, so ``torch.empty(..., pin_memory=True)``, ``Tensor.pin_memory()`` and DDP's
pinned copies work and ``is_pinned()`` is True, as on an NPU. Without the C++ kernels (no compiler) pinning is a
no-op: ``Tensor.pin_memory()`` returns the tensor, ``Tensor.is_pinned()`` answers False (DataLoader's
``pin_memory=True`` works unchanged; ``pin_memory=True`` in a factory raises torch's error).

``Tensor.record_stream`` accepts the emulated ``torch.npu.Stream`` (a no-op: work is synchronous).

Printing an ``npu`` tensor runs float64 ops inside torch's formatter; they are not the user's, so fidelity
events are muted while a tensor is formatted.

``Module.to("npu")`` / ``.npu()`` / ``.cpu()`` keep parameter identity, so tied weights stay tied (see
:func:`_patch_module_apply`).
"""

from __future__ import annotations

import torch

from ascendify.core.patching import light_wraps
from ascendify.emulator import runtime

_patches = runtime.patches
_installed: list[bool] = []


def install(real_pinned_memory: bool = False) -> None:
    """Install every patch of this module (once), through the emulator's :class:`~ascendify.core.patching.Patches`.
    ``real_pinned_memory``: the C++ hooks serve pinned host memory (no pinning no-op then)."""
    if _installed:
        return
    _installed.append(True)
    orig_pin, orig_is_pinned = torch.Tensor.pin_memory, torch.Tensor.is_pinned

    def pin_memory(self, device=None):
        if self.device.type == "cpu":
            return self
        return orig_pin(self, device) if device is not None else orig_pin(self)

    def is_pinned(self, device=None):
        if self.device.type == "cpu":
            return False
        return orig_is_pinned(self, device) if device is not None else orig_is_pinned(self)

    import torch._tensor_str as tensor_str

    orig_str = tensor_str._str

    def _str(self, *, tensor_contents=None):
        runtime.quiet[0] += 1
        try:
            return orig_str(self, tensor_contents=tensor_contents)
        finally:
            runtime.quiet[0] -= 1

    _patches.set(tensor_str, "_str", _str)
    _patch_storage_new()
    _patch_storage_resize()
    _patch_record_stream()
    _patch_module_apply()
    from ascendify.emulator.device import rng

    rng.install_generator()
    from ascendify.emulator.api import legacy_types as legacy

    legacy.install(_patches)
    if not real_pinned_memory:
        _patches.set(torch.Tensor, "pin_memory", light_wraps(pin_memory, orig_pin))
        _patches.set(torch.Tensor, "is_pinned", light_wraps(is_pinned, orig_is_pinned))


def _patch_storage_new() -> None:
    """``torch.UntypedStorage(n, device="npu")`` would ask C++ for a PrivateUse1 allocator (there is none and
    the process would crash): allocate through an ``npu`` tensor instead."""
    orig_new = torch.UntypedStorage.__new__

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

    _patches.set(torch.UntypedStorage, "__new__", __new__)


def _patch_storage_resize() -> None:
    """``UntypedStorage.resize_`` on an ``npu`` storage, which FSDP2 uses to free and re-grow unsharded
    parameters in place (``storage.resize_(0)`` after the forward, ``resize_(n)`` before the next all-gather).

    PyTorch sends it to ``PrivateUse1HooksInterface::resizePrivateUse1Bytes``, which a Python backend cannot
    implement ("You should register PrivateUse1HooksInterface..."). The emulator makes a fresh ``npu``
    allocation of the new size, copies what both sizes share, and swaps the data pointers of the two
    storages (``_swap_data_ptr_``, which takes a zero-byte side), so every tensor and view on the storage
    sees the new memory, as after a device resize; the old memory is freed (and uncounted) with the other
    storage.
    """
    orig = torch.UntypedStorage.resize_

    def resize_(self, size):
        if self.device.type != "npu":
            return orig(self, size)
        size = int(size)
        old = self.nbytes()
        if size == old:
            return self
        if size < 0:
            return orig(self, size)  # PyTorch's own error
        kept = None
        if old:
            kept = torch.empty(0, dtype=torch.uint8, device=self.device).untyped_storage()
            self._swap_data_ptr_(kept)  # self is now 0 bytes, kept holds the old memory
        if size:
            new = torch.empty(size, dtype=torch.uint8, device=self.device).untyped_storage()
            if kept is not None:
                n = min(old, size)
                dst = torch.empty(0, dtype=torch.uint8, device=self.device).set_(new, 0, (n,), (1,))
                src = torch.empty(0, dtype=torch.uint8, device=self.device).set_(kept, 0, (n,), (1,))
                dst.copy_(src)
            self._swap_data_ptr_(new)
        return self

    _patches.set(torch.UntypedStorage, "resize_", light_wraps(resize_, orig))


def _patch_record_stream() -> None:
    """``t.record_stream(s)`` with an emulated ``torch.npu.Stream``: nothing to record (all work is done)."""
    from ascendify.emulator.api.npu.streams import Stream

    orig = torch.Tensor.record_stream

    def record_stream(self, stream):
        if isinstance(stream, Stream):
            return None
        return orig(self, stream)

    _patches.set(torch.Tensor, "record_stream", light_wraps(record_stream, orig))


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
        try:  # torch-function modes off: the probe is not the program's call (a dump would record it)
            with torch.no_grad(), torch._C.DisableTorchFunction():
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
    from torch.nn.parameter import is_lazy

    orig_apply = nn.Module._apply
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
            lazy = {k: (type(p), p.requires_grad) for k, p in params.items() if is_lazy(p)}  # a swap swaps types
            _apply_swapping(self, fn, recurse, params)
            for k, (kind, grad) in lazy.items():  # a LazyModule's parameter stays uninitialised, on its new device
                moved = params.get(k)
                if moved is not None and not is_lazy(moved):
                    params[k] = kind(requires_grad=grad, device=moved.device, dtype=moved.dtype)
            return self
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

    _patches.set(nn.Module, "_apply", light_wraps(_apply, orig_apply))
