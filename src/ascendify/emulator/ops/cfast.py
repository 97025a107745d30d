"""The emulated device's hot kernels in C++ (``cfast.cpp``): the fast path without a Python frame per op.

The Python kernels (:mod:`.fastpath`, :mod:`.kernels`) cost 6 to 10 µs per op; in a training step, where every
forward, backward and optimizer op reaches them, that made a small model's step 1.4x the CPU's. ``cfast.cpp``
does the same work in one boxed C++ kernel per op: CPU aliases of the npu arguments, the CPU kernel, npu results
over the same memory, device memory counted in C++ counters that :mod:`ascendify.emulator.memory` shares.
Whatever it does not handle (a CPU tensor mixed in, two devices, a lazy conj/neg view, per-op checks a setting
asks for) it hands to the op's Python kernel, so errors and reports stay the Python path's.

Built on first use with the system's C++ compiler against the installed torch (about 30 s, once per machine and
torch version; ``python -m ascendify.emulator.ops.cfast`` builds it ahead, as ``scripts/setup.sh`` does) into
``$ASCENDIFY_CACHE`` (default ``~/.cache/ascendify``), keyed by the source, torch and Python. Where there is no
compiler, the build fails, or ``ASCENDIFY_EMULATE_CKERNELS=0``, :func:`module` returns None and every op keeps
its Python kernel: same results, slower. A failed build leaves a ``.failed`` file with the reason next to where the
library would be, so later processes do not try again; ``python -m ascendify.emulator.ops.cfast`` does.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ascendify.core.cxx import Extension

ENV = "ASCENDIFY_EMULATE_CKERNELS"
SOURCE = Path(__file__).with_name("cfast.cpp")

_EXT = Extension(SOURCE, "ascendify_cfast", ENV, "the emulator's C++ kernels")


def _library() -> tuple[str, Path]:
    """(module name, path) of the built library for this source, torch and Python."""
    return _EXT.library()


def module(build_if_missing: bool = True):
    """The loaded extension, or None (then :func:`why` says why). With ``build_if_missing=False`` a library not
    built yet gives None and nothing is decided: a later call may build it."""
    return _EXT.module(build_if_missing)


def loaded() -> bool:
    """True when the extension is loaded (never builds or loads it)."""
    return _EXT.loaded()


def why() -> str:
    """Why :func:`module` gave None ("" when it loaded or was not tried)."""
    return _EXT.why()


_DTYPES = {"Double": "float64", "ComplexDouble": "complex128"}


def attach() -> bool:
    """Load the extension (building it if needed) and connect it to the emulator's state: the memory counters,
    the recorder's op counts, the settings that need the Python kernels, the Python events. False: not
    available (the Python kernels serve)."""
    mod = module()
    if mod is None:
        return False
    import torch

    from ascendify.emulator import runtime
    from ascendify.emulator.ops import fidelity

    mod.install_guard()  # after install.install registered the Python one: the same answers, no Python call
    runtime.memory.attach(mod.addresses(), mod.account)
    runtime.recorder.external.append((mod.counts, mod.reset_counts))

    def event(kind: str, name: str, value) -> None:
        if kind == "float64":
            fidelity.float64(name, getattr(torch, _DTYPES.get(value, "float64")))
        elif kind == "oom":
            nbytes, index = value
            runtime.memory.check(nbytes, index)

    mod.set_events(event)

    def sync(settings, field: str | None = None) -> None:
        if settings is not runtime.settings:
            return
        if field in (None, "fp16_overflow", "overflow_mode", "single_device"):
            slow = settings.fp16_overflow != "off" or settings.overflow_mode != "inf_nan"
            mod.set_mode(slow, bool(settings.single_device))
        if field in (None, "memory_capacity"):
            runtime.memory.sync_limits()

    from ascendify.emulator.settings import OBSERVERS

    OBSERVERS.append(sync)
    sync(runtime.settings)
    return True


def main() -> int:
    """Build (again, after a failure) and load; say which."""
    return _EXT.main()


if __name__ == "__main__":
    sys.exit(main())
