"""The device-generic API: ``torch.accelerator``, ``torch.get_device_module``,
``torch.distributed.get_default_backend_for_device``, consistent with ``torch.cuda``.

Current PyTorch code asks ``torch.accelerator`` for its device (``device = torch.accelerator.current_accelerator()
if torch.accelerator.is_available() else torch.device("cpu")``, pytorch/examples at its head). Under
redirection the accelerator is the *target*, as ``torch.device("cuda")`` is: its ``.type`` is the target's, so
``device.type == "cuda"`` checks (rewritten in memory, see :mod:`ascendify.auto.rewrite`), ``x.device.type ==
device.type`` and ``torch.device(f"{acc}:{rank}")`` behave as on a GPU.

- On ``npu`` (torch_npu or the emulated NPU), ``xpu`` and ``mps`` the target *is* PyTorch's accelerator
  (torch_npu and the emulator register ``npu`` as it): ``torch.accelerator`` answers natively. Only CUDA values
  passed in are redirected: ``torch.get_device_module("cuda")`` is the target's module,
  ``get_default_backend_for_device("cuda")`` the target's backend, both recorded.
- On the ``cpu`` the CPU is no accelerator to PyTorch, so ``torch.accelerator`` answers *per caller*, like
  ``torch.cuda.is_available``: the user's code hears that the accelerator is the CPU (``is_available()`` True,
  ``current_accelerator()`` ``cpu``, ``device_count()`` the local ranks, ``set_device_index`` remembered,
  memory statistics 0, ``synchronize`` nothing to wait for), with the stand-ins of :mod:`.cpu_cuda` that
  ``torch.cuda`` uses; libraries (torch's DataLoader, DDP, FSDP...) hear the truth (no accelerator), so they
  never pin memory for a device that does not exist. ``torch.get_device_module()`` (the accelerator's module)
  is the redirected ``torch.cuda``. ``torch.device("cpu:N")`` (``f"{acc}:{rank}"``) is the CPU, as
  ``"cuda:N"`` is, and ``torch.Event(enable_timing=True)`` a host-clock event, as ``torch.cuda.Event`` is.

Every call of the user's that is answered for the target is recorded (*redirected*, or *no effect* for the
stand-ins that do nothing), as ``torch.cuda``'s are.
"""

from __future__ import annotations

import collections
import functools
import importlib
import warnings
from typing import Any

from ascendify.auto.record import caller_is_user
from ascendify.auto.redirects.devices import class_factory
from ascendify.core.patching import light_wraps

# torch.accelerator (and torch.accelerator.memory) name -> no-effect reason of its cpu stand-in (None: redirected)
CPU_NO_EFFECT = {
    "set_device_index": "one cpu device: the index is remembered, nothing moves",
    "set_device_idx": "one cpu device: the index is remembered, nothing moves",
    "device_index": "one cpu device: the index is remembered, nothing moves",
    "set_stream": "no streams on cpu",
    "empty_cache": "no device cache on cpu",
    "empty_host_cache": "no pinned host cache on cpu",
    "memory_allocated": "no device memory statistics on cpu: returns 0",
    "max_memory_allocated": "no device memory statistics on cpu: returns 0",
    "memory_reserved": "no device memory statistics on cpu: returns 0",
    "max_memory_reserved": "no device memory statistics on cpu: returns 0",
    "memory_stats": "no device memory statistics on cpu: returns {}",
    "reset_peak_memory_stats": "no device memory statistics on cpu",
    "reset_accumulated_memory_stats": "no device memory statistics on cpu",
}
MEMORY_NAMES = ("empty_cache", "empty_host_cache", "get_memory_info", "max_memory_allocated", "max_memory_reserved",
                "memory_allocated", "memory_reserved", "memory_stats", "reset_accumulated_memory_stats",
                "reset_peak_memory_stats")


def install(s) -> None:
    import torch

    _patch_get_device_module(s, torch)
    _patch_default_backend(s)
    if s.target.device_type == "cpu":
        _install_cpu_accelerator(s, torch)


