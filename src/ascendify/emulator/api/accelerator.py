"""PyTorch's device-generic APIs on the emulated npu: ``torch.accelerator``, ``torch.Stream``, ``torch.Event``.

Portable code (``ascendify migrate --to portable``) calls ``torch.accelerator.synchronize()``,
``torch.accelerator.memory_allocated()``, ``torch.Event(enable_timing=True)`` and friends. PyTorch serves them
in C++ from the backend's ``DeviceGuardImpl``, ``PrivateUse1HooksInterface`` and ``DeviceAllocator``. The Python
interface that a Python backend can register (``torch._C._acc``) has only ``is_available`` /
``has_primary_context`` / ``is_built`` on the hooks and the device type on the guard, and no allocator at
all, so PyTorch answers "Backend doesn't support synchronizing all streams on device", "Allocator for npu is
not a DeviceAllocator" (an internal assert), "Backend doesn't support elapsedTime", and ignores the device
index of ``set_device_index``/``device_index(i)``. The C++ route would need a compiled extension; the emulator
takes the Python route instead, with undo (``runtime.patches``):

- the ``torch._C._accelerator_*`` functions behind every ``torch.accelerator`` function (device index, streams,
  synchronize, the allocator's statistics and caches, device capability) are replaced by functions that answer
  from the emulator (``torch.npu``'s current device, streams and memory counters) while the current accelerator
  is the emulated npu, and call PyTorch's own otherwise. Replacing them (not ``torch.accelerator``'s Python
  functions) also covers code that did ``from torch.accelerator import synchronize`` before enabling;
- ``torch.Stream`` and ``torch.Event`` become the emulated :class:`~ascendify.emulator.api.npu.streams.Stream` /
  ``Event`` for the npu device (host-time events, streams as labels: the device is synchronous);
  ``isinstance(x, torch.Stream)`` / ``isinstance(x, torch.Event)`` still hold for every stream and event.

``torch.get_device_module("npu")`` is ``torch.npu`` through PyTorch's own registration. Not emulated:
``torch.accelerator.Graph`` (no device graphs, as ``torch.npu.graph`` is not emulated either).
"""

from __future__ import annotations

import importlib

import torch

from ascendify.emulator import runtime

# the module itself (the package attribute ``streams`` is torch_npu's ``torch.npu.streams`` namespace)
streams = importlib.import_module("ascendify.emulator.api.npu.streams")

_C = torch._C
_TorchStream = streams._TorchStream
_TorchEvent = streams._TorchEvent

# what tensors of the emulated device can hold (every dense dtype of the CPU it runs on)
SUPPORTED_DTYPES = frozenset({
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
    torch.float32, torch.float64, torch.complex64, torch.complex128,
})


def _ours() -> bool:
    """True while the current accelerator is the emulated npu (the emulator is active)."""
    return runtime.enabled


def _index(device_index) -> int:
    i = runtime.current_device[0] if device_index is None or device_index < 0 else device_index
    i = runtime.check_index(i)
    return 0 if runtime.settings.single_device else i


def _npu():
    return torch.npu


class _Meta(type):
    """``isinstance(x, torch.Stream)`` keeps answering for PyTorch's own streams (and events)."""

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, cls._base)

    def __subclasscheck__(cls, sub) -> bool:
        return issubclass(sub, cls._base)


class Stream(streams.Stream, metaclass=_Meta):
    """``torch.Stream`` while emulating: ``torch.Stream()`` / ``torch.Stream("npu:1")`` is an emulated npu
    stream; PyTorch's ``(stream_id=, device_index=, device_type=)`` form builds a generic one."""

    _base = _TorchStream

    def __new__(cls, device=None, *, priority: int = 0, **kwargs):
        if "stream_id" in kwargs:
            return _TorchStream(**kwargs)
        if device is not None and torch.device(device).type != "npu":
            return _TorchStream(device, priority=priority)
        return streams.Stream(device, priority=priority)


