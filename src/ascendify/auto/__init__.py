"""Automatic migration: run unmodified CUDA code on the NPU (or the emulated NPU, the CPU, XPU, MPS).

Three ways in (see ``docs/auto.md``)::

    ascendify run [--to npu|cpu|auto] train.py ARGS      # or: ascendify run -m package.module ARGS
    import ascendify.auto                                 # first line of the entry script: target from
                                                          # ASCENDIFY_TARGET (default auto)
    ascendify.auto.enable(target="cpu"); ...; ascendify.auto.disable()

``import ascendify.auto`` enables redirection only when the importing module is ``__main__`` (the entry
script); libraries, tests and the ``ascendify`` command itself import it without side effects, and this
package imports torch only when redirection is enabled.
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["enable", "disable", "report", "is_enabled", "UnsupportedOnTarget"]


def enable(target: Any = None, *, strict: bool = False):
    """Redirect CUDA calls to ``target`` (``"auto"``, ``"npu"``, ``"cpu"``, ``"xpu"``, ``"mps"``).

    ``None`` reads ``ASCENDIFY_TARGET`` (default ``auto``). ``strict`` turns unsupported calls (pure annotations
    included) and unmappable device values into errors at the call. Returns the session.
    """
    from ascendify.auto import runtime

    return runtime.enable(target, strict=strict)


def disable() -> dict[str, Any] | None:
    """Restore every patched attribute; returns the final report (None when not enabled)."""
    if "ascendify.auto.runtime" not in sys.modules:
        return None
    from ascendify.auto import runtime

    return runtime.disable()


def report() -> dict[str, Any] | None:
    """What was redirected so far (the JSON written by ``--log``), or None when not enabled."""
    if "ascendify.auto.runtime" not in sys.modules:
        return None
    from ascendify.auto import runtime

    return runtime.report()


def is_enabled() -> bool:
    rt = sys.modules.get("ascendify.auto.runtime")
    return rt is not None and rt.current() is not None


def __getattr__(name: str) -> Any:
    if name == "UnsupportedOnTarget":
        from ascendify.auto.record import UnsupportedOnTarget

        return UnsupportedOnTarget
    raise AttributeError(f"module 'ascendify.auto' has no attribute {name!r}")


def _imported_name(f) -> str | None:
    """The module name of the IMPORT_NAME instruction frame ``f`` is executing (None when unknown)."""
    try:
        import opcode

        code, i = f.f_code.co_code, f.f_lasti
        if code[i] != opcode.opmap["IMPORT_NAME"]:
            return None
        arg, j, shift = code[i + 1], i - 2, 8
        while j >= 0 and code[j] == opcode.EXTENDED_ARG:
            arg |= code[j + 1] << shift
            j, shift = j - 2, shift + 8
        return f.f_code.co_names[arg]
    except Exception:
        return None


def _imported_by_main() -> bool:
    """True when ``__main__`` (the entry script) runs ``import ascendify.auto`` (or ``from ascendify.auto import``);
    importing a submodule (``ascendify.auto.runner``) does not count."""
    from ascendify.program import frames

    f = frames.user_frame(2, frames.Skip(lambda filename: filename.startswith("<frozen importlib")))
    if f is None or f.f_globals.get("__name__") != "__main__":
        return False
    return _imported_name(f) in (None, __name__)


def _enable_on_import() -> None:
    if is_enabled():  # already on (ascendify run): nothing to do
        return
    from ascendify.auto import runner

    runner.enable_for_process(os.environ.get("ASCENDIFY_TARGET") or "auto",
                              strict=os.environ.get("ASCENDIFY_STRICT", "") not in ("", "0"),
                              log=os.environ.get("ASCENDIFY_LOG") or None,
                              entry=getattr(sys.modules.get("__main__"), "__file__", None),
                              quiet=os.environ.get("ASCENDIFY_QUIET", "") not in ("", "0"), implicit=True,
                              rewrite_checks=os.environ.get("ASCENDIFY_REWRITE_CHECKS", "1") != "0")


if os.environ.get("ASCENDIFY_AUTO", "1") != "0" and _imported_by_main():
    _enable_on_import()
