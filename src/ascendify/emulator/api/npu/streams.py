"""``torch.npu.Stream`` / ``torch.npu.Event`` on the emulator.

The emulated device runs every op synchronously, so a stream is a label (``query()`` is always True,
``synchronize()`` returns at once) and an event records the host time when it is recorded: ``elapsed_time``
gives real milliseconds between two recorded events, as on hardware with ``enable_timing=True``.

Both are subclasses of PyTorch's generic ``torch.Stream`` / ``torch.Event`` (as torch_npu's are of its own
stream and event bases), so ``torch.accelerator.set_stream(torch.npu.Stream())`` and
``isinstance(torch.npu.current_stream(), torch.Stream)`` work; :mod:`ascendify.emulator.api.accelerator`
makes ``torch.Stream`` / ``torch.Event`` and ``torch.accelerator`` use these same classes.
``Tensor.record_stream`` accepts the emulated stream (:func:`install_record_stream`; a no-op: work is synchronous).
"""

from __future__ import annotations

import itertools
import time

import torch

from ascendify.core.patching import light_wraps
from ascendify.emulator import runtime

_ids = itertools.count(1)
_current: dict[int, Stream] = {}
_default: dict[int, Stream] = {}
_PRIVATEUSE1 = int(torch._C._autograd.DeviceType.PrivateUse1)
_TorchStream = torch.Stream
_TorchEvent = torch.Event


def _index(device) -> int:
    if device is None:
        return runtime.current_device[0]
    if isinstance(device, int):
        return runtime.check_index(device)
    d = torch.device(device)
    if d.type != "npu":
        raise ValueError(f"expected an npu device, got {d}")
    return runtime.check_index(d.index)


class Stream(_TorchStream):
    """An emulated NPU stream (work on it is already complete when it is issued)."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        if "stream_id" in kwargs:  # PyTorch's own (stream_id, device_index, device_type) form
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, stream_id=next(_ids), device_index=_index(device), device_type=_PRIVATEUSE1)

    def __init__(self, device=None, priority: int = 0, **kwargs):
        self.priority = priority

    @property
    def npu_stream(self) -> int:
        return self.stream_id

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        from ascendify.emulator.api.npu.graphs import refuse_sync

        refuse_sync("Stream.synchronize()")

    def wait_event(self, event) -> None:
        return None

    def wait_stream(self, stream) -> None:
        return None

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def __eq__(self, other) -> bool:
        return (isinstance(other, _TorchStream) and other.stream_id == self.stream_id
                and other.device_index == self.device_index and other.device_type == self.device_type)

    def __hash__(self) -> int:
        return hash(("npu-stream", self.device_index, self.stream_id))

    def __enter__(self):
        self._ctx = StreamContext(self)
        return self._ctx.__enter__()

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)

    def __repr__(self) -> str:
        return f"<torch.npu.Stream device={self.device} npu_stream={self.stream_id:#x}>"


class Event(_TorchEvent):
    """An emulated NPU event; with ``enable_timing=True`` :meth:`elapsed_time` measures host time."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, **kwargs):
        return super().__new__(cls, torch.device("npu", runtime.current_device[0]), enable_timing=enable_timing,
                               blocking=blocking, interprocess=interprocess)

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, **kwargs):
        self.enable_timing = enable_timing
        self.blocking = blocking
        self._time: float | None = None

    def record(self, stream=None) -> None:
        self._time = time.perf_counter()

    def wait(self, stream=None) -> None:
        return None

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        from ascendify.emulator.api.npu.graphs import refuse_sync

        refuse_sync("Event.synchronize()")

    def elapsed_time(self, end_event) -> float:
        end_time = getattr(end_event, "_time", None)
        if not (self.enable_timing and getattr(end_event, "enable_timing", False)):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._time is None or end_time is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_time - self._time) * 1000.0

    def __repr__(self) -> str:
        return f"<torch.npu.Event recorded={self._time is not None}>"


def default_stream(device=None) -> Stream:
    i = _index(device)
    s = _default.get(i)
    if s is None:
        s = _default[i] = Stream(i)
    return s


def current_stream(device=None) -> Stream:
    i = _index(device)
    return _current.get(i) or default_stream(i)


def as_npu_stream(stream) -> Stream:
    """``stream`` as an emulated :class:`Stream` (a generic ``torch.Stream`` on ``npu`` made by PyTorch itself
    is matched to the emulated stream with the same id, else taken as the device's default stream)."""
    if isinstance(stream, Stream):
        return stream
    if isinstance(stream, _TorchStream) and stream.device.type == "npu":
        i = runtime.check_index(stream.device_index)
        for s in (_current.get(i), _default.get(i)):
            if s is not None and s.stream_id == stream.stream_id:
                return s
        return default_stream(i)
    raise TypeError(f"expected an npu stream, got {stream!r}")


def set_stream(stream) -> None:
    if stream is None:
        return
    stream = as_npu_stream(stream)
    _current[stream.device.index] = stream


class StreamContext:
    """``with torch.npu.stream(s):`` makes ``s`` current on its device for the block."""

    def __init__(self, stream: Stream | None):
        self.stream = stream
        self._prev: Stream | None = None

    def __enter__(self):
        if self.stream is None:
            return None
        self._prev = current_stream(self.stream.device)
        set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.stream is not None and self._prev is not None:
            set_stream(self._prev)
        return False


def stream(stream: Stream | None) -> StreamContext:
    return StreamContext(stream)


def install_record_stream(patches) -> None:
    """``t.record_stream(s)`` with an emulated ``torch.npu.Stream``: nothing to record (all work is done). Installed
    through ``patches`` (the emulator's undoable registry)."""
    orig = torch.Tensor.record_stream

    def record_stream(self, stream):
        if isinstance(stream, Stream):
            return None
        return orig(self, stream)

    patches.set(torch.Tensor, "record_stream", light_wraps(record_stream, orig))
