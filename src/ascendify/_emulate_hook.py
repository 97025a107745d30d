"""``ASCENDIFY_EMULATE=npu python train.py``: ``import torch_npu`` works with no code change and no NPU.

Installed with the package as ``ascendify_emulate.pth`` in site-packages, whose one line runs at every
interpreter start::

    import os; os.environ.get("ASCENDIFY_EMULATE") and __import__("ascendify._emulate_hook").[...].install()

(the line is ``PTH_LINE`` in ``setup.py``). With the variable unset that is one environment lookup: this module
is not even imported. With ``ASCENDIFY_EMULATE=npu``, :func:`install` appends a finder to the END of
``sys.meta_path`` (still torch-free).
Python consults it only for a module no other finder found, so a real torch_npu always wins; the finder
answers only for ``torch_npu`` and its sub-modules: it enables the emulator (``ascendify.emulator.enable()``,
which imports torch and installs the torch_npu shim) and hands the import to the shim.

``import torch`` alone enables it too, as real torch_npu (>= 2.5.1) loads itself with torch: ``pyproject.toml``
declares :func:`autoload` in the entry point group ``torch.backends``, which ``torch/__init__.py`` calls
(``_import_device_backends``) near the end of ``import torch``; the ``torch_npu`` shim is then imported, as
the real one is. :func:`autoload` is a no-op unless the variable
asks for the emulator (and imports nothing then).
Turn it off: unset the variable, or set ``ASCENDIFY_EMULATE_HOOK=0`` (``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns
off torch's autoload only; ``import torch_npu`` then still loads the emulator).
"""

from __future__ import annotations

import os
import sys

ENV = "ASCENDIFY_EMULATE"
OFF_ENV = "ASCENDIFY_EMULATE_HOOK"


def wanted() -> bool:
    """True when the environment asks for the emulated npu and the hook is not switched off."""
    return os.environ.get(ENV, "").strip().lower() == "npu" and os.environ.get(OFF_ENV, "1").strip() != "0"


OFF_VALUES = ("", "0", "off", "no", "false", "none", "cpu")  # the variable set, but to "not emulated"
_WARNED_ENV = "ASCENDIFY_EMULATE_WARNED"  # said once per process tree (children inherit the variable too)


def bad_value() -> str | None:
    """The message for an ``ASCENDIFY_EMULATE`` value that means neither on (``npu``) nor off (unset, ``0``...):
    ``1`` or ``NPU1`` is not silently ignored. None for a value that is understood."""
    value = os.environ.get(ENV)
    if value is None or value.strip().lower() in ("npu", *OFF_VALUES):
        return None
    return (f"ascendify: {ENV}={value!r} is not understood: the emulated npu is NOT enabled\n"
            f"  (set {ENV}=npu to enable it, or unset it to run without it)")


def warn_bad_value() -> None:
    """Say :func:`bad_value` on stderr, once per process tree."""
    msg = bad_value()
    if msg and not os.environ.get(_WARNED_ENV):
        os.environ[_WARNED_ENV] = "1"
        print(msg, file=sys.stderr)


class EmulatedTorchNpuFinder:
    """Last-resort finder for ``torch_npu``: enable the emulator, then let its shim provide the module."""

    _busy = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch_npu" and not fullname.startswith("torch_npu."):
            return None
        if EmulatedTorchNpuFinder._busy:
            return None
        EmulatedTorchNpuFinder._busy = True
        try:
            import ascendify.emulator as emulator

            emulator.enable()
            for finder in list(sys.meta_path):
                if finder is self or isinstance(finder, EmulatedTorchNpuFinder):
                    continue
                find = getattr(finder, "find_spec", None)
                spec = find(fullname, path, target) if find else None
                if spec is not None:
                    return spec
            return None
        finally:
            EmulatedTorchNpuFinder._busy = False

    def invalidate_caches(self) -> None:
        pass


_autoload = {"active": False}


def autoloading() -> bool:
    """True while :func:`autoload` enables the emulator (``ascendify.emulator`` then skips its own
    enable-on-import, so that :func:`autoload` can report a refusal instead of failing ``import torch``)."""
    return _autoload["active"]


def autoload() -> None:
    """torch's device-backend autoload (entry point group ``torch.backends``): with ``ASCENDIFY_EMULATE=npu``,
    ``import torch`` brings up the emulated npu, as ``import torch`` loads a real torch_npu on an NPU machine.

    Runs inside ``import torch`` (``torch`` is in ``sys.modules`` but still initialising). Does nothing when
    the variable is unset, when a real torch-npu is installed (it autoloads itself and the emulator never
    stands in for it), or when ``ascendify.emulator`` is being imported already (the import that imported
    torch; it enables the emulator itself when done). A refusal (CUDA in the process, an unverified torch...)
    is a warning, not a failed ``import torch``; ``import torch_npu`` then raises the reason.

    While it enables, torch's "initialising" mark is lifted: the self-test runs a backward, whose device
    thread imports torch and would otherwise wait for this thread's ``import torch`` to finish (a deadlock).
    Every name the emulator uses is defined by then (torch calls its backends after its own definitions).
    """
    if not wanted() or "ascendify.emulator" in sys.modules:
        return
    try:
        from importlib import metadata

        metadata.distribution("torch-npu")
        return  # a real torch_npu: ASCENDIFY_EMULATE is ignored, as everywhere else
    except Exception:
        pass
    spec = getattr(sys.modules.get("torch"), "__spec__", None)
    initializing = getattr(spec, "_initializing", False)
    _autoload["active"] = True
    try:
        if spec is not None:
            spec._initializing = False
        import ascendify.emulator as emulator

        try:
            emulator.enable()
            import torch_npu  # noqa: F401  (the shim; loaded with torch, as the real one is)
        except emulator.EmulatorError as e:
            import warnings

            warnings.warn(f"ASCENDIFY_EMULATE=npu: import torch did not bring up the emulated npu: {e}",
                          RuntimeWarning, stacklevel=2)
    finally:
        _autoload["active"] = False
        if spec is not None:
            spec._initializing = initializing


def install() -> bool:
    """Append the finder when :func:`wanted` (once per process). Returns True when the finder is in place. A
    value of the variable that means neither on nor off (``1``, ``NPU1``) is said on stderr, not ignored
    silently."""
    if not wanted():
        warn_bad_value()
        return False
    if any(isinstance(f, EmulatedTorchNpuFinder) for f in sys.meta_path):
        return True
    sys.meta_path.append(EmulatedTorchNpuFinder())
    return True
