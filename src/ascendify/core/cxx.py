"""Build and load a C++ extension module against the installed torch, once per machine (shared by the emulator's
kernels, ``emulator/ops/cfast.cpp``, and the dump's recorder, ``precision/fastrec.cpp``).

An :class:`Extension` is compiled on first use with the system's C++ compiler (``$CXX``, else ``c++``/``g++``) into
``$ASCENDIFY_CACHE/<folder>`` (default ``~/.cache/ascendify``), keyed by the source, torch and Python, so a new
torch or Python builds it again. Where there is no compiler, the build fails, or its switch (an environment variable)
is ``0``, :meth:`Extension.module` returns None and the caller's Python code serves. A failed build leaves a
``.failed`` file with the reason next to where the library would be, so later processes do not try again;
:meth:`Extension.main` (``python -m`` of the owning module) removes it and tries again.

Only this module runs the compiler; the owners import nothing heavy until they ask for the module.
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


class Extension:
    """One C++ source built as the Python module ``<prefix>_<hash>``.

    ``env``: the environment variable that turns it off ("0"); ``what``: what it is, for messages ("the emulator's
    C++ kernels"); ``seconds``: about how long a build takes, said before it starts (once per machine)."""

    def __init__(self, source: Path, prefix: str, env: str, what: str, seconds: int = 30):
        self.source = source
        self.prefix = prefix
        self.env = env
        self.what = what
        self.seconds = seconds
        self._mod = None
        self._tried = False
        self._why = ""

    def library(self) -> tuple[str, Path]:
        """(module name, path) of the built library for this source, torch and Python."""
        import torch

        key = "\0".join((self.source.read_text(), torch.__version__, torch.__file__, sys.version,
                         sysconfig.get_platform()))  # fmt: skip
        name = f"{self.prefix}_{hashlib.sha256(key.encode()).hexdigest()[:16]}"
        folder = self.prefix.removeprefix("ascendify_")
        return name, cache_dir(folder) / f"{name}{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"

    @staticmethod
    def command(name: str, src: Path, out: Path) -> list[str]:
        """The compiler's command line: ``-DMODULE_NAME=<name>`` names the module's init function."""
        import torch
        from torch.utils import cpp_extension

        cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or "c++"
        abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
        inc = [f"-I{p}" for p in cpp_extension.include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]
        lib = str(Path(torch.__file__).parent / "lib")
        return [cxx, "-O2", "-fPIC", "-shared", "-std=c++20", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
                f"-DTORCH_EXTENSION_NAME={name}", f"-DMODULE_NAME={name}", "-DTORCH_API_INCLUDE_EXTENSION_H", *inc,
                str(src), "-o", str(out), f"-L{lib}", f"-Wl,-rpath,{lib}", "-lc10", "-ltorch_cpu", "-ltorch",
                "-ltorch_python"]  # fmt: skip

    def build(self, dest: Path, name: str) -> str:
        """Compile the source into ``dest`` (atomically); returns "" or why it failed. Said on stderr (once per
        machine: a pause is explained, on a terminal or in a log)."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        print(f"ascendify: compiling {self.what} (once per machine, about {self.seconds} s) ...", file=sys.stderr,
              flush=True)  # fmt: skip
        with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
            so = Path(tmp) / dest.name
            try:
                r = subprocess.run(self.command(name, self.source, so), capture_output=True, text=True, timeout=600)
            except (OSError, subprocess.SubprocessError) as e:
                return f"the C++ compiler could not run: {e}"
            if r.returncode != 0 or not so.exists():
                return "the C++ build failed: " + (r.stderr.strip().splitlines() or ["no output"])[-1][:300]
            os.replace(so, dest)  # a concurrent process sees the old file or the whole new one
        return ""

    def module(self, build_if_missing: bool = True):
        """The loaded extension, or None (then :meth:`why` says why). With ``build_if_missing=False`` a library
        not built yet gives None and nothing is decided: a later call may build it."""
        if not self._tried:
            mod, why = self._load(build_if_missing)
            if mod is None and why is None:
                return None
            self._mod, self._why, self._tried = mod, why, True
        return self._mod

    def _load(self, build_if_missing: bool):
        """(the extension, "") or (None, why); (None, None): not built, and not to be built now."""
        if os.environ.get(self.env, "1") == "0":
            return None, f"{self.env}=0"
        if sys.platform == "win32":
            return None, "not built on Windows"
        try:
            name, dest = self.library()
            failed = dest.with_suffix(".failed")
            if not dest.exists():
                if failed.exists():  # a build failed before for this source, torch and Python: not in every process
                    return None, failed.read_text().strip() + f" (remove {failed} to try again)"
                if not build_if_missing:
                    return None, None
                err = self.build(dest, name)
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
        except Exception as e:  # a read-only cache, a broken toolchain: the Python code serves
            return None, f"{type(e).__name__}: {e}"

    def loaded(self) -> bool:
        """True when the extension is loaded (never builds or loads it)."""
        return self._mod is not None

    def why(self) -> str:
        """Why :meth:`module` gave None ("" when it loaded or was not tried)."""
        return self._why

    def main(self) -> int:
        """Build (again, after a failure) and load; say which. For ``python -m`` of the owning module."""
        try:
            self.library()[1].with_suffix(".failed").unlink()
        except OSError:
            pass
        mod = self.module()
        if mod is None:
            print(f"ascendify: {self.what}: not available: {self._why}", file=sys.stderr)
            return 1
        print(f"ascendify: {self.what}: built ({Path(mod.__spec__.origin).name})")
        return 0
