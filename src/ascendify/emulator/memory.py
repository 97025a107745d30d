"""Emulated device memory: what is allocated on each ``npu`` device, the peak, and the capacity.

Every fresh ``npu`` tensor is host memory adopted by :mod:`ascendify.emulator.device.tensors`; it is counted here
and uncounted by a weak-reference callback when the storage dies. Going beyond the capacity raises
``torch.OutOfMemoryError`` with the numbers a real device would report.
"""

from __future__ import annotations

import ctypes
import weakref

import torch

from ascendify.emulator.settings import Settings


class DeviceMemory:
    """Byte counters for every emulated device, with the capacity taken from :class:`Settings`."""

    def __init__(self, settings: Settings):
        self.settings = settings
        n = 64
        self.allocated = [0] * n
        self.peak = [0] * n
        self.num_allocs = [0] * n
        self.num_frees = [0] * n
        self.num_ooms = [0] * n
        self.fraction = [1.0] * n
        self._live: dict[int, tuple[weakref.ref, int, int]] = {}  # data_ptr -> (ref, nbytes, index)
        self._ptr_of: dict[int, int] = {}  # id(ref) -> data_ptr
        self._on_free = self._release  # one bound method for every weak reference
        self._limit = None  # the C++ kernels' capacity array, once attached
        self._account = self._count  # the C++ kernels' atomic counting once attached

    def attach(self, addresses: dict, account=None) -> None:
        """Keep the byte counters in the C++ kernels' arrays (:mod:`ascendify.emulator.ops.cfast`), so both
        count into one place; the current values move along. Also keeps the C++ capacity limits in step.
        ``account(index, nbytes, allocs, frees)``: the kernels' atomic update, which counting here then uses
        (the kernels count without the GIL: a read-modify-write here would lose their updates)."""
        n = int(addresses["devices"])
        for name in ("allocated", "peak", "num_allocs", "num_frees"):
            arr = (ctypes.c_int64 * n).from_address(int(addresses[name]))
            for i, v in enumerate(getattr(self, name)[:n]):
                arr[i] = v
            setattr(self, name, arr)
        self._limit = (ctypes.c_int64 * n).from_address(int(addresses["limit"]))
        self._account = account or self._count
        self.sync_limits()

    def sync_limits(self) -> None:
        """Tell the C++ kernels each device's capacity (after the setting or a fraction changed)."""
        limit = self._limit
        if limit is None or not isinstance(self.settings.memory_capacity, int):  # "16G" mid-update(): validate()
            return  # parses it and tells again
        for i in range(len(limit)):
            limit[i] = min(self.capacity(i), (1 << 62))

    def set_fraction(self, index: int, fraction: float) -> None:
        self.fraction[index] = fraction
        self.sync_limits()

    # -- accounting -----------------------------------------------------------------------------
    def check(self, nbytes: int, index: int) -> None:
        """Raise ``torch.OutOfMemoryError`` when ``nbytes`` more would go beyond the capacity."""
        if self.allocated[index] + nbytes > self.capacity(index):
            cap = self.capacity(index)
            self.num_ooms[index] += 1
            free = cap - self.allocated[index]
            raise torch.OutOfMemoryError(
                f"NPU out of memory (emulated). Tried to allocate {_fmt(nbytes)} "
                f"(NPU {index}; {_fmt(cap)} total capacity; {_fmt(self.allocated[index])} already allocated; "
                f"{_fmt(max(free, 0))} free). Set the emulated capacity with ASCENDIFY_EMULATE_MEMORY "
                "or ascendify.emulator.settings.memory_capacity."
            )

    def track(self, storage, nbytes: int, index: int) -> None:
        """Count ``storage`` (a CPU ``UntypedStorage``) until it dies."""
        ptr = storage.data_ptr()
        if nbytes == 0 or ptr in self._live:
            return
        a = self.allocated[index] + nbytes
        if a > self.settings.memory_capacity * self.fraction[index]:
            self.check(nbytes, index)
        ref = weakref.ref(storage, self._on_free)
        self._live[ptr] = (ref, nbytes, index)
        self._ptr_of[id(ref)] = ptr
        self._account(index, nbytes, 1, 0)

    def _release(self, ref) -> None:
        entry = self._live.pop(self._ptr_of.pop(id(ref), -1), None)
        if entry is not None:
            _, nbytes, index = entry
            self._account(index, -nbytes, 0, 1)

    def _count(self, index: int, nbytes: int, allocs: int, frees: int) -> int:
        """Count ``nbytes`` (negative: freed) and the allocations/frees of device ``index``; the bytes now there.
        (With the C++ kernels attached, their atomic ``account`` takes this place.)"""
        a = self.allocated[index] = self.allocated[index] + nbytes
        self.num_allocs[index] += allocs
        self.num_frees[index] += frees
        if a > self.peak[index]:
            self.peak[index] = a
        return a

    def capacity(self, index: int) -> int:
        """The usable bytes of device ``index``: the capacity times the per-process fraction."""
        return int(self.settings.memory_capacity * self.fraction[index])

    # -- queries --------------------------------------------------------------------------------
    def reset_peak(self, index: int) -> None:
        self.peak[index] = self.allocated[index]

    def reset_accumulated(self, index: int) -> None:
        self.num_allocs[index] = self.num_frees[index] = self.num_ooms[index] = 0

    def stats(self, index: int) -> dict[str, int]:
        """A subset of ``torch.cuda.memory_stats`` keys, with the same names."""
        cur, peak = self.allocated[index], self.peak[index]
        out: dict[str, int] = {}
        for pool in ("all", "large_pool", "small_pool"):
            for kind in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes"):
                c, p = (cur, peak) if pool == "all" else (0, 0)
                out[f"{kind}.{pool}.current"] = c
                out[f"{kind}.{pool}.peak"] = p
        out["num_alloc_retries"] = 0
        out["num_ooms"] = self.num_ooms[index]
        out["allocation.all.allocated"] = self.num_allocs[index]
        out["allocation.all.freed"] = self.num_frees[index]
        out["allocation.all.current"] = self.num_allocs[index] - self.num_frees[index]
        return out


def _fmt(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.2f} {unit}" if unit != "bytes" else f"{n} bytes"
        n /= 1024
    return f"{n:.2f} GiB"
