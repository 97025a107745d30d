"""``torch.npu.Stream`` / ``torch.npu.Event`` on the emulator.

The emulated device runs every op synchronously, so a stream is a label (``query()`` is always True,
``synchronize()`` returns at once) and an event records the host time when it is recorded: ``elapsed_time``
gives real milliseconds between two recorded events, as on hardware with ``enable_timing=True``.
"""

from __future__ import annotations

import itertools
import time

import torch

from ascendify.emulator import runtime

_ids = itertools.count(1)
_current: dict[int, Stream] = {}
_default: dict[int, Stream] = {}


def _index(device) -> int:
    if device is None:
        return runtime.current_device[0]
    if isinstance(device, int):
        return runtime.check_index(device)
    d = torch.device(device)
    if d.type != "npu":
        raise ValueError(f"expected an npu device, got {d}")
    return runtime.check_index(d.index)


class Stream:
    """An emulated NPU stream (work on it is already complete when it is issued)."""

    def __init__(self, device=None, priority: int = 0, **kwargs):
        self.device = torch.device("npu", _index(device))
        self.priority = priority
        self.stream_id = next(_ids)

    @property
    def npu_stream(self) -> int:
        return self.stream_id

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def wait_event(self, event: Event) -> None:
        return None

    def wait_stream(self, stream: Stream) -> None:
        return None

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream) and other.stream_id == self.stream_id

    def __hash__(self) -> int:
        return hash(("npu-stream", self.stream_id))

    def __enter__(self):
        self._ctx = StreamContext(self)
        return self._ctx.__enter__()

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)

    def __repr__(self) -> str:
        return f"<torch.npu.Stream device={self.device} npu_stream={self.stream_id:#x}>"


class Event:
    """An emulated NPU event; with ``enable_timing=True`` :meth:`elapsed_time` measures host time."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self.blocking = blocking
        self._time: float | None = None

    def record(self, stream: Stream | None = None) -> None:
        self._time = time.perf_counter()

    def wait(self, stream: Stream | None = None) -> None:
        return None

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def elapsed_time(self, end_event: Event) -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._time is None or end_event._time is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._time - self._time) * 1000.0

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


def set_stream(stream: Stream) -> None:
    if stream is None:
        return
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
