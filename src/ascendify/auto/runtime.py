"""Turn redirection on and off, and hold the state of the current run.

Only one session is active per process. ``enable()`` resolves the target, installs every redirect of
:mod:`ascendify.auto.redirects` through one :class:`~ascendify.core.patching.Patches` registry, and
``disable()`` undoes all of it.
"""

from __future__ import annotations

import importlib
import os
import time
from typing import Any

from ascendify.auto.importhook import PostImportHooks
from ascendify.auto.record import Recorder
from ascendify.auto.target import Target
from ascendify.core.patching import Patches


class Session:
    """State of one enabled run: target, recorder, device mapper and the patch registry."""

    def __init__(self, target: Target, strict: bool) -> None:
        import torch

        from ascendify.auto.devmap import Mapper

        self.target = target
        self.strict = strict
        self.rec = Recorder(target.name, strict)
        self.Device = torch.device  # the real type, captured before devices.install replaces it
        self.mapper = Mapper(target, self.rec, self.Device)
        self.patches = Patches()
        self.import_hooks = PostImportHooks()
        self.patches.on_restore(self.import_hooks.remove)
        self.legacy_types: dict[str, Any] = {}
        self.started = time.time()
        self.implicit = False  # True when enabled by `import ascendify.auto` rather than by a call
        self.enable_seconds = 0.0


_SESSION: Session | None = None


def current() -> Session | None:
    return _SESSION


