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

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from ascendify.core.fileio import cache_dir

ENV = "ASCENDIFY_EMULATE_CKERNELS"
SOURCE = Path(__file__).with_name("cfast.cpp")

_mod = None
_tried = False
_why = ""


def _library() -> tuple[str, Path]:
    """(module name, path) of the built library for this source, torch and Python."""
    import torch

    key = "\0".join((SOURCE.read_text(), torch.__version__, torch.__file__, sys.version, sysconfig.get_platform()))
    name = f"ascendify_cfast_{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    return name, cache_dir("cfast") / f"{name}{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"


def _command(name: str, src: Path, out: Path) -> list[str]:
    import torch
    from torch.utils import cpp_extension

    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or "c++"
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    inc = [f"-I{p}" for p in cpp_extension.include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]
    lib = str(Path(torch.__file__).parent / "lib")
    return [cxx, "-O2", "-fPIC", "-shared", "-std=c++20", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
            f"-DTORCH_EXTENSION_NAME={name}", "-DTORCH_API_INCLUDE_EXTENSION_H", *inc, str(src), "-o", str(out),
            f"-L{lib}", f"-Wl,-rpath,{lib}", "-lc10", "-ltorch_cpu", "-ltorch", "-ltorch_python"]


def build(dest: Path, name: str) -> str:
    """Compile ``cfast.cpp`` into ``dest`` (atomically); returns "" or why it failed. Said on stderr (once per
    machine: a 30 s pause is explained, on a terminal or in a log)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    print("ascendify: compiling the emulator's C++ kernels (once per machine, about 30 s) ...",
          file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        so = Path(tmp) / dest.name
        try:
            r = subprocess.run(_command(name, SOURCE, so), capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.SubprocessError) as e:
            return f"the C++ compiler could not run: {e}"
        if r.returncode != 0 or not so.exists():
            return "the C++ build failed: " + (r.stderr.strip().splitlines() or ["no output"])[-1][:300]
        os.replace(so, dest)  # a concurrent process sees the old file or the whole new one
    return ""


def module(build_if_missing: bool = True):
    """The loaded extension, or None (then :func:`why` says why). With ``build_if_missing=False`` a library not
    built yet gives None and nothing is decided: a later call may build it."""
    global _mod, _tried, _why
    if not _tried:
        mod, why = _load(build_if_missing)
        if mod is None and why is None:
            return None
        _mod, _why, _tried = mod, why, True
    return _mod


def _load(build_if_missing: bool):
    """(the extension, "") or (None, why); (None, None): not built, and not to be built now."""
    if os.environ.get(ENV, "1") == "0":
        return None, f"{ENV}=0"
    if sys.platform == "win32":
        return None, "not built on Windows"
    try:
        name, dest = _library()
        failed = dest.with_suffix(".failed")
        if not dest.exists():
            if failed.exists():  # a build failed before for this source, torch and Python: not in every process
                return None, failed.read_text().strip() + f" (remove {failed} to try again)"
            if not build_if_missing:
                return None, None
            err = build(dest, name)
            if err:
                try:
                    failed.write_text(err + "\n")
                except OSError:
                    pass
                return None, err
        spec = importlib.util.spec_from_loader(name, importlib.machinery.ExtensionFileLoader(name, str(dest)))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod, ""
    except Exception as e:  # a read-only cache, a broken toolchain: the Python kernels serve
        return None, f"{type(e).__name__}: {e}"


def loaded() -> bool:
    """True when the extension is loaded (never builds or loads it)."""
    return _mod is not None


def why() -> str:
    """Why :func:`module` gave None ("" when it loaded or was not tried)."""
    return _why


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
    try:
        _library()[1].with_suffix(".failed").unlink()
    except OSError:
        pass
    mod = module()
    if mod is None:
        print(f"ascendify: the emulator's C++ kernels are not available: {_why}", file=sys.stderr)
        return 1
    print(f"ascendify: the emulator's C++ kernels are built ({Path(mod.__spec__.origin).name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
