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

``import torch`` alone does not enable the emulator (real torch_npu >= 2.5.1 autoloads on ``import torch``;
here use ``import torch_npu``, ``ascendify emulate``, or ``import ascendify.emulator``).
Turn it off: unset the variable, or set ``ASCENDIFY_EMULATE_HOOK=0``.
"""

from __future__ import annotations

import os
import sys

ENV = "ASCENDIFY_EMULATE"
OFF_ENV = "ASCENDIFY_EMULATE_HOOK"


def wanted() -> bool:
    """True when the environment asks for the emulated npu and the hook is not switched off."""
    return os.environ.get(ENV, "").strip().lower() == "npu" and os.environ.get(OFF_ENV, "1").strip() != "0"


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


def install() -> bool:
    """Append the finder when :func:`wanted` (once per process). Returns True when the finder is in place."""
    if not wanted():
        return False
    if any(isinstance(f, EmulatedTorchNpuFinder) for f in sys.meta_path):
        return True
    sys.meta_path.append(EmulatedTorchNpuFinder())
    return True