def _is_cuda(v: Any, Device: type) -> bool:
    """``"cuda"``, ``"cuda:N"`` or a CUDA ``torch.device``."""
    if type(v) is str:
        return v == "cuda" or v.startswith("cuda:")
    return type(v) is Device and v.type == "cuda"


def _device_type(v: Any, Device: type) -> str | None:
    if type(v) is str:
        return v.partition(":")[0]
    if type(v) is Device:
        return v.type
    return None


def _patch_get_device_module(s, torch: Any) -> None:
    """``torch.get_device_module``: the target's module for the user's CUDA device; on the cpu the accelerator's
    module (no argument, ``"cpu"``) is the redirected ``torch.cuda`` (``torch.cpu`` has no RNG or memory calls).
    torch caches the function's answers; the cache is emptied on enable and on disable (under redirection
    ``torch.device("cuda")`` is the target, so an answer cached then would outlive it)."""
    orig = torch.get_device_module
    t, rec, Device = s.target, s.rec, s.Device
    cpu = t.device_type == "cpu"
    api = "torch.get_device_module"
    clear = getattr(orig, "cache_clear", None)

    def get_device_module(device: Any = None):
        if caller_is_user(2):
            if _is_cuda(device, Device):
                mod = torch.cuda if cpu else t.module()
                rec.hit(api, f"torch.{'cuda (cpu)' if cpu else t.device_type}")
                return mod
            if cpu and (device is None or _device_type(device, Device) == "cpu"):
                rec.hit(api, "torch.cuda (cpu): the accelerator's module")
                return torch.cuda
        return orig(device)

    s.patches.set(torch, "get_device_module", light_wraps(get_device_module, orig))
    if clear is not None:
        clear()
        s.patches.on_restore(clear)


def _patch_default_backend(s) -> None:
    """``get_default_backend_for_device("cuda")`` in the user's code: the target's backend (``hccl``, ``gloo``)."""
    try:
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d
    except Exception:
        return
    orig = getattr(c10d, "get_default_backend_for_device", None)
    if orig is None:
        return
    t, rec, Device = s.target, s.rec, s.Device
    api = "dist.get_default_backend_for_device"

    def get_default_backend_for_device(device: Any) -> str:
        if _is_cuda(device, Device) and caller_is_user(2):
            rec.hit(api, t.dist_backend)
            return t.dist_backend
        return orig(device)

    new = light_wraps(get_default_backend_for_device, orig)
    for owner in (dist, c10d):
        if getattr(owner, "get_default_backend_for_device", None) is orig:
            s.patches.set(owner, "get_default_backend_for_device", new)


# ---------------------------------------------------------------------------------------------- the cpu


class _CpuAccelerator:
    """What ``torch.accelerator.X`` answers the user's code when the target is the CPU."""

    def __init__(self, s) -> None:
        from ascendify.auto.redirects import cpu_cuda

        self.s = s
        self.Device = s.Device
        self.cc = cpu_cuda

    # -- devices
    def is_available(self) -> bool:
        return True

    def current_accelerator(self, check_available: bool = False) -> Any:
        return self.Device("cpu")

    def device_count(self) -> int:
        return self.cc.device_count()

    def current_device_index(self) -> int:
        return self.cc.current_device()

    def index_of(self, device: Any) -> int:
        """torch's ``_get_device_index`` with the CPU (and CUDA, which stands for it) as the accelerator. A device
        without an index is the current one: under redirection ``torch.device("cuda:1")`` and ``"cpu:1"`` are the
        one CPU, whose device has no index."""
        if isinstance(device, int):
            return device
        if device is None:
            return self.cc.current_device()
        d = self.Device(device) if isinstance(device, str) else device
        if not isinstance(d, self.Device):
            raise TypeError(f"expected a device, a device string or an index, got {type(device).__name__}")
        if d.type not in ("cpu", "cuda"):
            raise ValueError(f"{d.type} doesn't match the current accelerator cpu.")
        return self.cc.current_device() if d.index is None else d.index

    def set_device_index(self, device: Any, /) -> None:
        if device is None:
            raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{device}")
        i = self.index_of(device)
        if i >= 0:
            self.cc.set_device(i)

    # -- streams and synchronisation
    def current_stream(self, device: Any = None, /) -> Any:
        self.index_of(device)
        return self.cc.current_stream()

    def set_stream(self, stream: Any) -> None:
        return None

    def synchronize(self, device: Any = None, /) -> None:
        self.index_of(device)

    def get_device_capability(self, device: Any = None, /) -> dict[str, Any]:
        self.index_of(device)
        return {"supported_dtypes": set(_cpu_dtypes())}

    # -- memory
    def get_memory_info(self, device_index: Any = None, /) -> tuple[int, int]:
        return self.cc.mem_get_info()

    def memory_stats(self, device_index: Any = None, /) -> collections.OrderedDict:
        return collections.OrderedDict()

    def zero(self, device_index: Any = None, /) -> int:
        return 0

    def nothing(self, device_index: Any = None, /) -> None:
        return None


