"""The device under test: its name, how to wait for it, time it, read its memory, and spot an OOM.

One small object, :class:`BenchDevice`, hides the difference between the CPU, CUDA, a real Ascend NPU and the
emulated NPU. *Which* device is not decided here: :meth:`BenchDevice.open` asks the one resolver,
:func:`ascendify.device.placement.resolve` with purpose ``bench`` (``auto`` never turns the emulated NPU on). It
goes through ``torch.get_device_module(type)`` (``torch.cuda``, ``torch.npu``) for
``synchronize``, ``reset_peak_memory_stats``, ``max_memory_allocated`` and ``Event``, so it needs no per-device
code beyond choosing the device.

Peak memory: on a device, its allocator's peak (``max_memory_allocated`` after ``reset_peak_memory_stats``; the
emulated NPU's counts the bytes its tensors hold). On the CPU, which has no allocator statistics, the increase of
the process's peak resident memory over the run (:class:`HostPeak`); ``peak_memory_measure`` says which.

Timing: on an asynchronous device (CUDA, a real NPU) every step is bracketed by device events, read after one
synchronisation at the end of a window, so timing does not serialise the host and the device; the window's
wall time is taken between two ``synchronize()`` calls. The CPU and the emulated NPU are synchronous: a
``perf_counter`` pair per step is exact there.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import time

from ascendify.device.placement import DeviceError

__all__ = ["EMULATED_LABEL", "BenchDevice", "DeviceError", "EventTimer", "HostPeak", "StepTimer", "WallTimer"]

EMULATED_LABEL = "emulated: host speed, not NPU speed"


class HostPeak:
    """The increase of this process's peak resident memory (RSS) since :meth:`start`, for the CPU.

    Where Linux lets a process reset its peak (writing ``5`` to ``/proc/self/clear_refs``, Linux >= 4.0), the
    peak is ``VmHWM`` after the run minus ``VmRSS`` at its start: exact for the run. Elsewhere,
    ``resource.getrusage``'s ``ru_maxrss`` after minus before: a lower bound, 0 when an earlier part of the
    process had peaked higher. :attr:`measure` names the one used.
    """

    PROC = "/proc/self/status"
    RESET = "/proc/self/clear_refs"

    def __init__(self):
        self.measure = ""
        self._base = 0

    def start(self) -> None:
        rss = self._status_kib("VmRSS")
        if rss is not None and self._reset_hwm() and self._status_kib("VmHWM") is not None:
            self.measure = "process peak RSS increase (VmHWM reset at the run's start, minus VmRSS then)"
            self._base = rss * 1024
            return
        self.measure = "process peak RSS increase (ru_maxrss delta: a lower bound)"
        self._base = _maxrss_bytes()

    def peak_bytes(self) -> int:
        if self.measure.startswith("process peak RSS increase (VmHWM"):
            hwm = self._status_kib("VmHWM")
            return max((hwm or 0) * 1024 - self._base, 0)
        return max(_maxrss_bytes() - self._base, 0)

    @classmethod
    def _status_kib(cls, key: str) -> int | None:
        try:
            with open(cls.PROC) as f:
                for line in f:
                    if line.startswith(key + ":"):
                        return int(line.split()[1])
        except (OSError, ValueError, IndexError):
            return None
        return None

    @classmethod
    def _reset_hwm(cls) -> bool:
        try:
            with open(cls.RESET, "w") as f:
                f.write("5")
            return True
        except OSError:
            return False


# autocast dtypes (None: fp32) whose one-off process growth this process has already paid (:func:`warm_host`)
_HOST_WARMED: set = set()


def warm_host(amp_dtype=None) -> bool:
    """Pay the CPU's one-off process growth before a baseline is taken: the first training step of a process
    starts torch's thread pools and the autograd engine and loads its math libraries' kernels (some 80 MiB of
    resident memory for a 2-layer MLP), which stays resident and is no part of any run. A tiny model with the
    common layers (convolution, batch and layer norm, linear, embedding, activations, softmax, cross-entropy),
    trained two SGD-with-momentum steps under the run's autocast dtype and run once in eval mode; once per
    process and dtype. True when it ran now."""
    if amp_dtype in _HOST_WARMED:
        return False
    _HOST_WARMED.add(amp_dtype)
    import torch
    from torch import nn
    from torch.nn import functional as F

    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                      nn.Linear(8 * 8 * 8, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 4))
    emb = nn.Embedding(10, 4)
    opt = torch.optim.SGD([*m.parameters(), *emb.parameters()], lr=0.01, momentum=0.9)
    x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 4, (4,))
    for _ in range(2):
        with torch.autocast("cpu", dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None):
            loss = F.cross_entropy((m(x) + emb(y)).float().softmax(-1), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        m.eval()(x)
    del m, emb, opt, x, y, loss
    gc.collect()
    return True


def _maxrss_bytes() -> int:
    import resource
    import sys

    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r if sys.platform == "darwin" else r * 1024  # bytes on macOS, KiB elsewhere


@dataclasses.dataclass
class BenchDevice:
    type: str  # "cpu", "cuda", "npu"
    name: str  # "NVIDIA A100-SXM4-80GB", "Ascend910B3", the CPU model
    emulated: bool = False

    @classmethod
    def open(cls, requested: str = "auto", *, emulate_memory: str | None = None) -> BenchDevice:
        """The device ``--device requested`` names (:func:`ascendify.device.placement.resolve`, purpose
        ``bench``), turned on when it is the emulated NPU (with ``emulate_memory`` as its capacity): before the
        process's first ``backward()``, so open the device first. Raises :class:`DeviceError` (``usage``: a
        word the bench does not take) saying why."""
        from ascendify.core import devices
        from ascendify.device import placement

        kind, _ = placement.check(requested, "bench")
        if kind in ("npu", "auto") and not devices.is_npu_available():
            if kind == "npu" or devices.emulation_requested():
                _import_transformers_first()
        try:
            r = placement.resolve(requested, purpose="bench",
                                  emulator={"memory_capacity": emulate_memory} if emulate_memory else None)
        except placement.DeviceSpecError:
            raise
        except DeviceError as e:
            raise DeviceError(f"--device {requested}: {e}") from e
        import torch

        if r.emulated:
            return cls("npu", torch.npu.get_device_name(0), emulated=True)
        return cls(r.kind, devices.device_name(r.device))

    @property
    def host_peak(self) -> HostPeak:
        """The CPU's peak-memory measure (one per device object, kept out of the dataclass fields)."""
        peak = self.__dict__.get("_host_peak")
        if peak is None:
            peak = self.__dict__["_host_peak"] = HostPeak()
        return peak

    @property
    def torch_device(self):
        import torch

        return torch.device(self.type)

    @property
    def asynchronous(self) -> bool:
        return self.type != "cpu" and not self.emulated

    @property
    def has_memory_stats(self) -> bool:
        return self.type != "cpu"

    def module(self):
        import torch

        return torch.get_device_module(self.type) if self.type != "cpu" else None

    def synchronize(self) -> None:
        if self.type != "cpu":
            self.module().synchronize()

    def free_memory(self) -> None:
        """Collect garbage and give cached device blocks back (between runs, after an OOM)."""
        gc.collect()
        if self.type != "cpu":
            self.module().empty_cache()

    def reset_peak_memory(self, amp_dtype=None) -> None:
        """Start this run's peak: the device's peak counter reset; on the CPU, the process's one-off growth paid
        first (:func:`warm_host`, for the run's autocast dtype ``amp_dtype``), then the resident baseline."""
        if self.has_memory_stats:
            self.module().reset_peak_memory_stats()
        else:
            warm_host(amp_dtype)
            self.host_peak.start()

    def peak_memory_bytes(self) -> int:
        if not self.has_memory_stats:
            return self.host_peak.peak_bytes()
        return int(self.module().max_memory_allocated())

    @property
    def peak_memory_measure(self) -> str:
        """What :meth:`peak_memory_bytes` measures (after :meth:`reset_peak_memory`)."""
        if self.has_memory_stats:
            who = "the emulator's count of npu tensor bytes" if self.emulated else f"the {self.type} allocator"
            return f"device max_memory_allocated ({who})"
        return self.host_peak.measure

    def memory_capacity_bytes(self) -> int | None:
        if self.type == "cpu":
            return None
        try:
            return int(self.module().get_device_properties(0).total_memory)
        except Exception:
            return None

    def timer(self) -> StepTimer:
        return EventTimer(self) if self.asynchronous and hasattr(self.module(), "Event") else WallTimer()

    def describe(self) -> dict:
        return {"device": self.type, "device_name": self.name, "emulated": self.emulated,
                "label": EMULATED_LABEL if self.emulated else None}


