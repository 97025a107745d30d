"""Packaging extras that pyproject.toml cannot express: ``ascendify_emulate.pth`` in site-packages, and the demo's
example project inside the wheel.

The .pth runs one line at interpreter start: with ``ASCENDIFY_EMULATE`` unset it is a dictionary lookup; with
``ASCENDIFY_EMULATE=npu`` it installs the torch-free import hook of ``ascendify._emulate_hook`` (``import
torch_npu`` then loads the emulator). Installed by a wheel (``pip install .``) and by ``pip install -e .``.
A wheel also carries ``examples/cuda_project`` as ``ascendify/_examples/cuda_project``, so ``ascendify demo`` runs
after ``pip install`` without the source checkout (an editable install finds the checkout's copy).
Everything else is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH_NAME = "ascendify_emulate.pth"
# one line, run by site.py at interpreter start; keep it cheap (no import unless the variable is set)
PTH_LINE = (
    'import os; os.environ.get("ASCENDIFY_EMULATE") and '
    '__import__("ascendify._emulate_hook", fromlist=["install"]).install()\n'
)


EXAMPLE = Path(__file__).resolve().parent / "examples" / "cuda_project"
EXAMPLE_IN_PACKAGE = ("ascendify", "_examples", "cuda_project")


def _write_pth(folder: str) -> None:
    Path(folder, PTH_NAME).write_text(PTH_LINE, encoding="utf-8")


def _copy_example(build_lib: str) -> None:
    if EXAMPLE.is_dir():
        dest = Path(build_lib, *EXAMPLE_IN_PACKAGE)
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pt", "*.so"))


class BuildPyWithPth(build_py):
    """A wheel carries the .pth at its root, which pip installs into site-packages."""

    def run(self):
        super().run()
        _write_pth(self.build_lib)
        if not self.editable_mode:
            _copy_example(self.build_lib)


class EditableWheelWithPth(editable_wheel):
    """``pip install -e .`` builds an editable wheel: put the .pth in it too."""

    def _run_build_commands(self, dist_name, unpacked_wheel, build_lib, tmp_dir):
        _write_pth(unpacked_wheel)
        return super()._run_build_commands(dist_name, unpacked_wheel, build_lib, tmp_dir)


setup(cmdclass={"build_py": BuildPyWithPth, "editable_wheel": EditableWheelWithPth})