@functools.cache
def _cpu_dtypes() -> frozenset:
    """The dtypes a CPU tensor can be made of (what ``get_device_capability`` lists as ``supported_dtypes``)."""
    import torch

    out = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # complex32 and the quantized dtypes warn that they are experimental
        for v in vars(torch).values():
            if isinstance(v, torch.dtype) and v not in out:
                try:
                    torch.empty(0, dtype=v, device="cpu")
                except Exception:  # noqa: BLE001 - a dtype the CPU cannot allocate is simply not listed
                    continue
                out.add(v)
    return frozenset(out)


def _install_cpu_accelerator(s, torch: Any) -> None:
    acc = torch.accelerator
    try:
        mem = importlib.import_module("torch.accelerator.memory")
    except Exception:
        mem = None
    cpu = _CpuAccelerator(s)
    impls: dict[str, Any] = {
        "is_available": cpu.is_available, "current_accelerator": cpu.current_accelerator,
        "device_count": cpu.device_count, "current_device_index": cpu.current_device_index,
        "current_device_idx": cpu.current_device_index, "set_device_index": cpu.set_device_index,
        "set_device_idx": cpu.set_device_index, "current_stream": cpu.current_stream,
        "set_stream": cpu.set_stream, "synchronize": cpu.synchronize,
        "get_device_capability": cpu.get_device_capability, "get_memory_info": cpu.get_memory_info,
        "memory_stats": cpu.memory_stats, "empty_cache": cpu.nothing, "empty_host_cache": cpu.nothing,
        "reset_peak_memory_stats": cpu.nothing, "reset_accumulated_memory_stats": cpu.nothing,
    }
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
        impls[name] = cpu.zero
    details = {"is_available": "cpu available (user code)", "current_accelerator": "cpu (stands for cuda)",
               "device_count": "cpu device count (user code)", "get_memory_info": "cpu: host memory"}
    replaced: dict[str, Any] = {}
    for name in getattr(acc, "__all__", ()):
        orig = getattr(acc, name, None)
        if orig is None:
            continue
        api = f"torch.accelerator.{name}"
        if name == "device_index" and isinstance(orig, type):
            new = _device_index_class(s, orig, api)
        elif name in impls:
            new = _per_caller(s, orig, impls[name], api, CPU_NO_EFFECT.get(name),
                              details.get(name, f"cpu: {name}"))
        elif isinstance(orig, type):  # Graph: no device graphs on the cpu
            new = _unsupported_class(s, orig, name, api, "no device graphs on cpu")
        else:
            continue
        s.patches.set(acc, name, new)
        replaced[name] = new
    if mem is not None:
        for name in MEMORY_NAMES:
            if name in replaced and getattr(mem, name, None) is not None:
                s.patches.set(mem, name, replaced[name])
    cache_clear = getattr(getattr(acc, "get_device_capability", None), "cache_clear", None)
    if cache_clear is not None:
        s.patches.on_restore(cache_clear)
    _patch_cpu_event(s, torch)


def _per_caller(s, orig: Any, impl: Any, api: str, reason: str | None, detail: str) -> Any:
    """The user's call answered by ``impl`` (recorded), a library's by ``orig`` (the truth)."""
    rec = s.rec
    if reason:
        def fn(*args: Any, **kwargs: Any):
            if not caller_is_user(2):
                return orig(*args, **kwargs)
            rec.noop(api, reason)
            return impl(*args, **kwargs)
    else:
        def fn(*args: Any, **kwargs: Any):
            if not caller_is_user(2):
                return orig(*args, **kwargs)
            rec.hit(api, detail)
            return impl(*args, **kwargs)

    return light_wraps(fn, orig)