class StepTimer:
    """Times each step of a window: ``start()``/``stop()`` around every step, ``times_ms()`` after the window."""

    kind = "abstract"

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def times_ms(self) -> list[float]:
        raise NotImplementedError


class WallTimer(StepTimer):
    kind = "perf_counter"

    def __init__(self):
        self._t0 = 0.0
        self._times: list[float] = []

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def stop(self) -> None:
        self._times.append((time.perf_counter() - self._t0) * 1e3)

    def times_ms(self) -> list[float]:
        return list(self._times)


class EventTimer(StepTimer):
    kind = "device events"

    def __init__(self, device: BenchDevice):
        self._mod = device.module()
        self._pairs: list = []
        self._cur = None

    def start(self) -> None:
        self._cur = self._mod.Event(enable_timing=True)
        self._cur.record()

    def stop(self) -> None:
        end = self._mod.Event(enable_timing=True)
        end.record()
        self._pairs.append((self._cur, end))

    def times_ms(self) -> list[float]:
        self._mod.synchronize()
        return [float(a.elapsed_time(b)) for a, b in self._pairs]


def _import_transformers_first() -> None:
    """Import transformers' model code before the emulated npu exists.

    transformers (5.x) asks "is torch_npu importable?" once and, if so, imports torch_npu's custom fused
    attention at import time; the emulator's torch_npu shim refuses custom ops, so importing transformers
    after enabling fails. Imported first, transformers sees no NPU and uses PyTorch's own attention, which is
    what the emulated device runs.
    """
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        return
    try:
        import transformers.activations  # noqa: F401
        import transformers.modeling_utils  # noqa: F401
    except Exception:
        pass


def is_oom(exc: BaseException) -> bool:
    """True for an out-of-memory error of any device (CUDA, NPU, emulated NPU, the host allocator)."""
    import torch

    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    msg = str(exc).lower()
    return isinstance(exc, RuntimeError) and (
        "out of memory" in msg or "can't allocate memory" in msg or "failed to allocate" in msg
    )


def set_threads(threads: int | None) -> int:
    """Set torch's intra-op threads (None: leave as is); returns the number in use."""
    import torch

    if threads:
        torch.set_num_threads(int(threads))
    return torch.get_num_threads()


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
