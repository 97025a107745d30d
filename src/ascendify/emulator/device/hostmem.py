"""Keep freed host memory in the process, as a device's caching allocator keeps device memory.

Emulated ``npu`` memory is host memory from glibc's ``malloc``. PyTorch's autograd engine runs the backward of
a non-CPU device on its own thread, whose allocations come from another glibc arena; glibc gives that memory
back to the OS eagerly (``munmap`` above the mmap threshold, heap trimming above the trim threshold), so each
backward pass page-faults its buffers in again: a cost that grows with the batch (about +50% on the backward
of a small CNN at batch 128). A real NPU (like CUDA) caches device memory in its allocator instead. This
module raises the two thresholds once, when the emulator is enabled, so freed buffers are reused.

Only glibc is tuned; nothing happens elsewhere, where ``ASCENDIFY_EMULATE_MALLOC_TUNING=0``, or where the user
already tunes malloc through ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_``.
"""

from __future__ import annotations

import ctypes
import os
import sys

ENV = "ASCENDIFY_EMULATE_MALLOC_TUNING"
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's maximum on 64-bit: blocks below it come from (reusable) heap memory
TRIM_THRESHOLD = 256 << 20  # free memory kept at the top of a heap before it is returned to the OS
_applied: list[bool] = []


def wanted(env) -> bool:
    """Whether to tune, given the environment ``env``.

    >>> wanted({}), wanted({"ASCENDIFY_EMULATE_MALLOC_TUNING": "0"}), wanted({"MALLOC_TRIM_THRESHOLD_": "0"})
    (True, False, False)
    """
    return (env.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")
            and "MALLOC_MMAP_THRESHOLD_" not in env and "MALLOC_TRIM_THRESHOLD_" not in env)


def tune(env=None) -> bool:
    """Raise glibc's mmap and trim thresholds (once per process). Returns True when they were set."""
    env = os.environ if env is None else env
    if _applied:
        return _applied[0]
    ok = False
    if sys.platform.startswith("linux") and wanted(env):
        try:
            mallopt = ctypes.CDLL(None).mallopt
            mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
            mallopt.restype = ctypes.c_int
            ok = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
        except (OSError, AttributeError):  # not glibc (musl has no mallopt knobs)
            ok = False
    _applied.append(ok)
    return ok
