"""An emulated ``npu`` device on the CPU: run torch_npu-style code with no NPU, and fail where an NPU would.

>>> import ascendify.emulator as emu          # imports torch, enables nothing
>>> emu.enable()                              # doctest: +SKIP
>>> import torch; torch.ones(2, device="npu") # doctest: +SKIP
tensor([1., 1.], device='npu:0')

Ways to enable it:

- ``ascendify.emulator.enable(**settings)`` (idempotent; raises :class:`EmulatorError` where it must not run);
- ``ASCENDIFY_EMULATE=npu`` in the environment, then ``import ascendify.emulator`` (or ``ascendify.auto``,
  or ``ascendify emulate``) enables it;
- ``ascendify emulate -- python train.py ARGS`` runs a script under emulation and prints a summary.

While enabled, ``import torch_npu`` and ``from torch_npu.contrib import transfer_to_npu`` load a shim (only
when no real torch_npu is installed). :func:`report` summarises what ran; see ``docs/emulator.md``.
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading

from ascendify.emulator import runtime
from ascendify.emulator.errors import EmulatorError, NotEmulatedError, NpuFidelityError
from ascendify.emulator.settings import Settings

__all__ = [
    "EmulatorError",
    "NotEmulatedError",
    "NpuFidelityError",
    "Settings",
    "enable",
    "explain_exception",
    "is_enabled",
    "report",
    "reset_report",
    "settings",
]

settings: Settings = runtime.settings
_log = logging.getLogger(__name__)
_lock = threading.Lock()
_state: dict = {"installed": False, "direct_kernels": 0, "self_test": None}


def is_enabled() -> bool:
    """True once :func:`enable` has succeeded in this process."""
    return runtime.enabled


def enable(**overrides) -> None:
    """Make ``npu`` an emulated device of this process. Idempotent.

    ``overrides`` are :class:`Settings` fields (``fidelity="error"``, ``memory_capacity="16G"``...), applied
    over the environment variables. Raises :class:`EmulatorError` where a real torch_npu or another
    accelerator owns the process, on an unverified torch version, or when the self-test fails.
    """
    with _lock:
        if _state["installed"]:
            if _state.get("refused"):
                raise EmulatorError(_state["refused"])
            if overrides:
                settings.update(**overrides)
            runtime.enabled = True
            return
        from ascendify.emulator.device import backend

        why = backend.refusal()
        if why:
            raise EmulatorError(f"cannot enable the emulated npu device: {why}")
        env = Settings.from_env()
        for field in env.as_dict():
            setattr(settings, field, getattr(env, field))
        settings.update(**overrides)
        from ascendify.emulator import install

        _state["direct_kernels"] = install.install()
        _state["installed"] = True
        runtime.enabled = True
        from ascendify.emulator.api import shim

        shim.install()
        from ascendify.emulator.compile import backends

        backends.install_on_compile()  # torch_npu's Dynamo backends, at the first torch.compile
        _install_peer_hooks()
        if settings.self_test:
            from ascendify.emulator.reporting import selftest

            problem = selftest.autograd_engine_problem()
            if problem:  # a backward() ran before enable(); without the self-test, the first npu backward says so
                runtime.enabled = False
                _state["refused"] = f"cannot enable the emulated npu device: {problem}"
                raise EmulatorError(_state["refused"])
            try:
                _state["self_test"] = selftest.run()
            except Exception as e:
                runtime.enabled = False
                raise EmulatorError(
                    f"the emulated npu device failed its self-test ({type(e).__name__}: {e}); this torch build "
                    "is not compatible with the emulator"
                ) from e
        reset_report()


def _install_peer_hooks() -> None:
    """Let the AMP op lists and the ``hccl`` backend (written separately) plug in, if present."""
    for name in ("ascendify.emulator.ops.autocast", "ascendify.emulator.distributed"):
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:
                continue
            raise
        install = getattr(mod, "install", None)
        if callable(install):
            install()


def explain_exception(exc: BaseException) -> str | None:
    """What to tell a user whose program died of ``exc`` under the emulator (a CUDA script that was never
    migrated...), or None; for program runners to print after the traceback."""
    from ascendify.emulator.api.cuda_hint import explain_exception as explain

    return explain(exc)


def report() -> dict:
    """A summary of the emulated run so far (plain data, JSON-ready)."""
    from ascendify.emulator import render

    return render.build()


def reset_report() -> None:
    """Forget the counters (ops, fidelity events); memory peaks restart from the current allocation."""
    runtime.recorder.reset()
    from ascendify.emulator.compile import events

    events.reset()
    for i in range(settings.device_count):
        runtime.memory.reset_peak(i)


def _set_active(active: bool) -> None:
    """For test suites that share one process with CPU-only tests: while inactive, :func:`is_enabled`,
    ``torch.npu.is_available()`` and ``ascendify.core.devices`` say there is no npu (the backend stays
    registered; ``npu`` tensors keep working). Only for a process where :func:`enable` has run."""
    if active and not _state["installed"]:
        raise EmulatorError("_set_active(True) before enable()")
    runtime.enabled = bool(active)


def _auto_enable() -> None:
    from ascendify.core import devices

    # imported by torch's backend autoload (ascendify._emulate_hook.autoload), which enables it itself; looked up,
    # not imported: the hook imports this package
    hook = sys.modules.get("ascendify._emulate_hook")
    if hook is not None and hook.autoloading():
        return
    if devices.emulation_requested() and not runtime.enabled:
        enable()


_auto_enable()