def _translate_visible_devices(s: Session) -> None:
    """``CUDA_VISIBLE_DEVICES`` -> ``ASCEND_RT_VISIBLE_DEVICES`` on an NPU, while the device has not started."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return
    if s.target.device_type == "npu":
        if "ASCEND_RT_VISIBLE_DEVICES" not in os.environ:
            os.environ["ASCEND_RT_VISIBLE_DEVICES"] = cvd
            s.rec.hit("env CUDA_VISIBLE_DEVICES", f"ASCEND_RT_VISIBLE_DEVICES={cvd}")

            def undo() -> None:
                if os.environ.get("ASCEND_RT_VISIBLE_DEVICES") == cvd:
                    del os.environ["ASCEND_RT_VISIBLE_DEVICES"]

            s.patches.on_restore(undo)
    elif s.target.device_type not in ("cuda", "xpu"):
        s.rec.noop("env CUDA_VISIBLE_DEVICES", f"no effect on {s.target.name}")


def enable(target: str | Target | None = None, *, strict: bool = False) -> Session:
    """Redirect CUDA calls to ``target`` (``auto``, ``npu``, ``cpu``, ``xpu``, ``mps``; default: ``ASCENDIFY_TARGET``
    or ``auto``). Calling it again with the same target returns the active session; another target raises."""
    global _SESSION
    t0 = time.perf_counter()
    early_env = None
    if _SESSION is not None and _SESSION.implicit and target is not None:
        # enabled by `import ascendify.auto` (target from the environment); an explicit call decides
        wanted = target.device_type if isinstance(target, Target) else str(target).strip().lower()
        if wanted not in ("auto", _SESSION.target.device_type):
            disable()
        else:
            _SESSION.implicit = False
    if not isinstance(target, Target):
        name = (target or os.environ.get("ASCENDIFY_TARGET") or "auto").strip().lower()
        if name in ("npu", "auto") and _SESSION is None:
            early_env = _early_visible_devices()  # before torch_npu starts the device
        try:
            target = _resolve(name)
        except BaseException:
            if early_env:
                early_env()
            raise
    if _SESSION is not None:
        if _SESSION.target.device_type != target.device_type:
            raise RuntimeError(
                f"ascendify.auto is already enabled for {_SESSION.target.name}; call disable() first"
            )
        _SESSION.strict = _SESSION.rec.strict = _SESSION.strict or strict
        return _SESSION
    s = Session(target, strict)
    if early_env is not None:
        if target.device_type == "npu":
            s.patches.on_restore(early_env)
            s.rec.hit("env CUDA_VISIBLE_DEVICES", f"ASCEND_RT_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']}")
        else:
            early_env()
    if target.device_type != "cuda":  # on a CUDA machine nothing needs redirecting
        from ascendify.auto import redirects

        try:
            jit_table = _jit_builtin_table()
            for name in redirects.MODULES:
                importlib.import_module(f"ascendify.auto.redirects.{name}").install(s)
            _alias_jit_builtins(s, jit_table)
        except BaseException:
            s.patches.restore()
            raise
        _translate_visible_devices(s)
        if target.device_type == "npu":
            s.rec.on_first = lambda: _first_touch(s)
    s.enable_seconds = time.perf_counter() - t0
    _SESSION = s
    return s


def _resolve(name: str) -> Target:
    """The :class:`Target` for ``name``, chosen by the one resolver (purpose ``redirect``); raises its
    ``DeviceError`` for a device that is not here."""
    from ascendify.core import devices
    from ascendify.device import placement

    was_on = devices.is_emulated_npu_enabled()
    r = placement.resolve(name, purpose="redirect")
    if r.kind == "npu" and not r.emulated:
        import torch_npu  # noqa: F401  (the device module the redirects use)
    return Target.of(r, (r.why,) if r.emulated and not was_on else ())


def _jit_builtin_table() -> dict[int, str]:
    """TorchScript's table of builtin ops by function id, built now if it is not yet (before any patch: built
    later, it would miss the originals of the functions replaced)."""
    from torch.jit import _builtins

    return _builtins._get_builtin_table()


def _alias_jit_builtins(s: Session, table: dict[int, str]) -> None:
    """Make each wrapper of a torch builtin (``torch.tensor``, ``torch.zeros``...) the same op to TorchScript.

    ``torch.jit.script`` looks a called function up in that table; a wrapper it does not find it tries to compile
    as Python source, and fails on the builtin it wraps (``from torch.distributed.optim import
    ZeroRedundancyOptimizer`` scripts the functional optimizers, which call ``torch.tensor``). Scripted code
    calls the op itself, so a CUDA device inside TorchScript is not redirected. Undone on restore."""
    added: list[int] = []
    for owner, name, original in s.patches.originals():
        op = table.get(id(original)) if original is not None else None
        new = getattr(owner, name, None)
        if op is not None and new is not None and new is not original and id(new) not in table:
            table[id(new)] = op
            added.append(id(new))

    def undo() -> None:
        for key in added:
            table.pop(key, None)

    s.patches.on_restore(undo)


def _early_visible_devices():
    """Copy CUDA_VISIBLE_DEVICES to ASCEND_RT_VISIBLE_DEVICES when only the first is set; return the undo."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is None or "ASCEND_RT_VISIBLE_DEVICES" in os.environ:
        return None
    os.environ["ASCEND_RT_VISIBLE_DEVICES"] = cvd

    def undo() -> None:
        if os.environ.get("ASCEND_RT_VISIBLE_DEVICES") == cvd:
            del os.environ["ASCEND_RT_VISIBLE_DEVICES"]

    return undo


def _first_touch(s: Session) -> None:
    """Run when an API is first seen: a script may set CUDA_VISIBLE_DEVICES after enable(), before device use."""
    if "ASCEND_RT_VISIBLE_DEVICES" not in os.environ and "CUDA_VISIBLE_DEVICES" in os.environ:
        _translate_visible_devices(s)


def disable() -> dict[str, Any] | None:
    """Undo every patch; return the final report (None when not enabled)."""
    global _SESSION
    s = _SESSION
    if s is None:
        return None
    s.patches.restore()
    _SESSION = None
    return report_of(s)


def report_of(s: Session) -> dict[str, Any]:
    d = s.rec.as_dict()
    d["target"] = {"device_type": s.target.device_type, "name": s.target.name, "kind": s.target.kind,
                   "dist_backend": s.target.dist_backend if s.target.device_type != "cuda" else "nccl",
                   "notes": list(s.target.notes)}
    d["patched_attributes"] = len(s.patches)
    d["enable_ms"] = round(s.enable_seconds * 1000, 2)
    return d


def report() -> dict[str, Any] | None:
    """The report of the active session so far (None when not enabled)."""
    return report_of(_SESSION) if _SESSION is not None else None
