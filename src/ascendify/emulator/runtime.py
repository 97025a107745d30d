"""The emulator's process-wide state: settings, memory counters, the recorder, the current device, and the
one registry of its monkey patches (:class:`ascendify.core.patching.Patches`).

One instance of each, created at import (cheap, enables nothing); :func:`ascendify.emulator.enable` fills the
settings from the environment.
"""

from __future__ import annotations

from ascendify.core.patching import Patches
from ascendify.emulator.memory import DeviceMemory
from ascendify.emulator.reporting.record import Recorder
from ascendify.emulator.settings import Settings

settings = Settings()
memory = DeviceMemory(settings)
recorder = Recorder()
enabled = False
current_device = [0]  # a list so that other modules share the one cell
patches = Patches()  # every attribute of torch the emulator replaces, through the one undoable registry
quiet = [0]  # > 0 while torch itself (printing) runs ops a user did not ask for: no fidelity events


def check_index(index: int | None) -> int:
    """The device index to use for ``index`` (None: the current device); raise for one beyond the count."""
    if index is None:
        return current_device[0]
    if index < 0 or index >= settings.device_count:
        raise RuntimeError(
            f"Invalid device ordinal npu:{index}: the emulator has {settings.device_count} device(s) "
            f"(npu:0..npu:{settings.device_count - 1}); set ASCENDIFY_EMULATE_DEVICES to change the count."
        )
    return index