class Event(streams.Event, metaclass=_Meta):
    """``torch.Event`` while emulating: an emulated npu event (host time when recorded) for the npu device."""

    _base = _TorchEvent

    def __new__(cls, device=None, *, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False):
        if device is not None and torch.device(device).type != "npu":
            return _TorchEvent(device, enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)
        if device is not None:
            runtime.check_index(torch.device(device).index or 0)
        return streams.Event(enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


# ---------------------------------------------------------------------------------------- torch._C functions
def _stats(index: int) -> dict:
    nested: dict = {}
    for key, value in runtime.memory.stats(index).items():
        node = nested
        *parts, leaf = key.split(".")
        for p in parts:
            node = node.setdefault(p, {})
        node[leaf] = value
    return nested


def _replacements() -> dict:
    """``{name of a torch._C function: emulated function}`` (each calls PyTorch's own when not emulating)."""

    def get_device_index():
        return runtime.current_device[0]

    def set_device_index(index):
        if index >= 0:
            _npu().set_device(index)

    def exchange_device(index):
        prev = runtime.current_device[0]
        if index >= 0 and index != prev:
            _npu().set_device(index)
        return prev

    def get_stream(index):
        return streams.current_stream(_index(index))

    def set_stream(stream):
        streams.set_stream(stream)

    def synchronize_device(index):
        _index(index)  # checks the index; all work is already done

    def empty_cache():
        return None

    def is_allocator_initialized():
        return True

    def get_device_stats(index):
        return _stats(_index(index))

    def reset_accumulated(index):
        runtime.memory.reset_accumulated(_index(index))

    def reset_peak(index):
        runtime.memory.reset_peak(_index(index))

    def get_memory_info(index):
        i = _index(index)
        total = runtime.memory.capacity(i)
        return max(total - runtime.memory.allocated[i], 0), total

    def get_device_capability(index):
        _index(index)
        return {"supported_dtypes": set(SUPPORTED_DTYPES)}

    return {
        "_accelerator_getDeviceIndex": get_device_index,
        "_accelerator_setDeviceIndex": set_device_index,
        "_accelerator_exchangeDevice": exchange_device,
        "_accelerator_maybeExchangeDevice": exchange_device,
        "_accelerator_getStream": get_stream,
        "_accelerator_setStream": set_stream,
        "_accelerator_synchronizeDevice": synchronize_device,
        "_accelerator_emptyCache": empty_cache,
        "_accelerator_emptyHostCache": empty_cache,
        "_accelerator_isAllocatorInitialized": is_allocator_initialized,
        "_accelerator_getDeviceStats": get_device_stats,
        "_accelerator_resetAccumulatedStats": reset_accumulated,
        "_accelerator_resetPeakStats": reset_peak,
        "_accelerator_getMemoryInfo": get_memory_info,
        "_accelerator_getDeviceCapability": get_device_capability,
    }


def _routed(name: str, emulated):
    original = getattr(_C, name)

    def fn(*args, **kwargs):
        if _ours():
            return emulated(*args, **kwargs)
        return original(*args, **kwargs)

    fn.__name__ = name
    fn.__wrapped__ = original
    return fn


_installed: list[str] = []


def install() -> list[str]:
    """Route the ``torch._C._accelerator_*`` functions and ``torch.Stream``/``torch.Event`` (once); returns
    the names replaced."""
    if _installed:
        return _installed
    for name, emulated in _replacements().items():
        if hasattr(_C, name):
            runtime.patches.set(_C, name, _routed(name, emulated))
            _installed.append(f"torch._C.{name}")
    runtime.patches.set(torch, "Stream", Stream)
    runtime.patches.set(torch, "Event", Event)
    _installed.extend(("torch.Stream", "torch.Event"))
    cache_clear = getattr(torch.accelerator.get_device_capability, "cache_clear", None)
    if cache_clear is not None:  # it caches per device: drop what PyTorch's own answer may have left
        cache_clear()
    return _installed