def _device_index_class(s, orig: type, api: str) -> type:
    """``with torch.accelerator.device_index(i):``: the user's switches the remembered cpu index (and back)."""
    from ascendify.auto.redirects import cpu_cuda

    rec = s.rec
    reason = CPU_NO_EFFECT["device_index"]

    class device_index(orig):  # type: ignore[misc, valid-type]
        __doc__ = orig.__doc__

        def __init__(self, device: int | None, /) -> None:
            super().__init__(device)
            self._ascendify_user = caller_is_user(2)
            if self._ascendify_user:
                rec.noop(api, reason)

        def __enter__(self) -> None:
            if not self._ascendify_user:
                return super().__enter__()
            if self.idx is not None:
                self.prev_idx = cpu_cuda.current_device()
                cpu_cuda.set_device(int(self.idx))
            return None

        def __exit__(self, *exc_info: object) -> None:
            if not self._ascendify_user:
                return super().__exit__(*exc_info)
            if self.idx is not None and self.prev_idx >= 0:
                cpu_cuda.set_device(self.prev_idx)
            return None

    device_index.__module__ = orig.__module__
    device_index.__qualname__ = orig.__qualname__
    return device_index


def _unsupported_class(s, orig: type, name: str, api: str, reason: str) -> type:
    """A class whose construction by the user's code raises :class:`UnsupportedOnTarget` (libraries get theirs)."""
    rec = s.rec

    def make(*args: Any, **kwargs: Any):
        if caller_is_user(3):
            rec.unsupported_call(api, reason)
        return orig(*args, **kwargs)

    return class_factory(orig, name, orig.__module__, make)


def _patch_cpu_event(s, torch: Any) -> None:
    """``torch.Event(enable_timing=True)`` in the user's code: a host-clock event on the cpu, as
    ``torch.cuda.Event`` is (torch's CPU event raises "cpu backend doesn't support events" when recorded).
    Device-generic timing code (``start.record()`` ... ``torch.accelerator.synchronize()``,
    ``start.elapsed_time(end)``) runs in the accelerator branch it now takes. Still a ``torch.Event``."""
    from ascendify.auto.redirects.cpu_cuda import Event as HostClock

    real, Device, rec = torch.Event, s.Device, s.rec
    base = getattr(torch._C, "Event", real)  # PyTorch's own type (torch.Event may be the emulator's, inactive)

    class HostEvent(HostClock, base):  # type: ignore[misc, valid-type]
        """A ``torch.Event`` on the cpu that records the host clock (``record``, ``synchronize``, ``wait``,
        ``query``: :class:`ascendify.auto.redirects.cpu_cuda.Event`'s); ``elapsed_time`` in milliseconds."""

        def __new__(cls, device: Any = None, *, enable_timing: bool = False, blocking: bool = False,
                    interprocess: bool = False):
            return super().__new__(cls, Device("cpu"), enable_timing=enable_timing, blocking=blocking,
                                   interprocess=interprocess)

        def __init__(self, device: Any = None, *, enable_timing: bool = False, blocking: bool = False,
                     interprocess: bool = False) -> None:
            self._timing = enable_timing
            self._t: float | None = None

        def elapsed_time(self, end_event: Any) -> float:
            if not (self._timing and getattr(end_event, "_timing", False)):
                raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
            if self._t is None or end_event._t is None:
                raise RuntimeError("Both events must be recorded before calculating elapsed time.")
            return (end_event._t - self._t) * 1000.0

    HostEvent.__module__, HostEvent.__qualname__ = "torch", "Event"

    def make(*args: Any, **kwargs: Any):
        if not caller_is_user(3):
            return real(*args, **kwargs)
        rec.hit("torch.Event", "cpu: host-clock event")
        return HostEvent(*args, **kwargs)

    s.patches.set(torch, "Event", class_factory(real, "Event", "torch", make))
